// steadymoe: the command-line front end. This is the only place the process decides its exit code:
// 0 success, 1 a verification ran and failed, 2 bad usage or bad input (docs/cli.md). Every error is
// one line on stderr, "steadymoe: error: <what>", naming the file, tensor, field or token at fault.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "steadymoe/core/error.hpp"

namespace {

using namespace steadymoe::cli;

// Library and CLI11 messages may span lines; the contract is one line per error.
std::string one_line(std::string text) {
    for (char& c : text) {
        if (c == '\n' || c == '\r') c = ' ';
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    return text;
}

int report(const std::string& message) {
    fmt::print(stderr, "steadymoe: error: {}\n", one_line(message));
    return kExitBadInput;
}

// CLI11 reports an unknown word as "arguments were not expected"; say plainly that it is an unknown
// command instead. The first argument that is not a flag is the command (top-level flags take no values).
std::string unknown_command(int argc, char** argv, const std::vector<Command>& commands) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (!arg.empty() && arg[0] == '-') continue;
        for (const Command& c : commands) {
            if (c.app->get_name() == arg) return "";
        }
        return arg;
    }
    return "";
}

int run_cli(int argc, char** argv) {
    CLI::App app{
        "SteadyMoE: Mixture-of-Experts layers whose outputs are bitwise reproducible.\n"
        "Each token's output bytes depend on that token alone, never on the batch or the thread count."};
    app.name("steadymoe");
    app.set_version_flag("--version", "steadymoe 0.1.0");
    app.require_subcommand(1);
    app.fallthrough();  // top-level flags may also follow the command: `steadymoe run --quiet`
    bool quiet_flag = false;
    app.add_flag("-q,--quiet", quiet_flag, "No progress lines on stderr");

    const std::vector<Command> commands = {add_run_command(app), add_inspect_command(app),
                                           add_verify_command(app), add_quantize_command(app),
                                           add_bench_command(app), add_plan_command(app)};

    if (const std::string bad = unknown_command(argc, argv, commands); !bad.empty()) {
        return report(
            fmt::format("unknown command '{}' (commands: run, inspect, verify, quantize, bench, plan; "
                        "see steadymoe --help)",
                        bad));
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version: print and succeed
        return report(e.what());
    }
    set_command_line(argc, argv);
    set_quiet(quiet_flag);
    for (const Command& c : commands) {
        if (app.got_subcommand(c.app)) return c.run();
    }
    return report("no command given (see steadymoe --help)");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run_cli(argc, argv);
    } catch (const steadymoe::Error& e) {
        if (e.kind() == steadymoe::ErrorKind::Internal) {
            return report(fmt::format("internal error, please report: {} (at {})", e.what(), e.where()));
        }
        return report(e.what());
    } catch (const std::bad_alloc&) {
        return report("out of memory");
    } catch (const std::filesystem::filesystem_error& e) {
        return report(e.what());
    } catch (const std::exception& e) {
        return report(e.what());
    }
}
