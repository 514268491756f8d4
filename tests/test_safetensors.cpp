// Safetensors reader/writer and checkpoint directories: round trips, the real goldens, and a matrix of
// damaged files that must each be rejected with a message naming the specific fault.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "steadymoe/model/checkpoint.hpp"
#include "steadymoe/model/safetensors.hpp"
#include "test_util.hpp"

namespace steadymoe {
namespace {

namespace fs = std::filesystem;

// ---- helpers ------------------------------------------------------------------------------------

std::string le64(uint64_t v) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint8_t(v >> (8 * i)));
    return s;
}

// A safetensors image made by hand: length field (the header's own size unless overridden), header, data.
std::string image(const std::string& header, const std::string& data, std::optional<uint64_t> length = {}) {
    return le64(length.value_or(header.size())) + header + data;
}

// Runs f and expects an Error of `kind` whose message contains `needle`.
template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::string& needle) {
    try {
        f();
        ADD_FAILURE() << "no error thrown; expected one containing: " << needle;
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), kind) << "kind " << error_kind_name(e.kind()) << ", message: " << e.what();
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
            << "message: " << e.what() << "\nexpected to contain: " << needle;
    }
}

// A tensor whose bytes are a pattern that differs per dtype and position (so a swapped or shifted
// tensor cannot compare equal).
Tensor patterned(DType dtype, Shape shape, int salt) {
    Tensor t = Tensor::zeros(dtype, std::move(shape));
    auto* p = static_cast<uint8_t*>(t.mutable_raw());
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(i * 37 + size_t(salt) * 11 + 5);
    return t;
}

void expect_same_bytes(const Tensor& a, const Tensor& b, const std::string& what) {
    ASSERT_EQ(a.dtype(), b.dtype()) << what;
    ASSERT_EQ(a.shape(), b.shape()) << what;
    ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
    EXPECT_EQ(test::first_bit_difference(a.raw(), b.raw(), a.nbytes()), -1) << what;
}

bool has_temp_files(const fs::path& dir) {
    for (const auto& e : fs::directory_iterator(dir)) {
        if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
    }
    return false;
}

// ---- round trips --------------------------------------------------------------------------------

TEST(Safetensors, RoundTripEveryDtype) {
    const fs::path dir = test::scratch_dir("st_roundtrip");
    std::vector<std::pair<std::string, Tensor>> tensors;
    int salt = 0;
    for (DType d : kAllDTypes) {
        tensors.emplace_back(fmt::format("t.{}", dtype_name(d)), patterned(d, {3, 5}, salt++));
    }
    tensors.emplace_back("scalar", patterned(DType::F32, {}, salt++));
    tensors.emplace_back("empty", patterned(DType::BF16, {0, 7}, salt++));
    tensors.emplace_back("odd", patterned(DType::U8, {3}, salt++));  // leaves later tensors unaligned
    tensors.emplace_back("after_odd", patterned(DType::F64, {2, 1, 2}, salt++));
    const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "caf\xc3\xa9"}};

    const fs::path path = dir / "rt.safetensors";
    write_safetensors(path, tensors, meta);
    EXPECT_FALSE(has_temp_files(dir));

    const SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_EQ(f.metadata(), meta);
    ASSERT_EQ(f.tensors().size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& [name, want] = tensors[i];
        EXPECT_EQ(f.tensors()[i].name, name) << "tensors() must list tensors in file (given) order";
        ASSERT_TRUE(f.contains(name));
        expect_same_bytes(f.get(name), want, name);
    }

    // The header is padded so the data area starts 8-byte aligned.
    const std::string raw = test::read_file(path);
    uint64_t header_len = 0;
    std::memcpy(&header_len, raw.data(), 8);
    EXPECT_EQ(header_len % 8, 0u);
    EXPECT_EQ(raw.substr(8, 13), "{\"__metadata_");
}

