// Address: the text forms ("host:port", "ofi:FORMAT:HEX") shared by
// configuration files, logs and the connection handshake. Kept strict so a
// typo in a config file is reported instead of silently connecting somewhere
// else.
#include <rdmalib/address.hpp>
#include <rdmalib/errors.hpp>

namespace rdmalib {

namespace {

[[noreturn]] void bad_address(const std::string &text, const std::string &why) {
  throw Error(ErrorKind::Config, "rdmalib: invalid address \"" + text + "\": " + why +
                                     " (expected host:port, [ipv6]:port or ofi:FORMAT:HEX)");
}

constexpr char kOpaquePrefix[] = "ofi:";
constexpr size_t kOpaquePrefixLen = sizeof(kOpaquePrefix) - 1;
// fi_getname's names are far shorter (EFA: 32 bytes); a bound keeps a
// malformed configuration from allocating without limit.
constexpr size_t kMaxNameBytes = 256;
constexpr size_t kMaxFormatChars = 16;

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

Address parse_opaque(const std::string &text) {
  auto colon = text.find(':', kOpaquePrefixLen);
  if (colon == std::string::npos)
    bad_address(text, "missing ':' between the name's format and its bytes");
  Address a;
  a.format = text.substr(kOpaquePrefixLen, colon - kOpaquePrefixLen);
  if (a.format.empty() || a.format.size() > kMaxFormatChars)
    bad_address(text, "the name's format must have 1 to 16 characters");
  for (char c : a.format)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      bad_address(text,
                  "the name's format \"" + a.format + "\" has characters other than a-z, 0-9, _");
  std::string hex = text.substr(colon + 1);
  if (hex.empty())
    bad_address(text, "empty name");
  if (hex.size() % 2)
    bad_address(text, "the name has an odd number of hexadecimal digits");
  if (hex.size() / 2 > kMaxNameBytes)
    bad_address(text, "the name is longer than " + std::to_string(kMaxNameBytes) + " bytes");
  a.name.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = hex_value(hex[i]), lo = hex_value(hex[i + 1]);
    if (hi < 0 || lo < 0)
      bad_address(text, "the name has a character that is not a hexadecimal digit");
    a.name.push_back(static_cast<uint8_t>(hi * 16 + lo));
  }
  return a;
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
  if (opaque()) {
    static const char digits[] = "0123456789abcdef";
    std::string out = kOpaquePrefix + format + ":";
    out.reserve(out.size() + 2 * name.size());
    for (uint8_t b : name) {
      out.push_back(digits[b >> 4]);
      out.push_back(digits[b & 15]);
    }
    return out;
  }
  // An IPv6 literal contains ':', which would make the port ambiguous.
  if (host.find(':') != std::string::npos)
    return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Address Address::parse(const std::string &text) {
  Address a;
  if (text.empty())
    bad_address(text, "empty text");
  if (Address::opaque_text(text))
    return parse_opaque(text);
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

bool Address::opaque_text(const std::string &text) noexcept {
  return text.rfind(kOpaquePrefix, 0) == 0;
}

std::string Address::host_text() const { return opaque() ? to_string() : host; }

Address Address::from_host_text(const std::string &host_text, uint16_t port) {
  if (Address::opaque_text(host_text))
    return parse_opaque(host_text);
  return Address{host_text, port};
}

} // namespace rdmalib
