// Whole-file reads and atomic writes, with errors that name the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace steadymoe {

// Reads a regular file of at most max_bytes. Throws NotFound (no such file), BadFormat (not a
// regular file, or larger than max_bytes) or Io, each naming the path.
std::string read_file_text(const std::filesystem::path& path, uint64_t max_bytes);

// Writes bytes to "<path>.tmp.<pid>" beside it, then renames it into place: a reader sees the old
// file or the whole new one, never a partial one. The temporary is removed on failure.
void write_file_atomic(const std::filesystem::path& path, const std::string& bytes);

}  // namespace steadymoe
