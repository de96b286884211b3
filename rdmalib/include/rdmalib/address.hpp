// The network name of a listening endpoint, as users and configuration files
// write it and as peers exchange it.
//
// Two forms. Where the fabric is reached by IP (a device with an ip_address),
// host + port, so that the same "ip:port" in a config file works everywhere:
// IP providers bind the socket address; shared-memory providers, which have
// no ports, derive a node-local endpoint name from both (see the libfabric
// backend). Where it is not (EFA, and any device configured without an
// ip_address), the provider's own endpoint name (fi_getname's bytes), carried
// opaquely: code above rdmalib stores and forwards its printable form
// "ofi:FORMAT:HEX" and never looks inside.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rdmalib {

/// A listening endpoint's network name: host:port, or the provider's opaque endpoint
/// name (the file's opening comment says when each is used). Plain data; copyable.
struct Address {
  Address() = default;
  /// host:port.
  Address(std::string host_, uint16_t port_) : host(std::move(host_)), port(port_) {}

  /// IPv4 / IPv6 literal or host name. Empty in an opaque address.
  std::string host;
  /// TCP/UDP-style port; 0 only in a request ("choose one for me") and in an
  /// opaque address.
  uint16_t port = 0;
  /// The provider's endpoint name, in its own format; empty for host:port.
  std::vector<uint8_t> name;
  /// The format of `name`: "in", "in6", "str", "efa", "psmx2", "ib_ud", ...
  /// or "fmtN" for libfabric address format N. A fabric refuses a name in a
  /// format other than its own (Error(Config)) instead of misreading it.
  std::string format;

  /// True for a provider endpoint name, false for host:port.
  bool opaque() const noexcept { return !name.empty(); }

  /// "host:port", with IPv6 hosts in brackets ("[::1]:7000"); an opaque
  /// address as "ofi:FORMAT:HEX" (lower-case hexadecimal bytes).
  std::string to_string() const;

  /// The inverse of to_string(): "host:port", "[v6]:port" or "ofi:FORMAT:HEX".
  /// Throws Error(Config) on malformed input.
  static Address parse(const std::string &text);

  /// What a protocol that carries a host and a port in separate fields puts
  /// in the host field: the host, or for an opaque address the whole
  /// "ofi:FORMAT:HEX" (its port field then holds 0).
  std::string host_text() const;

  /// True when `text` is in the opaque form ("ofi:..."), well-formed or not:
  /// for readers that must tell the forms apart before parsing.
  static bool opaque_text(const std::string &text) noexcept;

  /// The inverse of host_text(): an opaque address when `host_text` is one
  /// ("ofi:..."; `port` is ignored), else {host_text, port}. Throws
  /// Error(Config) for a malformed opaque name.
  static Address from_host_text(const std::string &host_text, uint16_t port);

  /// Same form and same bytes: two spellings of one endpoint (a host name and its IP)
  /// compare unequal.
  bool operator==(const Address &o) const {
    return host == o.host && port == o.port && name == o.name && format == o.format;
  }
  /// Negation of operator==.
  bool operator!=(const Address &o) const { return !(*this == o); }
};

} // namespace rdmalib
