#include "ep_relay.hpp"

#include "steadymoe/kernels/cpu/activation.hpp"

#include <algorithm>

namespace steadymoe::ep {

namespace {

// A list of (peer, bytes) entries: what one rank relays to another for several peers at once.
void put_entry(Writer& w, int peer, const Bytes& b) {
    w.put(int32_t(peer)), w.put(int64_t(b.size()));
    w.append(b.data(), b.size());
}

// Reads the `count` entries of `from`'s list into `into[peer]`, each peer at most once and among `allowed`.
template <typename Allowed>
void read_entries(const Bytes& list, int from, int ranks, std::vector<Bytes>& into, std::vector<bool>& seen,
                  Allowed allowed) {
    Reader r(list, from);
    const int32_t count = r.get<int32_t>();
    SMOE_CHECK(count >= 0 && count <= ranks, Communication, "rank {} relayed a list of {} messages", from,
               count);
    for (int32_t i = 0; i < count; ++i) {
        const int32_t peer = r.get<int32_t>();
        const int64_t size = r.get<int64_t>();
        SMOE_CHECK(peer >= 0 && peer < ranks && allowed(peer) && !seen[size_t(peer)] && size >= 0 &&
                       size_t(size) <= r.remaining(),
                   Communication, "rank {} relayed a malformed message (for rank {}, {} bytes)", from, peer,
                   size);
        const uint8_t* p = r.take(size_t(size));
        into[size_t(peer)].assign(p, p + size);
        seen[size_t(peer)] = true;
    }
    SMOE_CHECK(r.remaining() == 0, Communication, "rank {} relayed {} stray bytes", from, r.remaining());
}

// One message per peer from the lists the relays sent (`relays(g, peer)`: whether g may relay peer's);
// every peer exactly once.
template <typename Relays>
std::vector<Bytes> unpack_relayed(int ranks, const std::vector<Bytes>& lists, Relays relays,
                                  const char* what) {
    std::vector<Bytes> by_peer(static_cast<size_t>(ranks));
    std::vector<bool> seen(static_cast<size_t>(ranks), false);
    for (int g = 0; g < ranks; ++g) {
        if (lists[size_t(g)].empty()) continue;  // not a relay of this rank
        read_entries(lists[size_t(g)], g, ranks, by_peer, seen, [&](int peer) { return relays(g, peer); });
    }
    for (size_t r = 0; r < seen.size(); ++r)
        SMOE_CHECK(seen[r], Communication, "no {} from rank {} arrived through the relays", what, r);
    return by_peer;
}

template <typename T>
void append_vector(Writer& w, const std::vector<T>& v) {
    w.append(v.data(), v.size() * sizeof(T));
}

}  // namespace

size_t row_bytes(RowEncoding encoding, int64_t hidden) {
    switch (encoding) {
        case RowEncoding::F32: return size_t(hidden) * 4;
        case RowEncoding::Bf16: return size_t(hidden) * 2;
        case RowEncoding::Fp8OfF32:
        case RowEncoding::Fp8OfBf16: return size_t(hidden) + size_t(cpu::fp8_groups(hidden)) * 4;
    }
    return 0;
}

Bytes dispatch_message(const Outgoing& o, uint64_t generation, RowEncoding encoding, const uint8_t* rows,
                       size_t row_bytes) {
    Writer w;
    w.put(kDispatchOk), w.put(generation);
    w.put(encoding), w.put(int64_t(o.tokens.size())), w.put(int64_t(o.pair_row.size()));
    for (int64_t t : o.tokens) w.append(rows + size_t(t) * row_bytes, row_bytes);
    append_vector(w, o.pair_row);
    append_vector(w, o.pair_slot);
    append_vector(w, o.pair_weight);
    return std::move(w.bytes);
}

std::vector<Bytes> rail_bundles(const Nodes& n, int me, const std::vector<Outgoing>& out, uint64_t generation,
                                RowEncoding encoding, const uint8_t* rows, size_t row_bytes, const Bytes& failure,
                                std::vector<int64_t>* rows_to_nodes) {
    std::vector<Bytes> bundles(static_cast<size_t>(n.ranks));
    for (int node = 0; node < n.nodes(); ++node) {
        Bytes& b = bundles[size_t(n.gateway(me, node))];
        if (!failure.empty()) {
            b = failure;
            continue;
        }
        // The node's tokens, each once, ascending (every destination's list is ascending too).
        std::vector<int64_t> tokens;
        for (int l = 0; l < n.per_node; ++l) {
            const std::vector<int64_t>& t = out[size_t(n.rank(node, l))].tokens;
            tokens.insert(tokens.end(), t.begin(), t.end());
        }
        std::sort(tokens.begin(), tokens.end());
        tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
        if (rows_to_nodes) rows_to_nodes->at(size_t(node)) = int64_t(tokens.size());
        Writer w;
        w.put(kDispatchOk), w.put(generation), w.put(int32_t(n.per_node));
        w.put(encoding), w.put(int64_t(row_bytes)), w.put(int64_t(tokens.size()));
        for (int64_t t : tokens) w.append(rows + size_t(t) * row_bytes, row_bytes);
        for (int l = 0; l < n.per_node; ++l) {
            const Outgoing& o = out[size_t(n.rank(node, l))];
            w.put(int64_t(o.tokens.size()));
            for (int64_t t : o.tokens)
                w.put(int32_t(std::lower_bound(tokens.begin(), tokens.end(), t) - tokens.begin()));
            w.put(int64_t(o.pair_row.size()));
            append_vector(w, o.pair_row);
            append_vector(w, o.pair_slot);
            append_vector(w, o.pair_weight);
        }
        b = std::move(w.bytes);
    }
    return bundles;
}

std::vector<Bytes> node_forward(const Nodes& n, int me, const std::vector<Bytes>& from_rail, int64_t hidden) {
    std::vector<Writer> to(static_cast<size_t>(n.per_node));
    for (Writer& w : to) w.put(int32_t(n.nodes()));
    for (int node = 0; node < n.nodes(); ++node) {
        const int s = n.gateway(me, node);
        const Bytes& bundle = from_rail[size_t(s)];
        Reader r(bundle, s);
        if (r.get<uint8_t>() != kDispatchOk) {  // a failure note: every rank of the node hears it
            for (Writer& w : to) put_entry(w, s, bundle);
            continue;
        }
        const uint64_t generation = r.get<uint64_t>();
        const int32_t per_node = r.get<int32_t>();
        SMOE_CHECK(per_node == n.per_node, Communication,
                   "rank {} groups ranks into nodes of {}, this rank into {}", s, per_node, n.per_node);
        const uint8_t encoding = r.get<uint8_t>();
        const int64_t row_bytes = r.get<int64_t>(), tokens = r.get<int64_t>();
        SMOE_CHECK(encoding < kRowEncodings, Communication,
                   "rank {} sent a bundle with token rows in an unknown encoding {} (0 f32, 1 bf16, 2-3 FP8)", s, encoding);
        SMOE_CHECK(size_t(row_bytes) == ep::row_bytes(RowEncoding(encoding), hidden) && tokens >= 0 &&
                       size_t(tokens) <= r.remaining() / size_t(row_bytes),
                   Communication, "rank {} sent a malformed bundle ({} rows of {} bytes in {})", s, tokens,
                   row_bytes, r.remaining());
        const uint8_t* rows = r.take(size_t(tokens * row_bytes));
        for (int l = 0; l < n.per_node; ++l) {
            const int64_t count = r.get<int64_t>();
            SMOE_CHECK(count >= 0 && size_t(count) <= r.remaining() / 4, Communication,
                       "rank {} sent a malformed bundle ({} tokens for rank {})", s, count,
                       n.rank(n.node(me), l));
            std::vector<int32_t> index(static_cast<size_t>(count));
            std::memcpy(index.data(), r.take(size_t(count) * 4), size_t(count) * 4);
            const int64_t pairs = r.get<int64_t>();
            SMOE_CHECK(pairs >= 0 && size_t(pairs) <= r.remaining() / 12, Communication,
                       "rank {} sent a malformed bundle ({} pairs for rank {})", s, pairs,
                       n.rank(n.node(me), l));
            Writer m;  // M(s, d), byte for byte as one level writes it
            m.put(kDispatchOk), m.put(generation), m.put(encoding), m.put(count), m.put(pairs);
            for (size_t j = 0; j < index.size(); ++j) {  // ascending: each row at most once
                const int32_t i = index[j];
                SMOE_CHECK(i >= 0 && i < tokens && (j == 0 || i > index[j - 1]), Communication,
                           "rank {} sent token {} of {} out of order", s, i, tokens);
                m.append(rows + size_t(i) * size_t(row_bytes), size_t(row_bytes));
            }
            m.append(r.take(size_t(pairs) * 12), size_t(pairs) * 12);  // rows, slots, weights
            put_entry(to[size_t(l)], s, m.bytes);
        }
        SMOE_CHECK(r.remaining() == 0, Communication, "rank {} sent {} stray bytes", s, r.remaining());
    }
    std::vector<Bytes> messages(static_cast<size_t>(n.ranks));
    for (int l = 0; l < n.per_node; ++l)
        messages[size_t(n.rank(n.node(me), l))] = std::move(to[size_t(l)].bytes);
    return messages;
}

std::vector<Bytes> unpack_by_source(const Nodes& n, const std::vector<Bytes>& from_node) {
    // Only the node's ranks relay, each the sources of its rail.
    return unpack_relayed(
        n.ranks, from_node, [&](int g, int s) { return n.local(s) == n.local(g); }, "dispatch");
}

std::vector<Bytes> node_return(const Nodes& n, int me, const std::vector<Bytes>& replies) {
    std::vector<Bytes> messages(static_cast<size_t>(n.ranks));
    for (int l = 0; l < n.per_node; ++l) {
        Writer w;
        w.put(int32_t(n.nodes()));
        for (int node = 0; node < n.nodes(); ++node)
            put_entry(w, n.rank(node, l), replies[size_t(n.rank(node, l))]);
        messages[size_t(n.rank(n.node(me), l))] = std::move(w.bytes);
    }
    return messages;
}

std::vector<Bytes> rail_return(const Nodes& n, int me, const std::vector<Bytes>& from_node) {
    // results[s][l]: the reply of rank l of this node to source s of this rail.
    std::vector<std::vector<Bytes>> results(static_cast<size_t>(n.ranks));
    for (int l = 0; l < n.per_node; ++l) {
        const int d = n.rank(n.node(me), l);
        std::vector<Bytes> by_source(static_cast<size_t>(n.ranks));
        std::vector<bool> seen(static_cast<size_t>(n.ranks), false);
        read_entries(from_node[size_t(d)], d, n.ranks, by_source, seen,
                     [&](int s) { return n.local(s) == n.local(me); });
        for (int node = 0; node < n.nodes(); ++node) {
            const int s = n.gateway(me, node);
            SMOE_CHECK(seen[size_t(s)], Communication, "rank {} returned no results for rank {}", d, s);
            results[size_t(s)].push_back(std::move(by_source[size_t(s)]));
        }
    }
    std::vector<Bytes> messages(static_cast<size_t>(n.ranks));
    for (int node = 0; node < n.nodes(); ++node) {
        const int s = n.gateway(me, node);
        Writer w;
        w.put(int32_t(n.per_node));
        for (int l = 0; l < n.per_node; ++l)
            put_entry(w, n.rank(n.node(me), l), results[size_t(s)][size_t(l)]);
        messages[size_t(s)] = std::move(w.bytes);
    }
    return messages;
}

std::vector<Bytes> unpack_by_destination(const Nodes& n, const std::vector<Bytes>& from_rail) {
    // Only the rail's ranks answer, each for the ranks of its node.
    return unpack_relayed(
        n.ranks, from_rail, [&](int g, int d) { return n.node(d) == n.node(g); }, "results");
}

}  // namespace steadymoe::ep
