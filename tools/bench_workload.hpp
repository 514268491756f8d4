// `steadymoe bench`'s shared parts: the workloads of docs/benchmarks.md built from the synthetic
// streams (weights in any expert format), and the timing and error helpers both backends' benches use.
#pragma once

#include "cli_common.hpp"
#include "steadymoe/core/tensor.hpp"
#include "steadymoe/model/config.hpp"
#include "steadymoe/model/weights.hpp"
#include "steadymoe/parallel/transport.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace steadymoe::cli {

struct BenchOptions {
    std::string workload = "qwen3-30b-a3b";
    std::string format;  // "": the workload's native format
    std::vector<int64_t> tokens = {1, 64, 256, 1024};
    int64_t experts = 16;  // 0: the workload's full count
    int threads = 0;
    std::string json_path = "bench-cpu.json";
    int repeat = 3;
    uint32_t seed = 0;
    std::string activations = "native";
    std::string backend = "cpu";  // cpu or cuda
    int64_t graph_max_tokens = 256;  // cuda: batches up to this size replay CUDA graphs (0: never)
    bool trace = false;              // cuda: each point's kernels traced over one more forward, as served
    int ep_ranks = 0;                 // > 0: the expert-parallel layer on this many in-process CPU ranks
    int ranks_per_node = 0;           // > 0: those ranks as nodes of this many (two-level exchanges)
    bool experts_given = false;   // --experts was on the command line
    bool tokens_given = false;    // --tokens was on the command line
    bool json_given = false;      // --json was on the command line
};

struct Workload {
    MoeConfig config;
    int64_t full_experts = 0;
    std::string format;  // bf16, fp8, fp4
    MoeLayerWeights weights;
};

// The named workload (or the demo's scored layer), its weights generated from the synthetic streams.
Workload build_workload(const BenchOptions& o, Progress& progress);

// The median of `values` (the upper one of an even count; 0 for none).
inline double median_of(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values.empty() ? 0.0 : values[values.size() / 2];
}

// Runs body(rank, transport) on one thread per rank of an in-process group (LocalGroup): a rank that
// throws is marked failed, so the others' next exchange names it instead of waiting, and the first
// failure is rethrown once every thread has finished.
void on_local_ranks(int ranks, const std::function<void(int rank, Transport& transport)>& body);

// Median seconds of `fn` over at least `repeat` runs (and at least 0.2 s, for tiny batches), after a warm-up.
template <typename Fn>
double median_seconds(int repeat, Fn&& fn) {
    fn();
    std::vector<double> times;
    double total = 0;
    while (int(times.size()) < repeat || (total < 0.2 && int(times.size()) < 50 * repeat)) {
        const double t0 = now_seconds();
        fn();
        times.push_back(now_seconds() - t0);
        total += times.back();
    }
    return median_of(std::move(times));
}

// Hidden states are prefixes of one stream, so the first min(T, T') tokens of two points are the same
// tokens: sets each point's `compared_with` / `bitwise` from its output rows against the next point's
// (the last point's against the previous one's). Point has tokens, output, compared_with, bitwise.
template <typename Point>
void compare_with_neighbours(std::vector<Point>& points, int64_t hidden) {
    for (size_t i = 0; i < points.size() && points.size() >= 2; ++i) {
        const Point& other = points[i + 1 < points.size() ? i + 1 : i - 1];
        Point& p = points[i];
        const int64_t rows = std::min(p.tokens, other.tokens);
        p.compared_with = other.tokens;
        p.bitwise = std::memcmp(p.output.raw(), other.output.raw(),
                                size_t(rows * hidden) * dtype_size(p.output.dtype())) == 0;
    }
}

// sqrt(sum (a-b)^2 / sum b^2), b a float32 tensor.
double relative_error(const Tensor& ours, const Tensor& ref);

// The expert-parallel layer on in-process CPU ranks, phase by phase (tools/bench_ep.cpp).
int bench_ep(const BenchOptions& o);

// The CUDA backend's bench (tools/bench_cuda.cpp); throws Unsupported in builds without CUDA.
int bench_cuda(const BenchOptions& o);
// The expert-parallel layer on --ep-ranks GPUs of this machine beside one GPU (tools/bench_cuda_ep.cpp).
int bench_cuda_ep(const BenchOptions& o);

}  // namespace steadymoe::cli
