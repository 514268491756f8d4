// Marks a layer unusable when a scope is left by an exception: for the stretch of an expert-parallel
// batch after which a failure may leave the ranks' exchanges out of step.
#pragma once

#include <atomic>
#include <exception>

namespace steadymoe {

class BreakOnThrow {
public:
    explicit BreakOnThrow(std::atomic<bool>& flag) : flag_(flag), exceptions_(std::uncaught_exceptions()) {}
    ~BreakOnThrow() {
        if (std::uncaught_exceptions() > exceptions_) flag_ = true;
    }
    BreakOnThrow(const BreakOnThrow&) = delete;
    BreakOnThrow& operator=(const BreakOnThrow&) = delete;

private:
    std::atomic<bool>& flag_;
    int exceptions_;
};

}  // namespace steadymoe