TEST(Safetensors, FromBytesMatchesOpen) {
    const fs::path path = test::scratch_dir("st_from_bytes") / "x.safetensors";
    write_safetensors(path, {{"w", patterned(DType::BF16, {4, 4}, 1)}, {"b", patterned(DType::F32, {4}, 2)}});
    const std::string raw = test::read_file(path);
    const SafetensorsFile a = SafetensorsFile::open(path);
    const SafetensorsFile b = SafetensorsFile::from_bytes(raw.data(), raw.size(), "memory");
    EXPECT_EQ(b.origin(), "memory");
    for (const TensorInfo& t : a.tensors()) expect_same_bytes(b.get(t.name), a.get(t.name), t.name);
}

TEST(Safetensors, ViewOutlivesFile) {
    const fs::path path = test::scratch_dir("st_keepalive") / "x.safetensors";
    const Tensor want = patterned(DType::I32, {16}, 3);
    write_safetensors(path, {{"x", want}});
    Tensor view;
    {
        const SafetensorsFile f = SafetensorsFile::open(path);
        view = f.get("x");
    }
    expect_same_bytes(view, want, "view after the file object is gone");
}

TEST(Safetensors, EmptyHeaderAndPaddingAreValid) {
    const SafetensorsFile empty = SafetensorsFile::from_bytes(image("{}", "").data(), 10, "empty");
    EXPECT_TRUE(empty.tensors().empty());

    const std::string padded = image(R"({"z":{"dtype":"F16","shape":[0],"data_offsets":[0,0]},)"
                                     R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}      )",
                                     "xy");
    const SafetensorsFile f = SafetensorsFile::from_bytes(padded.data(), padded.size(), "padded");
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.get("z").numel(), 0);
    EXPECT_EQ(f.get("a").data<char>()[1], 'y');
}

TEST(Safetensors, GetMissingTensorIsNotFound) {
    const std::string img = image("{}", "");
    const SafetensorsFile f = SafetensorsFile::from_bytes(img.data(), img.size(), "m.safetensors");
    EXPECT_EQ(f.find("nope"), nullptr);
    expect_error([&] { f.get("nope"); }, ErrorKind::NotFound, "m.safetensors: no tensor named 'nope'");
}

// ---- writing ------------------------------------------------------------------------------------

TEST(SafetensorsWrite, ReplacesAtomicallyAndLeavesNoTemp) {
    const fs::path dir = test::scratch_dir("st_atomic");
    const fs::path path = dir / "x.safetensors";
    write_safetensors(path, {{"a", patterned(DType::F32, {8}, 1)}});
    write_safetensors(path, {{"b", patterned(DType::F32, {2}, 2)}});
    EXPECT_FALSE(has_temp_files(dir));
    const SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_FALSE(f.contains("a"));
    EXPECT_TRUE(f.contains("b"));
}

TEST(SafetensorsWrite, RejectsBadInput) {
    const fs::path dir = test::scratch_dir("st_write_bad");
    const Tensor t = patterned(DType::F32, {2}, 1);
    expect_error(
        [&] {
            write_safetensors(dir / "d.safetensors", {{"a", t}, {"a", t}});
        },
        ErrorKind::InvalidArgument, "tensor name 'a' given twice");
    expect_error(
        [&] {
            write_safetensors(dir / "u.safetensors", {{"a", Tensor()}});
        },
        ErrorKind::InvalidArgument, "tensor 'a' has no storage");
    expect_error(
        [&] {
            write_safetensors(dir / "m.safetensors", {{"__metadata__", t}});
        },
        ErrorKind::InvalidArgument, "reserved");
    const fs::path missing = dir / "no_such_dir" / "x.safetensors";
    expect_error([&] { write_safetensors(missing, {{"a", t}}); }, ErrorKind::Io, missing.string());
    EXPECT_TRUE(fs::is_empty(dir)) << "a failed write must leave nothing behind";
}

// ---- the goldens --------------------------------------------------------------------------------

