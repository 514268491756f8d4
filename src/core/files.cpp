#include "steadymoe/core/files.hpp"

#include "steadymoe/core/error.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

namespace steadymoe {

std::string read_file_text(const std::filesystem::path& path, uint64_t max_bytes) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (status.type() == std::filesystem::file_type::not_found) SMOE_THROW(NotFound, "{}: no such file", path.string());
    SMOE_CHECK(!ec, Io, "{}: cannot stat: {}", path.string(), ec.message());
    SMOE_CHECK(std::filesystem::is_regular_file(status), BadFormat, "{}: not a regular file", path.string());
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    SMOE_CHECK(!ec, Io, "{}: cannot read its size: {}", path.string(), ec.message());
    SMOE_CHECK(size <= max_bytes, BadFormat, "{}: {} bytes is more than the {} this file may hold", path.string(),
               size, max_bytes);

    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!file) {
        const int err = errno;
        SMOE_CHECK(err != ENOENT, NotFound, "{}: no such file", path.string());
        SMOE_THROW(Io, "{}: cannot open: {}", path.string(), std::strerror(err));
    }
    std::string text;
    char buffer[1 << 16];
    // The size can change between stat and read; the limit holds for what is actually read.
    while (const size_t got = std::fread(buffer, 1, sizeof(buffer), file.get())) {
        text.append(buffer, got);
        SMOE_CHECK(text.size() <= max_bytes, BadFormat, "{}: more than the {} bytes this file may hold",
                   path.string(), max_bytes);
    }
    SMOE_CHECK(!std::ferror(file.get()), Io, "{}: read failed: {}", path.string(), std::strerror(errno));
    return text;
}

void write_file_atomic(const std::filesystem::path& path, const std::string& bytes) {
    const std::filesystem::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        SMOE_CHECK(f.good(), Io, "{}: cannot open for writing", tmp.string());
        f.write(bytes.data(), std::streamsize(bytes.size()));
        f.flush();
        if (!f.good()) {
            std::error_code ignored;
            std::filesystem::remove(tmp, ignored);
            SMOE_THROW(Io, "{}: write failed", tmp.string());
        }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::error_code ignored;
        std::filesystem::remove(tmp, ignored);
        SMOE_THROW(Io, "cannot rename {} into {}: {}", tmp.string(), path.string(), ec.message());
    }
}

}  // namespace steadymoe
