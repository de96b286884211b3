// rdmalib error model.
//
// Two channels, following the policy of the best OFI consumers:
//  * setup, configuration and allocation failures throw rdmalib::Error, whose
//    message carries the whole context (what was attempted, on which provider or
//    device, the backend's own error text, and where possible the fix);
//  * the data path never throws and never allocates: posts return a Status and
//    completions carry one, so a busy-polling worker pays nothing for errors it
//    does not have.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rdmalib {

/// Outcome of a data-path call or of one completion.
enum class Status : uint8_t {
  Ok = 0,
  /// Resources are momentarily exhausted (queue full, credits). Retrying after
  /// polling completions may succeed. Posts only return this when the caller
  /// asked for a non-blocking post; the default posts retry internally.
  Again,
  /// A deadline passed before the operation could be posted or completed.
  Timeout,
  /// The peer closed the connection or went away.
  Closed,
  /// The operation needs a capability this fabric does not have (see
  /// Capabilities); nothing was posted.
  Unsupported,
  /// A local argument is invalid (buffer too small, offset out of range).
  InvalidArgument,
  /// The operation was cancelled, usually because the connection is closing.
  Cancelled,
  /// Any other failure reported by the backend; see Connection::last_error().
  Error,
};

/// Short stable name of a status ("ok", "timeout", ...), for logs and tests.
const char *to_string(Status s) noexcept;

/// The inverse of to_string(Status): false (and `out` unchanged) otherwise.
bool parse_status(std::string_view text, Status &out) noexcept;

/// Category of a thrown setup error, so callers can react without parsing text.
enum class ErrorKind : uint8_t {
  /// Bad or missing configuration (device database, option value).
  Config,
  /// The requested provider, device or address does not exist here.
  NotFound,
  /// The backend does not support what was requested.
  Unsupported,
  /// A blocking setup step (connect, accept, handshake) passed its deadline.
  Timeout,
  /// The peer refused the connection (nobody listening, or rejected).
  Refused,
  /// The peer closed or the connection broke during setup.
  Closed,
  /// A backend call failed; the message holds the backend's text.
  Backend,
};

/// Short stable name of an error kind ("config", "not_found", "unsupported",
/// "timeout", "refused", "closed", "backend"), as rfaas-info's JSON reports it.
const char *to_string(ErrorKind k) noexcept;

/// The inverse of to_string(ErrorKind): false (and `out` unchanged) otherwise.
bool parse_error_kind(std::string_view text, ErrorKind &out) noexcept;

/// The single exception type thrown by rdmalib. what() is a complete,
/// human-readable sentence; backend_code() is the raw backend error number
/// (a positive errno / FI_E* value), or 0 when the error is rdmalib's own.
class Error : public std::runtime_error {
public:
  /// `message` carries the whole context and the fix; `backend_code` the backend's own
  /// error number, 0 if none.
  Error(ErrorKind kind, const std::string &message, int backend_code = 0)
      : std::runtime_error(message), kind_(kind), code_(backend_code) {}

  /// What went wrong, for callers that react differently (retry on Timeout, ...).
  ErrorKind kind() const noexcept { return kind_; }
  /// The backend's error number (-FI_E..., errno), 0 if none.
  int backend_code() const noexcept { return code_; }

private:
  ErrorKind kind_;
  int code_;
};

} // namespace rdmalib