TEST(Safetensors, ReadsGoldens) {
    const fs::path golden = test::golden_dir();
    for (const char* model : {"deepseek-v3-tiny", "deepseek-v4-tiny", "qwen3-moe-tiny"}) {
        for (const char* file : {"model.safetensors", "io.safetensors"}) {
            SCOPED_TRACE(fmt::format("{}/{}", model, file));
            const fs::path path = golden / model / file;
            const SafetensorsFile f = SafetensorsFile::open(path);
            ASSERT_FALSE(f.tensors().empty());

            // Each view must point at the bytes the header names, read here independently.
            const std::string raw = test::read_file(path);
            uint64_t header_len = 0;
            std::memcpy(&header_len, raw.data(), 8);
            uint64_t total = 0;
            for (const TensorInfo& t : f.tensors()) {
                const Tensor v = f.get(t.name);
                ASSERT_EQ(v.nbytes(), t.end - t.begin) << t.name;
                EXPECT_EQ(std::memcmp(v.raw(), raw.data() + 8 + header_len + t.begin, v.nbytes()), 0)
                    << t.name;
                total += v.nbytes();
            }
            EXPECT_EQ(8 + header_len + total, raw.size());
        }
    }
    const SafetensorsFile io = SafetensorsFile::open(golden / "qwen3-moe-tiny" / "io.safetensors");
    EXPECT_EQ(io.metadata().at("tokens"), "96");
    const Tensor input = io.get("input");
    EXPECT_EQ(input.dtype(), DType::F32);
    ASSERT_EQ(input.rank(), 2u);
    EXPECT_EQ(input.dim(0), 96);
    // `input` is `input_f64` rounded to float32 (the f64 values themselves carry more bits).
    const Tensor input64 = io.get("input_f64");
    ASSERT_EQ(input64.numel(), input.numel());
    for (int64_t i = 0; i < input.numel(); ++i) ASSERT_EQ(float(input.get(i)), float(input64.get(i))) << i;
}

// ---- damaged files ------------------------------------------------------------------------------

struct Damaged {
    const char* name;
    std::string bytes;
    std::string reason;        // expected in the message from open()
    std::string bytes_reason;  // expected from from_bytes(), when it differs
};

std::ostream& operator<<(std::ostream& os, const Damaged& d) { return os << d.name; }

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
    return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":{}}})", name, dtype, shape, offsets);
}

// Two tensors, a: F32 [2] at [0, 8) and b: U8 [4] at [8, 12), with `a` and `b` overridable.
std::string two(const std::string& a = entry("a", "F32", "[2]", "[0,8]"),
                const std::string& b = entry("b", "U8", "[4]", "[8,12]")) {
    return "{" + a + "," + b + "}";
}
const std::string kData(12, '\x01');

