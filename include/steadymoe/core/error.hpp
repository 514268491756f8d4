// One exception type for the whole library. Library code throws; only the CLI decides to exit.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace steadymoe {

enum class ErrorKind {
    InvalidArgument,  // a caller passed something wrong: shapes, ids, options
    BadFormat,        // a file or its contents are damaged or inconsistent
    NotFound,         // a file, tensor or field that must exist does not
    Unsupported,      // valid, but not something this build can do
    OutOfMemory,      // an allocation failed
    Io,               // the operating system refused a read or a write
    Communication,    // another rank disagreed, failed or did not answer in time
    Internal,         // a bug in SteadyMoE
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, std::string message, const char* file = nullptr, int line = 0)
        : std::runtime_error(std::move(message)), kind_(kind), file_(file ? file : ""), line_(line) {}

    ErrorKind kind() const { return kind_; }
    // Where in SteadyMoE the error was raised (for bug reports), e.g. "src/model/safetensors.cpp:120".
    std::string where() const { return file_.empty() ? std::string() : fmt::format("{}:{}", file_, line_); }

private:
    ErrorKind kind_;
    std::string file_;
    int line_;
};

}  // namespace steadymoe

// SMOE_THROW(kind, "format {}", args...): raise an Error that records this file and line.
#define SMOE_THROW(kind, ...) \
    throw ::steadymoe::Error(::steadymoe::ErrorKind::kind, ::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

// SMOE_CHECK(cond, kind, "format {}", args...): raise when cond is false.
#define SMOE_CHECK(cond, kind, ...)      \
    do {                                 \
        if (!(cond)) {                   \
            SMOE_THROW(kind, __VA_ARGS__); \
        }                                \
    } while (0)
