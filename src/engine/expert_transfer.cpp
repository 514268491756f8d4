#include "expert_transfer.hpp"

#include "steadymoe/core/digest.hpp"
#include "steadymoe/core/error.hpp"

#include <fmt/format.h>

#include <cstring>

namespace steadymoe {

namespace {

constexpr uint32_t kExpertMagic = 0x534d4558;  // "SMEX"

template <typename T>
void put(Bytes& b, const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
}

void put_tensor(Bytes& b, const Tensor& t) {
    put(b, uint8_t(t.defined()));
    if (!t.defined()) return;
    put(b, int32_t(t.dtype()));
    put(b, uint32_t(t.shape().size()));
    for (int64_t d : t.shape()) put(b, d);
    put(b, uint64_t(t.nbytes()));
    const auto* p = static_cast<const uint8_t*>(t.raw());
    b.insert(b.end(), p, p + t.nbytes());
}

class Cursor {
public:
    Cursor(const Bytes& b, size_t& at, int from) : b_(b), at_(at), from_(from) {}
    size_t remaining() const { return b_.size() - at_; }
    const uint8_t* take(size_t n) {
        SMOE_CHECK(at_ + n <= b_.size(), Communication, "expert weights from rank {} are truncated", from_);
        const uint8_t* p = b_.data() + at_;
        at_ += n;
        return p;
    }
    template <typename T>
    T get() {
        T v;
        std::memcpy(&v, take(sizeof(T)), sizeof(T));
        return v;
    }
    Tensor tensor() {
        if (get<uint8_t>() == 0) return Tensor();
        const int32_t code = get<int32_t>();
        const uint32_t rank = get<uint32_t>();
        SMOE_CHECK(code >= 0 && code <= int32_t(DType::BOOL) && rank <= 4, Communication,
                   "expert weights from rank {}: a tensor of dtype code {} and rank {}", from_, code, rank);
        const auto dtype = DType(code);
        Shape shape(rank);
        uint64_t elements = 1;
        for (int64_t& d : shape) {
            d = get<int64_t>();
            SMOE_CHECK(d >= 0 && d <= (int64_t(1) << 40), Communication, "expert weights from rank {}: a dimension of {}",
                       from_, d);
            elements *= uint64_t(d);
            SMOE_CHECK(elements <= (uint64_t(1) << 40), Communication, "expert weights from rank {}: a tensor too large",
                       from_);
        }
        const uint64_t bytes = get<uint64_t>();
        // Only what arrived is allocated: sizes are checked against the bytes before the tensor is made.
        SMOE_CHECK(bytes == elements * dtype_size(dtype) && bytes <= remaining(), Communication,
                   "expert weights from rank {}: {} bytes announced for a tensor of {} ({} left in the message)", from_,
                   bytes, elements * dtype_size(dtype), remaining());
        Tensor t = Tensor::zeros(dtype, shape);
        std::memcpy(t.mutable_raw(), take(bytes), bytes);
        return t;
    }

private:
    const Bytes& b_;
    size_t& at_;
    int from_;
};

}  // namespace

void pack_expert_bytes(int64_t id, const ExpertWeights& expert, Bytes& out) {
    const size_t start = out.size();
    put(out, kExpertMagic);
    put(out, id);
    for (const WeightMatrix* m : {&expert.gate, &expert.up, &expert.down}) {
        put(out, int32_t(m->format));
        put(out, m->rows), put(out, m->cols), put(out, m->global_scale);
        put_tensor(out, m->data);
        put_tensor(out, m->scale);
    }
    put(out, fnv1a(kFnvOffset, out.data() + start, out.size() - start));
}

ExpertWeights unpack_expert_bytes(const Bytes& in, size_t& at, const MoeConfig& config, int from, int64_t* id) {
    const size_t start = at;
    Cursor c(in, at, from);
    SMOE_CHECK(c.get<uint32_t>() == kExpertMagic, Communication, "rank {} sent something that is not expert weights",
               from);
    *id = c.get<int64_t>();
    SMOE_CHECK(*id >= 0 && *id < config.n_routed_experts, Communication, "rank {} sent weights of expert {} (of {})",
               from, *id, config.n_routed_experts);
    ExpertWeights e;
    const char* names[] = {"gate", "up", "down"};
    WeightMatrix* matrices[] = {&e.gate, &e.up, &e.down};
    for (int i = 0; i < 3; ++i) {
        WeightMatrix& m = *matrices[i];
        m.format = ExpertFormat(c.get<int32_t>());
        m.rows = c.get<int64_t>(), m.cols = c.get<int64_t>(), m.global_scale = c.get<float>();
        m.data = c.tensor();
        m.scale = c.tensor();
        m.name = fmt::format("expert {} {} (from rank {})", *id, names[i], from);
    }
    const uint64_t digest = fnv1a(kFnvOffset, in.data() + start, at - start);
    SMOE_CHECK(c.get<uint64_t>() == digest, Communication, "expert {} from rank {} arrived damaged (digest mismatch)",
               *id, from);
    const int64_t H = config.hidden_size, I = config.moe_intermediate_size;
    SMOE_CHECK(e.gate.rows == I && e.gate.cols == H && e.up.rows == I && e.up.cols == H && e.down.rows == H &&
                   e.down.cols == I,
               Communication, "expert {} from rank {} has the wrong sizes for this layer", *id, from);
    for (const WeightMatrix* m : matrices) m->validate();
    return e;
}

}  // namespace steadymoe
