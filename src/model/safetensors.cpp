// Safetensors reading (map, validate once, hand out views) and atomic writing.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON header (possibly padded with
// spaces), then the data area. Every check happens in parse(): a file that opens is safe to read.
#include "steadymoe/model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>
#include <set>

namespace steadymoe {
namespace {

using json = nlohmann::json;

constexpr const char* kMetadataKey = "__metadata__";

// ---- header JSON --------------------------------------------------------------------------------

// The JSON library keeps the last of two equal keys without a word, so a file could carry two
// different entries for one tensor and we would silently read one of them. Track the keys of every
// open object while parsing and reject the second occurrence.
class DuplicateKeyGuard {
  public:
    explicit DuplicateKeyGuard(const std::string& origin) : origin_(origin) {}

    bool operator()(int depth, json::parse_event_t event, json& parsed) {
        switch (event) {
            case json::parse_event_t::object_start:
                open_.emplace_back();
                break;
            case json::parse_event_t::object_end:
                open_.pop_back();
                break;
            case json::parse_event_t::key:
                check_key(depth, parsed.get<std::string>());
                break;
            default:
                break;
        }
        return true;
    }

  private:
    const std::string& origin_;
    std::vector<std::set<std::string>> open_;  // keys seen so far, per enclosing object
    std::string entry_;                        // the current top-level key, for messages

