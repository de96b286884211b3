// Binary fields in the servers' text formats (launch specs, node secrets and
// tokens in the resource manager's files and REST API) travel as lower-case
// hexadecimal. One implementation, so that every reader accepts the same text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rfaas::server {

/// Two lower-case hexadecimal digits per byte.
inline std::string to_hex(const void *data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto *p = static_cast<const uint8_t *>(data);
  std::string out(2 * size, '0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 0xF];
  }
  return out;
}

/// The value of one hexadecimal digit (either case), or -1.
inline int hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/// Exactly `size` bytes from `text` into `out`. False, with `out` partly
/// written, when `text` is not 2 x `size` hexadecimal digits.
inline bool from_hex(std::string_view text, uint8_t *out, size_t size) {
  if (text.size() != 2 * size)
    return false;
  for (size_t i = 0; i < size; ++i) {
    int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

} // namespace rfaas::server