std::vector<Damaged> damaged_cases() {
    return {
        {"EmptyFile", "", "file is empty", "too short"},
        {"FiveBytes", "abcde", "too short for the 8-byte header length", ""},
        {"HeaderLongerThanFile", image("{}", "", 1000), "header length 1000 runs past the end of the file",
         ""},
        {"HeaderOver100MB", image("{}", "", 200'000'000), "exceeds the 100000000 byte limit", ""},
        {"HeaderNotJson", image("{not json", ""), "header is not valid JSON", ""},
        {"HeaderEmpty", image("", ""), "header is not valid JSON", ""},
        {"HeaderArray", image("[1,2]", ""), "header is a JSON array, expected an object", ""},
        {"TruncatedData", image(two(), kData.substr(0, 10)),
         "tensor 'b' data_offsets [8, 12] reach past the end of the data area (10 bytes; file truncated?)",
         ""},
        {"TrailingBytes", image(two(), kData + "xyz"), "3 trailing bytes after the last tensor", ""},
        {"Hole",
         image(two(entry("a", "F32", "[2]", "[0,8]"), entry("b", "U8", "[4]", "[10,14]")), kData + "zz"),
         "hole of 2 bytes in the data area at [8, 10) before tensor 'b'", ""},
        {"HoleAtStart",
         image(two(entry("a", "F32", "[2]", "[4,12]"), entry("b", "U8", "[4]", "[12,16]")), kData + "zzzz"),
         "hole of 4 bytes in the data area at [0, 4) before tensor 'a'", ""},
        {"Overlap",
         image(two(entry("a", "F32", "[2]", "[0,8]"), entry("b", "U8", "[4]", "[6,10]")),
               kData.substr(0, 10)),
         "tensor 'b' data_offsets [6, 10] overlap tensor 'a' [0, 8]", ""},
        {"OffsetsPastEnd",
         image(two(entry("a", "F32", "[2]", "[0,8]"), entry("b", "U8", "[4]", "[100,104]")), kData),
         "tensor 'b' data_offsets [100, 104] reach past the end of the data area (12 bytes", ""},
        {"BeginAfterEnd",
         image(two(entry("a", "F32", "[2]", "[0,8]"), entry("b", "U8", "[4]", "[12,8]")), kData),
         "tensor 'b' data_offsets begin 12 > end 8", ""},
        {"SizeMismatch", image(two(entry("a", "F32", "[3]", "[0,8]")), kData),
         "tensor 'a' data_offsets [0, 8] hold 8 bytes but F32 [3] needs 12", ""},
        {"UnknownDtype", image(two(entry("a", "F4X", "[2]", "[0,8]")), kData),
         "unknown dtype 'F4X' for tensor 'a'", ""},
        {"DtypeNotString",
         image(two(entry("a", "F32", "[2]", "[0,8]"), R"("b":{"dtype":4,"shape":[4],"data_offsets":[8,12]})"),
               kData),
         "tensor 'b' dtype is a JSON number", ""},
        {"NegativeDim", image(two(entry("a", "F32", "[-2]", "[0,8]")), kData),
         "tensor 'a' has a negative dimension in shape (-2)", ""},
        {"FractionalDim", image(two(entry("a", "F32", "[2.5]", "[0,8]")), kData),
         "tensor 'a' has a non-integer dimension in shape (2.5)", ""},
        {"StringDim", image(two(entry("a", "F32", "[\"2\"]", "[0,8]")), kData),
         "tensor 'a' has a non-integer dimension in shape", ""},
        {"ShapeNotArray", image(two(entry("a", "F32", "2", "[0,8]")), kData),
         "tensor 'a' shape is a JSON number, expected an array", ""},
        {"ShapeOverflow", image(two(entry("a", "F32", "[4294967296,4294967296]", "[0,8]")), kData),
         "tensor 'a' shape [4294967296, 4294967296] has more elements than fit in 64 bits", ""},
        {"BytesOverflow", image(two(entry("a", "F64", "[4611686018427387904]", "[0,8]")), kData),
         "needs more bytes than fit in 64 bits", ""},
        {"MissingDataOffsets", image(R"({"a":{"dtype":"F32","shape":[3]}})", kData),
         "tensor 'a' has no \"data_offsets\"", ""},
        {"MissingDtype", image(R"({"a":{"shape":[3],"data_offsets":[0,12]}})", kData),
         "tensor 'a' has no \"dtype\"", ""},
        {"MissingShape", image(R"({"a":{"dtype":"F32","data_offsets":[0,12]}})", kData),
         "tensor 'a' has no \"shape\"", ""},
        {"OffsetsThreeValues", image(two(entry("a", "F32", "[2]", "[0,4,8]")), kData),
         "tensor 'a' data_offsets must be [begin, end], got an array of length 3", ""},
        {"NegativeOffset", image(two(entry("a", "F32", "[2]", "[-8,0]")), kData),
         "tensor 'a' has a negative data_offsets begin (-8)", ""},
        {"EntryNotObject", image(R"({"a":[1,2]})", ""),
         "header entry 'a' is a JSON array, expected an object", ""},
        {"DuplicateName",
         image(two(entry("a", "F32", "[2]", "[0,8]"), entry("a", "U8", "[4]", "[8,12]")), kData),
         "tensor name 'a' appears twice in the header", ""},
        {"DuplicateField",
         image(R"({"a":{"dtype":"F32","dtype":"U8","shape":[12],"data_offsets":[0,12]}})", kData),
         "key 'dtype' appears twice in header entry 'a'", ""},
        {"MetadataNonString", image(R"({"__metadata__":{"k":1}})", ""),
         "__metadata__ value for 'k' is a JSON number, expected a string", ""},
        {"MetadataNotObject", image(R"({"__metadata__":"pt"})", ""),
         "__metadata__ is a JSON string, expected an object", ""},
    };
}

