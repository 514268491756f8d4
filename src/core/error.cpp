#include "steadymoe/core/error.hpp"

namespace steadymoe {

const char* error_kind_name(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::InvalidArgument: return "invalid argument";
        case ErrorKind::BadFormat: return "bad format";
        case ErrorKind::NotFound: return "not found";
        case ErrorKind::Unsupported: return "unsupported";
        case ErrorKind::OutOfMemory: return "out of memory";
        case ErrorKind::Io: return "i/o error";
        case ErrorKind::Communication: return "communication error";
        case ErrorKind::Internal: return "internal error";
    }
    return "error";
}

}  // namespace steadymoe
