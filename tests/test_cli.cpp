// The steadymoe CLI as a user meets it: the built binary run on the goldens, on bad input and on the
// demo, checking exit codes (0 ok, 1 a check failed, 2 bad input), one-line errors that name what is
// wrong, and the files it writes. Numeric accuracy is tested elsewhere (test_golden).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "steadymoe/core/gpu.hpp"
#include "steadymoe/model/safetensors.hpp"
#include "steadymoe/parallel/placement.hpp"
#include "test_util.hpp"

namespace steadymoe {
namespace {

namespace fs = std::filesystem;

struct CliResult {
    int code = -1;
    std::string out;
    std::string err;
};

std::string quote(const std::string& s) { return "'" + s + "'"; }

// A fresh scratch directory named after the running test, so tests that ctest runs in parallel never
// share one.
fs::path scratch(const std::string& what) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return test::scratch_dir(std::string("cli_") + info->test_suite_name() + "_" + info->name() + "_" + what);
}

// Runs `steadymoe ARGS` (quiet: no progress lines) with stdout and stderr captured to files.
CliResult cli(const std::string& args) {
    const fs::path dir = scratch("io");
    const fs::path out = dir / "stdout", err = dir / "stderr";
    const std::string command =
        quote(STEADYMOE_CLI_PATH) + " " + args + " -q >" + quote(out.string()) + " 2>" + quote(err.string());
    const int status = std::system(command.c_str());
    CliResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = test::read_file(out);
    r.err = test::read_file(err);
    return r;
}

std::string golden(const std::string& model) { return (test::golden_dir() / model).string(); }
std::string io(const std::string& model, const std::string& tensor) {
    return golden(model) + "/io.safetensors:" + tensor;
}

// Exit 2 (or `code`) with exactly one stderr line, "steadymoe: error: ...", holding every `needle`.
void expect_error(const CliResult& r, int code, const std::vector<std::string>& needles) {
    EXPECT_EQ(r.code, code) << "stderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr: " << r.err;
    EXPECT_EQ(r.err.rfind("steadymoe: error: ", 0), 0u) << "stderr: " << r.err;
    for (const std::string& n : needles)
        EXPECT_NE(r.err.find(n), std::string::npos) << "'" << n << "' not in: " << r.err;
}

// The run output file: output F32 [T, H], topk_ids I32 [T, K], topk_weights F32 [T, K].
void expect_run_output(const fs::path& file, int64_t T, int64_t H, int64_t K) {
    const SafetensorsFile f = SafetensorsFile::open(file);
    ASSERT_TRUE(f.contains("output") && f.contains("topk_ids") && f.contains("topk_weights"));
    EXPECT_EQ(f.find("output")->dtype, DType::F32);
    EXPECT_EQ(f.find("output")->shape, (Shape{T, H}));
    EXPECT_EQ(f.find("topk_ids")->dtype, DType::I32);
    EXPECT_EQ(f.find("topk_ids")->shape, (Shape{T, K}));
    EXPECT_EQ(f.find("topk_weights")->dtype, DType::F32);
    EXPECT_EQ(f.find("topk_weights")->shape, (Shape{T, K}));
    EXPECT_TRUE(f.metadata().count("layer"));
}

// ---- run on the goldens --------------------------------------------------------------------------

TEST(CliRun, DeepseekV3Layer1) {
    const fs::path out = scratch("out") / "out.safetensors";
    const CliResult r = cli("run --model " + golden("deepseek-v3-tiny") + " --layer 1 --input " +
                            io("deepseek-v3-tiny", "input") + " --output " + out.string());
    ASSERT_EQ(r.code, 0) << r.err;
    expect_run_output(out, 96, 256, 4);
}

TEST(CliRun, Qwen3Layer0) {
    const fs::path out = scratch("out") / "out.safetensors";
    const CliResult r = cli("run --model " + golden("qwen3-moe-tiny") + " --layer 0 --input " +
                            io("qwen3-moe-tiny", "input") + " --output " + out.string() + " --threads 2");
    ASSERT_EQ(r.code, 0) << r.err;
    expect_run_output(out, 96, 192, 3);
}

TEST(CliRun, DeepseekV4HashAndScoreLayers) {
    const fs::path dir = scratch("out");
    const std::string base =
        "run --model " + golden("deepseek-v4-tiny") + " --input " + io("deepseek-v4-tiny", "input");
    const CliResult hash = cli(base + " --layer 0 --token-ids " + io("deepseek-v4-tiny", "token_ids") +
                               " --output " + (dir / "l0.safetensors").string() + " --input-dtype bf16");
    ASSERT_EQ(hash.code, 0) << hash.err;
    expect_run_output(dir / "l0.safetensors", 96, 256, 4);
    const CliResult scored = cli(base + " --layer 1 --output " + (dir / "l1.safetensors").string());
    ASSERT_EQ(scored.code, 0) << scored.err;
    expect_run_output(dir / "l1.safetensors", 96, 256, 4);
}

// ---- run on bad input ----------------------------------------------------------------------------

bool cuda_usable() { return probe_gpus().device_count > 0; }

std::string v3_run(const std::string& input, const std::string& extra = "") {
    return "run --model " + golden("deepseek-v3-tiny") + " --layer 1 --input " + input + " --output " +
           (scratch("out") / "out.safetensors").string() + " " + extra;
}

TEST(CliRunErrors, MissingInputFile) {
    expect_error(cli(v3_run("/nonexistent/io.safetensors:input")), 2,
                 {"--input", "/nonexistent/io.safetensors"});
}

TEST(CliRunErrors, BadTensorSpec) {
    expect_error(cli(v3_run(golden("deepseek-v3-tiny") + "/io.safetensors")), 2, {"--input", "FILE:TENSOR"});
}

TEST(CliRunErrors, WrongTensorName) {
    expect_error(cli(v3_run(io("deepseek-v3-tiny", "no_such_tensor"))), 2,
                 {"no_such_tensor", "io.safetensors"});
}

TEST(CliRunErrors, WrongDtype) {
    expect_error(cli(v3_run(io("deepseek-v3-tiny", "input_f64"))), 2, {"input_f64", "F64"});
}

TEST(CliRunErrors, WrongWidth) {
    expect_error(cli(v3_run(io("qwen3-moe-tiny", "input"))), 2, {"width 192", "hidden size 256"});
}

TEST(CliRunErrors, DenseLayer) {
    const CliResult r =
        cli("run --model " + golden("deepseek-v3-tiny") + " --layer 0 --input " +
            io("deepseek-v3-tiny", "input") + " --output " + (scratch("out") / "out.safetensors").string());
    expect_error(r, 2, {"layer 0", "not an MoE layer", "dense"});
}

TEST(CliRunErrors, HashLayerWithoutTokenIds) {
    const CliResult r =
        cli("run --model " + golden("deepseek-v4-tiny") + " --layer 0 --input " +
            io("deepseek-v4-tiny", "input") + " --output " + (scratch("out") / "out.safetensors").string());
    expect_error(r, 2, {"layer 0", "--token-ids"});
}

TEST(CliRunErrors, Backends) {
    expect_error(cli(v3_run(io("deepseek-v3-tiny", "input"), "--backend tpu")), 2, {"tpu"});
    // Without a usable GPU the CUDA backend is refused with the reason; with one it runs (see below).
    if (!cuda_usable()) expect_error(cli(v3_run(io("deepseek-v3-tiny", "input"), "--backend cuda")), 2, {"CUDA backend needs a GPU"});
}

TEST(CliRun, CudaBackendMatchesTheCpuBackendWhenAGpuIsPresent) {
    SMOE_SKIP_WITHOUT_GPU();
    const auto dir = scratch("cuda_run");
    const std::string base = "run --model " + golden("deepseek-v3-tiny") + " --layer 1 --input " +
                             io("deepseek-v3-tiny", "input") + " --output ";
    const CliResult gpu = cli(base + (dir / "gpu.safetensors").string() + " --backend cuda");
    ASSERT_EQ(gpu.code, 0) << gpu.err;
    const CliResult cpu = cli(base + (dir / "cpu.safetensors").string() + " --backend cpu");
    ASSERT_EQ(cpu.code, 0) << cpu.err;
    const Tensor a = SafetensorsFile::open(dir / "gpu.safetensors").get("output");
    const Tensor b = SafetensorsFile::open(dir / "cpu.safetensors").get("output");
    EXPECT_LE(test::relative_error(a, b), 1e-5);
    const Tensor ia = SafetensorsFile::open(dir / "gpu.safetensors").get("topk_ids");
    const Tensor ib = SafetensorsFile::open(dir / "cpu.safetensors").get("topk_ids");
    EXPECT_EQ(test::first_bit_difference(ia.raw(), ib.raw(), ia.nbytes()), -1);
}

TEST(CliUsage, UnknownCommandAndHelp) {
    expect_error(cli("frobnicate"), 2, {"unknown command 'frobnicate'"});
    expect_error(cli(""), 2, {});
    expect_error(cli("run --no-such-flag"), 2, {"--no-such-flag"});
    for (const char* command : {"run", "inspect", "verify", "quantize", "bench", "plan"}) {
        const CliResult help = cli(std::string(command) + " --help");
        EXPECT_EQ(help.code, 0) << command;
        EXPECT_NE(help.out.find("Usage"), std::string::npos) << command;
    }
}

// ---- inspect -------------------------------------------------------------------------------------

TEST(CliInspect, EveryGoldenValidates) {
    for (const char* model : {"deepseek-v3-tiny", "qwen3-moe-tiny", "deepseek-v4-tiny"}) {
        const CliResult r = cli("inspect --model " + golden(model));
        EXPECT_EQ(r.code, 0) << model << ": " << r.err;
        EXPECT_NE(r.out.find("validates: yes"), std::string::npos) << r.out;
        const CliResult j = cli("inspect --json --model " + golden(model));
        ASSERT_EQ(j.code, 0) << model;
        EXPECT_TRUE(nlohmann::json::parse(j.out).at("validates").get<bool>());
    }
}

// A scratch copy of a golden model whose files the test may damage.
fs::path writable_copy(const std::string& model, const std::string& name) {
    const fs::path dir = scratch(name);
    for (const char* file : {"config.json", "model.safetensors"})
        test::write_file(dir / file, test::read_file(test::golden_dir() / model / file));
    return dir;
}

TEST(CliInspect, TruncatedCheckpoint) {
    const fs::path dir = writable_copy("qwen3-moe-tiny", "model");
    fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") / 2);
    const CliResult r = cli("inspect --model " + dir.string());
    EXPECT_NE(r.code, 0);
    expect_error(r, 2, {"model.safetensors"});
}

TEST(CliInspect, NonFiniteExpertWeight) {
    const fs::path dir = writable_copy("qwen3-moe-tiny", "model");
    // Poison the first value of expert 3's down projection with a bf16 NaN.
    const fs::path file = dir / "model.safetensors";
    const SafetensorsFile original = SafetensorsFile::open(file);
    const std::string name = "model.layers.0.mlp.experts.3.down_proj.weight";
    ASSERT_NE(original.find(name), nullptr);
    std::string bytes = test::read_file(file);
    uint64_t header = 0;
    std::memcpy(&header, bytes.data(), 8);
    const size_t at = 8 + header + original.find(name)->begin;
    bytes[at] = char(0xC0);
    bytes[at + 1] = char(0x7F);
    test::write_file(file, bytes);
    expect_error(cli("inspect --model " + dir.string()), 1, {"layer 0", name});
}

// ---- verify, quantize, bench, the demo -------------------------------------------------------------

TEST(CliVerify, DemoSmallBatches) {
    const CliResult r = cli("verify --batch-sizes 1,3,17 --threads 1,2");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("verify: passed"), std::string::npos) << r.out;
}