class DamagedFile : public ::testing::TestWithParam<Damaged> {};

TEST_P(DamagedFile, OpenRejectsWithReason) {
    const Damaged& d = GetParam();
    const fs::path path = test::scratch_dir(std::string("st_damaged_") + d.name) / "bad.safetensors";
    test::write_file(path, d.bytes);
    expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::BadFormat, d.reason);
    expect_error([&] { SafetensorsFile::open(path); }, ErrorKind::BadFormat, path.string() + ": ");
}

TEST_P(DamagedFile, FromBytesRejectsWithReason) {
    const Damaged& d = GetParam();
    expect_error([&] { SafetensorsFile::from_bytes(d.bytes.data(), d.bytes.size(), "img"); },
                 ErrorKind::BadFormat, d.bytes_reason.empty() ? d.reason : d.bytes_reason);
}

INSTANTIATE_TEST_SUITE_P(Matrix, DamagedFile, ::testing::ValuesIn(damaged_cases()),
                         [](const ::testing::TestParamInfo<Damaged>& info) {
                             return std::string(info.param.name);
                         });

TEST(Safetensors, OpenMissingFileOrDirectory) {
    const fs::path dir = test::scratch_dir("st_open_errors");
    expect_error([&] { SafetensorsFile::open(dir / "absent.safetensors"); }, ErrorKind::NotFound,
                 "absent.safetensors");
    expect_error([&] { SafetensorsFile::open(dir); }, ErrorKind::BadFormat, "not a regular file");
}

// ---- checkpoints --------------------------------------------------------------------------------

// A scratch checkpoint directory with the qwen3 golden config and whatever shards a test writes.
fs::path checkpoint_dir(const std::string& name) {
    const fs::path dir = test::scratch_dir(name);
    fs::copy_file(test::golden_dir() / "qwen3-moe-tiny" / "config.json", dir / "config.json");
    return dir;
}

constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";

void write_two_shards(const fs::path& dir) {
    write_safetensors(dir / kShard1,
                      {{"a", patterned(DType::BF16, {4, 2}, 1)}, {"b", patterned(DType::F32, {3}, 2)}});
    write_safetensors(dir / kShard2, {{"c", patterned(DType::I64, {2}, 3)}});
}

void write_index(const fs::path& dir, const std::string& weight_map) {
    test::write_file(dir / "model.safetensors.index.json",
                     R"({"metadata":{"total_size":44},"weight_map":)" + weight_map + "}");
}

const std::string kGoodMap = fmt::format(R"({{"a":"{0}","b":"{0}","c":"{1}"}})", kShard1, kShard2);

TEST(Checkpoint, ShardedWithIndex) {
    const fs::path dir = checkpoint_dir("ckpt_sharded");
    write_two_shards(dir);
    write_index(dir, kGoodMap);
    const Checkpoint ckpt = Checkpoint::open(dir);
    EXPECT_EQ(ckpt.shard_files(), (std::vector<std::string>{kShard1, kShard2}));
    EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_TRUE(ckpt.contains("c"));
    ASSERT_NE(ckpt.find("a"), nullptr);
    EXPECT_EQ(ckpt.find("a")->dtype, DType::BF16);
    EXPECT_EQ(ckpt.find("zz"), nullptr);
    expect_same_bytes(ckpt.get("c"), patterned(DType::I64, {2}, 3), "c");
    expect_error([&] { ckpt.get("zz"); }, ErrorKind::NotFound,
                 fmt::format("tensor 'zz' is not in checkpoint {}", dir.string()));
    EXPECT_EQ(ckpt.config().model_type, "qwen3_moe");
}

TEST(Checkpoint, IndexNamesMissingShard) {
    const fs::path dir = checkpoint_dir("ckpt_missing_shard");
    write_two_shards(dir);
    write_index(dir, fmt::format(R"({{"a":"{}","c":"model-00003.safetensors"}})", kShard1));
    expect_error([&] { Checkpoint::open(dir); }, ErrorKind::NotFound,
                 "shard 'model-00003.safetensors' (holding tensor 'c') does not exist");
}

