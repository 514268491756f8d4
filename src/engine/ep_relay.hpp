// The wire of EpMoeLayer's exchanges, and its two-level form for ranks grouped into nodes.
//
// One level: rank s sends every rank d one dispatch message M(s, d) — its status, the placement
// generation, the rows of the tokens d serves and their (row, slot, weight) pairs — and d returns one
// reply R(d, s) with a result row per pair.
//
// Two levels: ranks are nodes of `per_node` consecutive ranks; the ranks with the same local index form
// a rail. A token crosses to another node once, however many of that node's ranks hold its experts:
//   hop 1 (rail):  s sends the gateway of each node (the rank of s's rail there) one bundle — each
//                  token once, and per rank d of the node its token list and pairs;
//   hop 2 (node):  the gateway rebuilds M(s, d) byte for byte for each rank d of its node and sends d
//                  the messages of all the sources on its rail.
// Every rank then holds M(s, d) from every source s, exactly as in one level; replies go back the same
// way (node, then rail), so home ranks get R(d, s) from every d. Results and their order are those of
// one level: the output bytes do not change.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "steadymoe/core/error.hpp"
#include "steadymoe/parallel/transport.hpp"

namespace steadymoe::ep {

// A little-endian byte writer / reader for the dispatch and combine messages.
class Writer {
  public:
    template <typename T>
    void put(const T& v) {
        append(&v, sizeof(T));
    }
    void append(const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        bytes.insert(bytes.end(), b, b + n);
    }
    Bytes bytes;
};

class Reader {
  public:
    Reader(const Bytes& b, int from) : bytes_(b), from_(from) {}
    template <typename T>
    T get() {
        T v;
        std::memcpy(&v, take(sizeof(T)), sizeof(T));
        return v;
    }
    size_t remaining() const { return bytes_.size() - at_; }
    const uint8_t* take(size_t n) {
        SMOE_CHECK(n <= remaining(), Communication, "a message from rank {} is truncated ({} of {} bytes)",
                   from_, bytes_.size(), at_ + n);
        const uint8_t* p = bytes_.data() + at_;
        at_ += n;
        return p;
    }

  private:
    const Bytes& bytes_;
    int from_;
    size_t at_ = 0;
};

// One destination's share of this rank's tokens: each token once, then its (token, slot) pairs.
struct Outgoing {
    std::vector<int64_t> tokens;     // ascending
    std::vector<int32_t> pair_row;   // index into tokens
    std::vector<int32_t> pair_slot;  // the destination's physical slot
    std::vector<float> pair_weight;
    std::vector<int64_t> pair_home;  // contribution row t*K + k on this rank
};

// How a message's token rows travel: in the input's dtype, or — when every routed expert takes
// FP8-quantised activations — as the sender's quantisation of them: H e4m3 codes, then one f32 scale per
// 128 values (about half of bf16's bytes). The receiving experts then use exactly the operand they would
// have made (quantising is a function of the row alone) and skip making it.
// The FP8 forms keep the input's dtype: the experts round their stage outputs to it.
enum class RowEncoding : uint8_t { F32 = 0, Bf16 = 1, Fp8OfF32 = 2, Fp8OfBf16 = 3 };
inline constexpr uint8_t kRowEncodings = 4;
inline bool is_fp8(RowEncoding e) { return e == RowEncoding::Fp8OfF32 || e == RowEncoding::Fp8OfBf16; }
inline bool has_bf16_activations(RowEncoding e) { return e == RowEncoding::Bf16 || e == RowEncoding::Fp8OfBf16; }
size_t row_bytes(RowEncoding encoding, int64_t hidden);

// Every dispatch message starts with the sender's status and placement generation.
inline constexpr uint8_t kDispatchOk = 0, kDispatchFailed = 1;
inline constexpr size_t kDispatchHeader = 1 + sizeof(uint64_t);

// M(me, d): the one-level dispatch message for destination d.
// `rows` holds every token's row, row_bytes(encoding, H) bytes each.
Bytes dispatch_message(const Outgoing& o, uint64_t generation, RowEncoding encoding, const uint8_t* rows,
                       size_t row_bytes);

struct Nodes {
    int ranks = 1, per_node = 1;
    int nodes() const { return ranks / per_node; }
    int node(int r) const { return r / per_node; }
    int local(int r) const { return r % per_node; }
    int rank(int node, int local) const { return node * per_node + local; }
    int gateway(int r, int node_of_peer) const { return rank(node_of_peer, local(r)); }
};

// Hop 1 of a dispatch: what `me` sends each rank (empty but for the gateways on its rail). `failure`,
// when not empty, is the message every gateway gets instead (a rank whose input cannot run).
// `rows_to_nodes` (when set) gets the token rows each node's bundle carries.
std::vector<Bytes> rail_bundles(const Nodes& n, int me, const std::vector<Outgoing>& out, uint64_t generation,
                                RowEncoding encoding, const uint8_t* rows, size_t row_bytes, const Bytes& failure,
                                std::vector<int64_t>* rows_to_nodes = nullptr);
// Hop 2 at a gateway: from the bundles received on its rail, the messages M(s, d) for each rank d of its
// node, packed per d. `hidden` is the layer's H (a row is row_bytes(encoding, H) bytes).
std::vector<Bytes> node_forward(const Nodes& n, int me, const std::vector<Bytes>& from_rail, int64_t hidden);
// At every rank: M(s, me) for every source s, from its node's gateways.
std::vector<Bytes> unpack_by_source(const Nodes& n, const std::vector<Bytes>& from_node);

// Combine, hop 2 back: this rank's replies R(me, s), to the gateway of each source's rail in its node.
std::vector<Bytes> node_return(const Nodes& n, int me, const std::vector<Bytes>& replies);
// Combine, hop 1 back, at a gateway: R(d, s) of every rank d of its node, packed per source s.
std::vector<Bytes> rail_return(const Nodes& n, int me, const std::vector<Bytes>& from_node);
// At home: R(d, me) for every rank d.
std::vector<Bytes> unpack_by_destination(const Nodes& n, const std::vector<Bytes>& from_rail);

}  // namespace steadymoe::ep