TEST(CliVerify, CheckpointLayer) {
    const CliResult r =
        cli("verify --model " + golden("deepseek-v4-tiny") + " --layer 0 --batch-sizes 1,9 --threads 1,2");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
}

TEST(CliQuantize, Mxfp4ThenRun) {
    const fs::path dir = scratch("out");
    const CliResult q =
        cli("quantize --model " + golden("qwen3-moe-tiny") + " --to mxfp4 --out " + (dir / "q").string());
    ASSERT_EQ(q.code, 0) << q.err;
    EXPECT_EQ(cli("inspect --model " + (dir / "q").string()).code, 0);
    const CliResult r =
        cli("run --model " + (dir / "q").string() + " --layer 0 --input " + io("qwen3-moe-tiny", "input") +
            " --output " + (dir / "out.safetensors").string());
    ASSERT_EQ(r.code, 0) << r.err;
    expect_run_output(dir / "out.safetensors", 96, 192, 3);
    expect_error(
        cli("quantize --model " + golden("qwen3-moe-tiny") + " --to fp5 --out " + (dir / "x").string()), 2,
        {"--to", "fp5"});
}

// Runs `bench ARGS --json F` (exit 0) and returns F's points, each bitwise equal to its neighbour batch.
nlohmann::json bench_points(const std::string& args, size_t count) {
    const fs::path json_file = scratch("out") / "bench.json";
    const CliResult r = cli("bench " + args + " --json " + json_file.string());
    EXPECT_EQ(r.code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(test::read_file(json_file));
    EXPECT_EQ(j.at("points").size(), count);
    for (const auto& p : j.at("points")) EXPECT_TRUE(p.at("bitwise_equal_to_batch_of").at("equal").get<bool>());
    return j.at("points");
}

TEST(CliBench, SmallQwenAgainstBaseline) {
    for (const auto& p : bench_points("--workload qwen3-30b-a3b --format bf16 --experts 8 --tokens 3,8 --repeat 1", 2)) {
        // bf16 output rounding against an fp32 peer: ~1e-3; anything near 1 would mean different routing.
        if (p.contains("relative_error_vs_baseline"))
            EXPECT_LT(p.at("relative_error_vs_baseline").get<double>(), 1e-2);
    }
}

TEST(CliBench, BackendIsCheckedAndCudaNeedsAGpu) {
    expect_error(cli("bench --backend gpu --experts 8 --tokens 1"), 2, {"--backend", "'gpu'", "cpu, cuda"});
    expect_error(cli("bench --trace --experts 8 --tokens 1"), 2, {"--trace", "--backend cuda"});
    if (probe_gpus().device_count > 0) {
        for (const auto& p : bench_points("--backend cuda --workload qwen3-30b-a3b --experts 8 --tokens 3,8 --repeat 1 --trace", 2)) {
            EXPECT_LT(p.at("relative_error_vs_cpu_first_rows").get<double>(), 1e-2);
            EXPECT_GT(p.at("routed_floor_us").get<double>(), 0.0);
            EXPECT_GT(p.at("routed_untimed_us").get<double>(), 0.0);  // (qwen3 has no shared expert: its experts alone)
            // The kernels of one more forward: at least the router GEMM, the routing, the experts' and the combine.
            ASSERT_TRUE(p.contains("kernel_trace"));
            EXPECT_GE(p.at("kernel_trace").size(), 4u);
            for (const auto& k : p.at("kernel_trace")) EXPECT_GT(k.at("us").get<double>(), 0.0) << k.dump();
        }
    } else {
        const CliResult r = cli("bench --backend cuda --experts 8 --tokens 1");
        EXPECT_EQ(r.code, 2) << r.err;
        EXPECT_NE(r.err.find("--backend cuda"), std::string::npos) << r.err;
    }
}

// The expert-parallel bench on in-process CPU ranks: every phase timed, every rank's rows bitwise the
// one-rank layer's; an expert count the ranks cannot share evenly is refused.
TEST(CliBench, ExpertParallelRanksPhaseByPhase) {
    const fs::path json_file = scratch("out") / "bench-ep.json";
    const CliResult r = cli("bench --ep-ranks 2 --workload demo --tokens 1,5 --repeat 1 --json " + json_file.string());
    ASSERT_EQ(r.code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(test::read_file(json_file));
    ASSERT_EQ(j.at("points").size(), 2u);
    for (const auto& p : j.at("points")) {
        EXPECT_TRUE(p.at("bitwise_equal_to_one_rank").get<bool>());
        EXPECT_GT(p.at("experts_us").get<double>(), 0.0);
        EXPECT_GT(p.at("dispatch_us").get<double>(), 0.0);
    }
    expect_error(cli("bench --ep-ranks 3 --workload demo --tokens 1 --repeat 1"), 2, {"--ep-ranks 3", "divide evenly"});
}

TEST(CliPlan, WritesAPlacementEveryRankCanRead) {
    const fs::path dir = scratch("plan");
    test::write_file(dir / "load.json", "[10, 10, 200, 10, 10, 120, 10, 10]");
    const CliResult r = cli("plan --load " + (dir / "load.json").string() + " --ranks 4 --physical 12 --groups 2 --nodes 2 --out " +
                            (dir / "placement.json").string());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("busiest rank / mean"), std::string::npos) << r.out;
    const ExpertPlacement p = ExpertPlacement::read_json(dir / "placement.json");
    EXPECT_EQ(p.ranks(), 4);
    EXPECT_GE(p.replicas(2).size(), 2u);
    test::write_file(dir / "bad.json", "{\"load\": 3}");
    expect_error(cli("plan --load " + (dir / "bad.json").string() + " --ranks 2 --out " + (dir / "x.json").string()), 2,
                 {"--load", "expert_load"});
    expect_error(cli("plan --load " + (dir / "load.json").string() + " --ranks 3 --out " + (dir / "x.json").string()), 2,
                 {"multiple of the 3 ranks"});
}

// With a GPU, verify and the demo run there by default (--backend auto) and pass their checks; the GPU
// runner replaces the thread cases with a graph-free launch case.
TEST(CliVerify, OnTheGpuWhenOneIsPresent) {
    SMOE_SKIP_WITHOUT_GPU();
    const CliResult r = cli("verify --batch-sizes 1,3,17,300 --demo-shape 256,128,16,2");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("on the GPU"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("no CUDA graphs"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("verify: passed"), std::string::npos) << r.out;
    const CliResult v4 = cli("verify --backend cuda --model " + golden("deepseek-v4-tiny") + " --layer 0 --batch-sizes 1,9");
    EXPECT_EQ(v4.code, 0) << v4.out << v4.err;
}

TEST(CliDemo, RunsOnTheGpuWhenOneIsPresent) {
    SMOE_SKIP_WITHOUT_GPU();
    const CliResult r = cli("run --backend cuda --tokens 1,16 --demo-shape 256,128,16,2");
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("one GPU"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("CUDA graph replays vs graph-free launches"), std::string::npos) << r.out;
}

TEST(CliDemo, RunWithoutArgumentsPassesItsSelfCheck) {
    const CliResult r = cli("run");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("tokens bitwise identical"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("expert load"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace steadymoe