    void check_key(int depth, const std::string& key) {
        const bool fresh = open_.back().insert(key).second;
        if (depth == 1) {
            SMOE_CHECK(fresh, BadFormat, "{}: tensor name '{}' appears twice in the header", origin_, key);
            entry_ = key;
        } else {
            SMOE_CHECK(fresh, BadFormat, "{}: key '{}' appears twice in header entry '{}'", origin_, key,
                       entry_);
        }
    }
};

json parse_header_json(const char* text, size_t size, const std::string& origin) {
    DuplicateKeyGuard guard(origin);
    json header;
    try {
        header = json::parse(text, text + size, std::ref(guard));
    } catch (const json::exception& e) {
        SMOE_THROW(BadFormat, "{}: header is not valid JSON ({})", origin, e.what());
    }
    SMOE_CHECK(header.is_object(), BadFormat, "{}: header is a JSON {}, expected an object", origin,
               header.type_name());
    return header;
}

// ---- one entry ----------------------------------------------------------------------------------

std::map<std::string, std::string> parse_metadata(const json& value, const std::string& origin) {
    SMOE_CHECK(value.is_object(), BadFormat, "{}: __metadata__ is a JSON {}, expected an object", origin,
               value.type_name());
    std::map<std::string, std::string> out;
    for (const auto& [key, v] : value.items()) {
        SMOE_CHECK(v.is_string(), BadFormat,
                   "{}: __metadata__ value for '{}' is a JSON {}, expected a string", origin, key,
                   v.type_name());
        out.emplace(key, v.get<std::string>());
    }
    return out;
}

// A short rendering of a JSON value for messages. Containers are named, not printed: printing is
// recursive and a hostile header may nest arbitrarily deep.
std::string brief(const json& v) {
    if (v.is_array()) return fmt::format("an array of length {}", v.size());
    if (v.is_object()) return "an object";
    std::string s = v.dump();
    if (s.size() > 40) s = s.substr(0, 37) + "...";
    return s;
}

const json& require_field(const json& entry, const char* field, const std::string& name,
                          const std::string& origin) {
    const auto it = entry.find(field);
    SMOE_CHECK(it != entry.end(), BadFormat, "{}: tensor '{}' has no \"{}\"", origin, name, field);
    return *it;
}

// A non-negative integer that fits int64 (dims and offsets are stored as int64/uint64 downstream).
// The JSON parser stores non-negative integers as unsigned, negative ones as signed, anything with a
// fraction or exponent (or too large for 64 bits) as floating point.
uint64_t as_count(const json& v, const char* what, const std::string& name, const std::string& origin) {
    SMOE_CHECK(!v.is_number_integer() || v.is_number_unsigned(), BadFormat,
               "{}: tensor '{}' has a negative {} ({})", origin, name, what, brief(v));
    SMOE_CHECK(v.is_number_unsigned(), BadFormat, "{}: tensor '{}' has a non-integer {} ({})", origin, name,
               what, brief(v));
    const uint64_t n = v.get<uint64_t>();
    SMOE_CHECK(n <= uint64_t(INT64_MAX), BadFormat, "{}: tensor '{}' has a {} too large ({})", origin, name,
               what, n);
    return n;
}

DType parse_dtype(const json& v, const std::string& name, const std::string& origin) {
    SMOE_CHECK(v.is_string(), BadFormat, "{}: tensor '{}' dtype is a JSON {}, expected a string", origin,
               name, v.type_name());
    const std::string s = v.get<std::string>();
    const auto dtype = dtype_from_name(s);
    SMOE_CHECK(dtype.has_value(), BadFormat, "{}: unknown dtype '{}' for tensor '{}'", origin, s, name);
    return *dtype;
}

Shape parse_shape(const json& v, const std::string& name, const std::string& origin) {
    SMOE_CHECK(v.is_array(), BadFormat, "{}: tensor '{}' shape is a JSON {}, expected an array", origin, name,
               v.type_name());
    Shape shape;
    shape.reserve(v.size());
    for (const json& d : v) shape.push_back(int64_t(as_count(d, "dimension in shape", name, origin)));
    return shape;
}

// Bytes the tensor needs, or an error when the element count or byte count overflows 64 bits. The
// running product is checked dim by dim, as shape_numel() does, so a shape accepted here can always
// become a Tensor later.
uint64_t needed_bytes(const Shape& shape, DType dtype, const std::string& name, const std::string& origin) {
    uint64_t numel = 1;
    for (int64_t d : shape) {
        SMOE_CHECK(d == 0 || numel <= uint64_t(INT64_MAX) / uint64_t(d), BadFormat,
                   "{}: tensor '{}' shape {} has more elements than fit in 64 bits", origin, name,
                   shape_str(shape));
        numel *= uint64_t(d);
    }
    SMOE_CHECK(numel <= uint64_t(INT64_MAX) / dtype_size(dtype), BadFormat,
               "{}: tensor '{}' shape {} needs more bytes than fit in 64 bits", origin, name,
               shape_str(shape));
    return numel * dtype_size(dtype);
}

TensorInfo parse_entry(const std::string& name, const json& entry, const std::string& origin) {
    SMOE_CHECK(entry.is_object(), BadFormat, "{}: header entry '{}' is a JSON {}, expected an object", origin,
               name, entry.type_name());
    TensorInfo info;
    info.name = name;
    info.dtype = parse_dtype(require_field(entry, "dtype", name, origin), name, origin);
    info.shape = parse_shape(require_field(entry, "shape", name, origin), name, origin);

    const json& offsets = require_field(entry, "data_offsets", name, origin);
    SMOE_CHECK(offsets.is_array() && offsets.size() == 2, BadFormat,
               "{}: tensor '{}' data_offsets must be [begin, end], got {}", origin, name, brief(offsets));
    info.begin = as_count(offsets[0], "data_offsets begin", name, origin);
    info.end = as_count(offsets[1], "data_offsets end", name, origin);
    SMOE_CHECK(info.begin <= info.end, BadFormat, "{}: tensor '{}' data_offsets begin {} > end {}", origin,
               name, info.begin, info.end);

    const uint64_t need = needed_bytes(info.shape, info.dtype, name, origin);
    SMOE_CHECK(info.end - info.begin == need, BadFormat,
               "{}: tensor '{}' data_offsets [{}, {}] hold {} bytes but {} {} needs {}", origin, name,
               info.begin, info.end, info.end - info.begin, dtype_name(info.dtype), shape_str(info.shape),
               need);
    return info;
}

// ---- layout of the data area --------------------------------------------------------------------

// Sorted by offset, the tensors must cover [0, data_size) exactly once: anything else is either a
// damaged file or bytes that no tensor accounts for.
void check_tiling(const std::vector<TensorInfo>& sorted, uint64_t data_size, const std::string& origin) {
    uint64_t cursor = 0;
    const TensorInfo* prev = nullptr;
    for (const TensorInfo& t : sorted) {
        SMOE_CHECK(t.end <= data_size, BadFormat,
                   "{}: tensor '{}' data_offsets [{}, {}] reach past the end of the data area ({} bytes; "
                   "file truncated?)",
                   origin, t.name, t.begin, t.end, data_size);
        SMOE_CHECK(t.begin >= cursor, BadFormat,
                   "{}: tensor '{}' data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", origin, t.name,
                   t.begin, t.end, prev ? prev->name : "", prev ? prev->begin : 0, cursor);
        SMOE_CHECK(t.begin == cursor, BadFormat,
                   "{}: hole of {} bytes in the data area at [{}, {}) before tensor '{}'", origin,
                   t.begin - cursor, cursor, t.begin, t.name);
        cursor = t.end;
        prev = &t;
    }
    SMOE_CHECK(cursor == data_size, BadFormat,
               "{}: {} trailing bytes after the last tensor (data area is {} bytes, tensors end at {})",
               origin, data_size - cursor, data_size, cursor);
}

uint64_t read_le64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

std::string errno_text(int err) { return std::strerror(err); }

// ---- memory mapping -----------------------------------------------------------------------------

// Closes a descriptor on every path out of open().
struct FdCloser {
    int fd;
    ~FdCloser() {
        if (fd >= 0) ::close(fd);
    }
};

std::shared_ptr<const void> map_file(int fd, size_t size, const std::string& origin) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;  // before anything else can overwrite it
    SMOE_CHECK(p != MAP_FAILED, Io, "{}: cannot mmap {} bytes: {}", origin, size, errno_text(err));
    return std::shared_ptr<const void>(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
}

}  // namespace

// ---- SafetensorsFile ----------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
    const std::string origin = path.string();
    FdCloser fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0) {
        const int err = errno;
        SMOE_CHECK(err != ENOENT, NotFound, "{}: no such file", origin);
        SMOE_THROW(Io, "{}: cannot open: {}", origin, errno_text(err));
    }
    struct stat st {};
    const bool stat_ok = ::fstat(fd.fd, &st) == 0;
    const int stat_err = errno;
    SMOE_CHECK(stat_ok, Io, "{}: cannot stat: {}", origin, errno_text(stat_err));
    SMOE_CHECK(S_ISREG(st.st_mode), BadFormat, "{}: not a regular file", origin);
    const size_t size = size_t(st.st_size);
    // mmap of zero bytes fails with EINVAL; say what is really wrong instead.
    SMOE_CHECK(size > 0, BadFormat, "{}: file is empty (0 bytes), expected a safetensors file", origin);
    SMOE_CHECK(size >= 8, BadFormat, "{}: file is {} bytes, too short for the 8-byte header length", origin,
               size);
    std::shared_ptr<const void> mapping = map_file(fd.fd, size, origin);
    const auto* bytes = static_cast<const uint8_t*>(mapping.get());
    return parse(std::move(mapping), bytes, size, origin);
}

