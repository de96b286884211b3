// The network name of a listening endpoint, as users and configuration files
// write it and as peers exchange it.
//
// Every backend and provider is reached by host + port, so that the same
// "ip:port" in a config file works everywhere: IP providers bind the socket
// address; shared-memory providers, which have no ports, derive a node-local
// endpoint name from both (see the libfabric backend). Provider-specific raw
// names (fi_getname) never leave rdmalib.
#pragma once

#include <cstdint>
#include <string>

namespace rdmalib {

struct Address {
  /// IPv4 / IPv6 literal or host name.
  std::string host;
  /// TCP/UDP-style port; 0 only in a request ("choose one for me").
  uint16_t port = 0;

  /// "host:port", with IPv6 hosts in brackets ("[::1]:7000").
  std::string to_string() const;

  /// Parse "host:port" or "[v6]:port". Throws Error(Config) on malformed input.
  static Address parse(const std::string &text);

  bool operator==(const Address &o) const { return host == o.host && port == o.port; }
  bool operator!=(const Address &o) const { return !(*this == o); }
};

} // namespace rdmalib
