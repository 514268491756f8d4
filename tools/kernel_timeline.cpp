// The table of a kernel trace (kernel_trace.hpp): plain arithmetic on the recorded spans, built with or
// without CUDA so that it is tested everywhere.
#include "kernel_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace steadymoe::cli {

namespace {

// Tenths of a microsecond; a gap that rounds to zero prints as 0.0, not -0.0.
std::string micros(int64_t ns) {
    const std::string text = fmt::format("{:.1f}", double(ns) * 1e-3);
    return text == "-0.0" ? "0.0" : text;
}

// Where the balanced <...> or (...) group that opens at `open` ends (one past its closing bracket).
size_t skip_group(const std::string& s, size_t open) {
    const char o = s[open], c = o == '<' ? '>' : ')';
    int depth = 0;
    for (size_t i = open; i < s.size(); ++i) {
        if (s[i] == o) ++depth;
        if (s[i] == c && --depth == 0) return i + 1;
    }
    return s.size();
}

void erase_all(std::string& s, const std::string& what) {
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at)) s.erase(at, what.size());
}

}  // namespace

std::string short_kernel_name(const std::string& demangled) {
    std::string s = demangled;
    for (const char* prefix : {"void ", "steadymoe::cuda::", "steadymoe::", "(anonymous namespace)::", "<unnamed>::"})
        erase_all(s, prefix);
    // The parameter list: the first '(' outside template arguments.
    int depth = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '<') ++depth;
        else if (s[i] == '>') --depth;
        else if (s[i] == '(' && depth == 0) {
            s.erase(i, skip_group(s, i) - i);
            break;
        }
    }
    constexpr size_t kWidest = 100;
    if (s.size() > kWidest) s = s.substr(0, kWidest - 3) + "...";
    return s;
}

std::vector<std::string> kernel_timeline_header() {
    return {"#", "stream", "start µs", "µs", "gap µs", "blocks", "kernel"};
}

std::vector<std::vector<std::string>> kernel_timeline(std::vector<KernelSpan> spans) {
    std::vector<std::vector<std::string>> rows;
    if (spans.empty()) return rows;
    std::stable_sort(spans.begin(), spans.end(),
                     [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
    const uint64_t first = spans.front().start_ns;
    std::map<uint32_t, int> stream_number;          // in order of first use
    std::map<uint32_t, uint64_t> last_end_on;       // per stream
    uint64_t last_end = first, covered_to = first;  // covered_to: every kernel so far has ended by then
    int64_t idle_ns = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
        const KernelSpan& k = spans[i];
        const auto number = stream_number.emplace(k.stream, int(stream_number.size())).first->second;
        const auto before = last_end_on.find(k.stream);
        const std::string gap =
            before == last_end_on.end() ? "-" : micros(int64_t(k.start_ns) - int64_t(before->second));
        last_end_on[k.stream] = std::max(before == last_end_on.end() ? 0 : before->second, k.end_ns);
        if (k.start_ns > covered_to) idle_ns += int64_t(k.start_ns - covered_to);
        covered_to = std::max(covered_to, k.end_ns);
        last_end = std::max(last_end, k.end_ns);
        rows.push_back({std::to_string(i), fmt::format("s{}", number), micros(int64_t(k.start_ns) - int64_t(first)),
                        micros(int64_t(k.end_ns) - int64_t(k.start_ns)), gap, std::to_string(k.blocks),
                        short_kernel_name(k.name)});
    }
    rows.push_back({"", "", micros(int64_t(last_end - first)), "", "", "",
                    fmt::format("first start to last end; no kernel running for {} µs of it", micros(idle_ns))});
    return rows;
}

}  // namespace steadymoe::cli
