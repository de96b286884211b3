// Logging of every rFaaS component, without spdlog types.
//
// Each component logs through its own named logger ("rdmalib", "rfaas",
// "manager", "executor", "resource_manager"); all of them write to stderr
// through one shared sink, at one shared level (default: warn, or the value of
// the RFAAS_LOG_LEVEL environment variable when the first logger is created).
// The state lives in spdlog's process-wide registry, so every copy of this code
// in a process (librfaas.so, a statically linked tool) sees the same settings.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace rdmalib::log {

/// Severity, lowest first; `off` silences everything.
enum class Level { trace, debug, info, warn, error, critical, off };

/// Environment variable read for the initial level (by binaries: below the
/// command line, above a configuration file).
inline constexpr const char *kEnvVar = "RFAAS_LOG_LEVEL";

/// "trace, debug, info, warn, error, critical, off": for usage errors.
const char *valid_levels() noexcept;

/// The level named `name` (as in valid_levels(); "warning" is taken for "warn"),
/// or nothing for an unknown name.
std::optional<Level> parse_level(std::string_view name) noexcept;

/// The name of `level` as parse_level accepts it.
const char *to_string(Level level) noexcept;

/// Sets the level of every rFaaS logger, present and future, in this process.
void set_level(Level level);

/// The level the rFaaS loggers use now.
Level level();

/// Receives one formatted message: its level, the component's logger name and
/// the text (no timestamp or newline). Called from the thread that logged, with
/// a lock held: it must not log through rFaaS itself.
using Sink = std::function<void(Level, std::string_view logger, std::string_view text)>;

/// Sends every rFaaS log message to `sink` instead of stderr; an empty sink
/// restores stderr.
void set_sink(Sink sink);

} // namespace rdmalib::log
