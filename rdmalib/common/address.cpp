// Address: "host:port" text form shared by configuration files, logs and the
// connection handshake. Kept strict so a typo in a config file is reported
// instead of silently connecting somewhere else.
#include <rdmalib/address.hpp>
#include <rdmalib/errors.hpp>

namespace rdmalib {

namespace {

[[noreturn]] void bad_address(const std::string &text, const std::string &why) {
  throw Error(ErrorKind::Config, "rdmalib: invalid address \"" + text + "\": " + why +
                                     " (expected host:port or [ipv6]:port)");
}

// Digits only, 0..65535. std::stoul would accept "+1", " 1" and "1x".
uint16_t parse_port(const std::string &text, const std::string &port) {
  if (port.empty())
    bad_address(text, "missing port");
  if (port.size() > 5)
    bad_address(text, "port \"" + port + "\" is out of range 0..65535");
  uint32_t value = 0;
  for (char c : port) {
    if (c < '0' || c > '9')
      bad_address(text, "port \"" + port + "\" is not a number");
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value > 65535)
    bad_address(text, "port \"" + port + "\" is out of range 0..65535");
  return static_cast<uint16_t>(value);
}

} // namespace

std::string Address::to_string() const {
  // An IPv6 literal contains ':', which would make the port ambiguous.
  if (host.find(':') != std::string::npos)
    return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Address Address::parse(const std::string &text) {
  Address a;
  if (text.empty())
    bad_address(text, "empty text");
  if (text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos)
      bad_address(text, "missing ']' after the IPv6 host");
    a.host = text.substr(1, close - 1);
    if (a.host.empty())
      bad_address(text, "empty host");
    if (close + 1 >= text.size() || text[close + 1] != ':')
      bad_address(text, "missing ':port' after ']'");
    a.port = parse_port(text, text.substr(close + 2));
    return a;
  }
  auto colon = text.rfind(':');
  if (colon == std::string::npos)
    bad_address(text, "missing ':port'");
  a.host = text.substr(0, colon);
  if (a.host.empty())
    bad_address(text, "empty host");
  if (a.host.find(':') != std::string::npos)
    bad_address(text, "an IPv6 host must be written in brackets, as [" + a.host + "]:port");
  if (a.host.find_first_of(" \t[]") != std::string::npos)
    bad_address(text, "host \"" + a.host + "\" contains invalid characters");
  a.port = parse_port(text, text.substr(colon + 1));
  return a;
}

} // namespace rdmalib