TEST(Checkpoint, IndexMapsNameToShardThatLacksIt) {
    const fs::path dir = checkpoint_dir("ckpt_wrong_shard");
    write_two_shards(dir);
    write_index(dir, fmt::format(R"({{"a":"{0}","b":"{0}","c":"{0}","d":"{1}"}})", kShard1, kShard2));
    expect_error([&] { Checkpoint::open(dir); }, ErrorKind::BadFormat,
                 fmt::format("maps tensor 'c' to {0}, but {0} has no such tensor", kShard1));
}

TEST(Checkpoint, IndexEscapingTheDirectory) {
    const fs::path dir = checkpoint_dir("ckpt_escape");
    write_two_shards(dir);
    for (const char* shard : {"../x.safetensors", "/etc/passwd", "..", "sub/x.safetensors"}) {
        write_index(dir, fmt::format(R"({{"a":"{}"}})", shard));
        expect_error([&] { Checkpoint::open(dir); }, ErrorKind::BadFormat,
                     "which is not a file name in this directory");
    }
    write_index(dir, R"({"a":7})");
    expect_error([&] { Checkpoint::open(dir); }, ErrorKind::BadFormat,
                 "weight_map entry for 'a' is a JSON number");
    write_index(dir, R"([)");
    expect_error([&] { Checkpoint::open(dir); }, ErrorKind::BadFormat,
                 "model.safetensors.index.json: not valid JSON");
}

TEST(Checkpoint, TensorInTwoShards) {
    const fs::path dir = checkpoint_dir("ckpt_twice");
    write_safetensors(dir / "x1.safetensors", {{"a", patterned(DType::F32, {2}, 1)}});
    write_safetensors(dir / "x2.safetensors", {{"a", patterned(DType::F32, {2}, 2)}});
    expect_error([&] { Checkpoint::open(dir); }, ErrorKind::BadFormat,
                 "tensor 'a' is in both x1.safetensors and x2.safetensors");
}

TEST(Checkpoint, FallbacksWithoutIndex) {
    const fs::path dir = checkpoint_dir("ckpt_fallback");
    expect_error([&] { Checkpoint::open(dir); }, ErrorKind::NotFound, "other *.safetensors file");
    write_safetensors(dir / "b.safetensors", {{"y", patterned(DType::U8, {1}, 1)}});
    write_safetensors(dir / "a.safetensors", {{"x", patterned(DType::U8, {1}, 2)}});
    EXPECT_EQ(Checkpoint::open(dir).shard_files(),
              (std::vector<std::string>{"a.safetensors", "b.safetensors"}));
    // model.safetensors, when present, is the whole checkpoint.
    write_safetensors(dir / "model.safetensors", {{"z", patterned(DType::U8, {1}, 3)}});
    const Checkpoint ckpt = Checkpoint::open(dir);
    EXPECT_EQ(ckpt.shard_files(), (std::vector<std::string>{"model.safetensors"}));
    EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"z"}));
}

TEST(Checkpoint, MissingDirectoryOrConfig) {
    const fs::path dir = test::scratch_dir("ckpt_no_config");
    expect_error([&] { Checkpoint::open(dir / "nope"); }, ErrorKind::NotFound, "does not exist");
    expect_error([&] { Checkpoint::open(dir); }, ErrorKind::NotFound, "has no config.json");
}

TEST(Checkpoint, OpensGoldens) {
    for (const char* model : {"deepseek-v3-tiny", "deepseek-v4-tiny", "qwen3-moe-tiny"}) {
        SCOPED_TRACE(model);
        const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / model);
        EXPECT_EQ(ckpt.shard_files(), (std::vector<std::string>{"model.safetensors"}));
        const std::vector<std::string> names = ckpt.names();
        ASSERT_FALSE(names.empty());
        EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
        for (const std::string& n : names) EXPECT_TRUE(ckpt.get(n).defined()) << n;
    }
}

}  // namespace
}  // namespace steadymoe
