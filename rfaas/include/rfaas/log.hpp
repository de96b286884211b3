// Logging of librfaas and of the network layer under it.
//
// librfaas never writes to the application's stdout. Its messages (components
// "rfaas" and "rdmalib") go to stderr, at level warn unless the environment
// variable RFAAS_LOG_LEVEL names another level when the library first logs
// (trace, debug, info, warn, error, critical, off). A program overrides both
// with set_log_level, and can take the messages into its own logging with
// set_log_sink.
#pragma once

#include <functional>
#include <string_view>

namespace rfaas {

/// Severity of a log message, lowest first; `off` silences the library.
enum class LogLevel { trace, debug, info, warn, error, critical, off };

/// Sets the level of librfaas's (and rdmalib's) logging in this process.
/// `debug` shows each connection step with its duration: the provider chosen,
/// the addresses, the handshake; use it when a connection fails.
void set_log_level(LogLevel level);

/// The same, by name ("debug", "warn", ...). Throws std::invalid_argument,
/// naming the valid levels, for an unknown name.
void set_log_level(std::string_view level);

/// Receives one message: level, component ("rfaas", "rdmalib") and text
/// (without timestamp or newline). It is called on the thread that logged,
/// under a lock, so it must be quick and must not call back into librfaas.
using LogSink = std::function<void(LogLevel, std::string_view component, std::string_view text)>;

/// Sends librfaas's messages to `sink` instead of stderr. An empty sink
/// restores stderr.
void set_log_sink(LogSink sink);

} // namespace rfaas
