// Where the executor managers are: the server database (JSON).
//
//   { "executor_managers": [
//       { "name": "node1", "address": "127.0.0.1", "port": 10000 } ] }
//
// `name` is optional (defaults to "address:port"); unknown keys are rejected so
// that a typo does not silently fall back to a default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rfaas {

/// One executor manager. Plain data; copyable.
struct server {
  /// What clients and configuration files call it (find() takes the first of a name).
  std::string name;
  /// Host name or IP literal of its listener, or the whole endpoint name
  /// ("ofi:FORMAT:HEX") a manager prints where its device has no IP address.
  std::string address;
  /// 0 with an "ofi:" address.
  uint16_t port = 0;

  /// "address:port", or the "ofi:" address alone.
  std::string endpoint() const;

  /// The inverse of endpoint(), for an address as an executor_manager prints
  /// it ("listening on <provider> <address>"): "host:port", "[ipv6]:port" or
  /// "ofi:FORMAT:HEX". The name is the text. Throws rfaas::Error
  /// (configuration, invalid_argument) naming the text when it is malformed.
  static server parse(const std::string &text);
};

/// The list of executor managers a client may allocate from.
/// Thread-safety: const calls are safe from any thread.
class server_database {
public:
  server_database() = default;
  /// A database of `servers`, as given (no check, no file).
  explicit server_database(std::vector<server> servers) : servers_(std::move(servers)) {}

  /// Load from a file. Throws rfaas::Error(phase::configuration) naming the
  /// file and the key.
  static server_database load(const std::string &path);
  /// Parse JSON text; `origin` names it in errors.
  static server_database parse(const std::string &json_text, const std::string &origin);

  /// Every entry, in file order.
  const std::vector<server> &servers() const noexcept { return servers_; }
  /// True when the database lists no manager.
  bool empty() const noexcept { return servers_.empty(); }

  /// The first entry called `name`, else the first whose "address:port", or
  /// opaque ofi: name in either case of its hex digits, equals it. Throws
  /// rfaas::Error(phase::configuration) listing the known names.
  const server &find(const std::string &name) const;

  /// A manager for the next allocation: round robin over the list, starting
  /// with the first. Throws rfaas::Error(phase::configuration) when empty.
  /// Not thread-safe (it advances a cursor).
  const server &select();

private:
  std::vector<server> servers_;
  size_t next_ = 0;
};

} // namespace rfaas
