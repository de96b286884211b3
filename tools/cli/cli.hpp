// Command-line conventions shared by every rFaaS binary (not part of librfaas):
// --help, --version, --log-level, and the exit status
//   0 success, 1 failure, 2 usage error (bad option or value, missing argument).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <rdmalib/log.hpp>

#include "options.hpp"

namespace rfaas::cli {

inline constexpr int kSuccess = 0;
inline constexpr int kFailure = 1;
inline constexpr int kUsage = 2;

/// A bad command line or environment: reported with "(see --help)", exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Adds -h/--help, --version and (unless `log_level` is false) --log-level.
void add_standard_options(Options &options, bool log_level = true);

/// "<program> (rFaaS 0.1.0), network backend libfabric 1.17.0".
std::string version_text(std::string_view program);

/// The log level for a binary, by precedence: --log-level, then
/// RFAAS_LOG_LEVEL, then `fallback` (a configuration file's value, or the
/// binary's default). Applies it to every rFaaS logger and exports it in
/// RFAAS_LOG_LEVEL so that child processes (zygote, executors) inherit it.
/// Throws UsageError naming the valid levels for an unknown level.
rdmalib::log::Level apply_log_level(const ParseResult &args, std::string_view fallback = "warn");

/// Parses the command line, answers --help and --version, then runs `body`,
/// mapping what escapes it to an exit status: OptionError and UsageError
/// to 2 with "<program>: <message> (see --help)", other exceptions to 1 with
/// "<program>: <message>".
int run(std::string_view program, Options &options, int argc, char **argv,
        const std::function<int(const ParseResult &)> &body);

} // namespace rfaas::cli