SafetensorsFile SafetensorsFile::from_bytes(const void* data, size_t size, std::string origin) {
    SMOE_CHECK(size >= 8, BadFormat, "{}: {} bytes, too short for the 8-byte header length", origin, size);
    // An aligned private copy: the caller's buffer may go away, and aligned storage keeps the data
    // area as aligned as it would be in a mapped file.
    void* copy = ::operator new(size, std::align_val_t(64), std::nothrow);
    SMOE_CHECK(copy != nullptr, OutOfMemory, "{}: cannot allocate {} bytes", origin, size);
    std::shared_ptr<const void> holder(
        copy, [](const void* q) { ::operator delete(const_cast<void*>(q), std::align_val_t(64)); });
    std::memcpy(copy, data, size);
    return parse(std::move(holder), static_cast<const uint8_t*>(copy), size, std::move(origin));
}

SafetensorsFile SafetensorsFile::parse(std::shared_ptr<const void> holder, const uint8_t* bytes, size_t size,
                                       std::string origin) {
    SMOE_CHECK(size >= 8, BadFormat, "{}: {} bytes, too short for the 8-byte header length", origin, size);
    const uint64_t header_len = read_le64(bytes);
    SMOE_CHECK(header_len <= kMaxSafetensorsHeaderBytes, BadFormat,
               "{}: header length {} exceeds the {} byte limit", origin, header_len,
               kMaxSafetensorsHeaderBytes);
    SMOE_CHECK(header_len <= size - 8, BadFormat,
               "{}: header length {} runs past the end of the file ({} bytes after the length field)", origin,
               header_len, size - 8);

    const json header = parse_header_json(reinterpret_cast<const char*>(bytes + 8), header_len, origin);

    SafetensorsFile file;
    for (const auto& [key, value] : header.items()) {
        if (key == kMetadataKey) {
            file.metadata_ = parse_metadata(value, origin);
        } else {
            file.tensors_.push_back(parse_entry(key, value, origin));
        }
    }
    std::sort(file.tensors_.begin(), file.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    const uint64_t data_size = size - 8 - header_len;
    check_tiling(file.tensors_, data_size, origin);

    for (size_t i = 0; i < file.tensors_.size(); ++i) file.index_.emplace(file.tensors_[i].name, i);
    file.origin_ = std::move(origin);
    file.mapping_ = std::move(holder);
    file.data_area_ = bytes + 8 + header_len;
    return file;
}

bool SafetensorsFile::contains(const std::string& name) const { return index_.count(name) != 0; }

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

Tensor SafetensorsFile::get(const std::string& name) const {
    const TensorInfo* info = find(name);
    SMOE_CHECK(info != nullptr, NotFound, "{}: no tensor named '{}'", origin_, name);
    const uint8_t* bytes = data_area_ + info->begin;
    // Offsets need not respect the element size (writers pack tensors back to back); a misaligned
    // view would make every typed read undefined, so such a tensor is copied into aligned memory.
    if (reinterpret_cast<uintptr_t>(bytes) % dtype_size(info->dtype) != 0) {
        Tensor copy = Tensor::zeros(info->dtype, info->shape);
        std::memcpy(copy.mutable_raw(), bytes, copy.nbytes());
        return copy;
    }
    return Tensor::borrow(info->dtype, info->shape, bytes, mapping_);
}

// ---- writing ------------------------------------------------------------------------------------

namespace {

std::string build_header(const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata, const std::string& origin) {
    // Insertion-ordered so the header lists tensors in the caller's order, matching their offsets.
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header[kMetadataKey] = metadata;
    uint64_t offset = 0;
    std::set<std::string> seen;
    for (const auto& [name, t] : tensors) {
        SMOE_CHECK(name != kMetadataKey, InvalidArgument, "{}: '{}' is reserved and cannot name a tensor",
                   origin, name);
        SMOE_CHECK(seen.insert(name).second, InvalidArgument, "{}: tensor name '{}' given twice", origin,
                   name);
        SMOE_CHECK(t.defined(), InvalidArgument, "{}: tensor '{}' has no storage", origin, name);
        const uint64_t end = offset + t.nbytes();
        header[name] = {{"dtype", std::string(dtype_name(t.dtype()))},
                        {"shape", t.shape()},
                        {"data_offsets", {offset, end}}};
        offset = end;
    }
    std::string text;
    try {
        text = header.dump();
    } catch (const nlohmann::json::exception& e) {
        // Names and metadata must be valid UTF-8 to be JSON strings.
        SMOE_THROW(InvalidArgument, "{}: cannot encode header ({})", origin, e.what());
    }
    // Spaces up to a multiple of 8 keep the data area 8-byte aligned in the file.
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
}

// Writes all of [p, p + n), retrying short writes and interrupted calls. Returns 0 or an errno.
int write_all(int fd, const void* p, size_t n) {
    const auto* c = static_cast<const char*>(p);
    while (n > 0) {
        const ssize_t w = ::write(fd, c, std::min<size_t>(n, size_t(1) << 30));
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        c += w;
        n -= size_t(w);
    }
    return 0;
}

// Writes the whole file to an open descriptor and flushes it to disk. Returns 0 or an errno.
int write_contents(int fd, const std::string& header,
                   const std::vector<std::pair<std::string, Tensor>>& tensors) {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
    if (int err = write_all(fd, len, 8)) return err;
    if (int err = write_all(fd, header.data(), header.size())) return err;
    for (const auto& [name, t] : tensors) {
        if (int err = write_all(fd, t.raw(), t.nbytes())) return err;
    }
    return ::fsync(fd) == 0 ? 0 : errno;
}

// Makes the rename itself durable. Some filesystems refuse fsync on a directory; the file is already
// complete and in place by then, so that is not worth failing the write for.
void sync_directory(const std::filesystem::path& dir) {
    const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

}  // namespace

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    const std::string origin = path.string();
    const std::string header = build_header(tensors, metadata, origin);

    // Same directory as the target, so the rename stays within one filesystem and is atomic.
    std::filesystem::path tmp = path;
    tmp += ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int open_err = errno;
    SMOE_CHECK(fd >= 0, Io, "{}: cannot create temporary file {}: {}", origin, tmp.string(),
               errno_text(open_err));

    int err = write_contents(fd, header, tensors);
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
    if (err != 0) {
        ::unlink(tmp.c_str());
        SMOE_THROW(Io, "{}: cannot write: {}", origin, errno_text(err));
    }
    sync_directory(path.parent_path());
}

}  // namespace steadymoe
