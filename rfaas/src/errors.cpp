#include <rfaas/errors.hpp>

#include "protocol/protocol.hpp"

namespace rfaas {

// The wire statuses keep their protocol values, so a received ErrorCode is
// converted with a cast.
static_assert(static_cast<uint16_t>(status::provisioning) == protocol::kMaxErrorCode,
              "rfaas::status mirrors protocol::ErrorCode");
static_assert(static_cast<uint16_t>(status::function_crashed) ==
                  static_cast<uint16_t>(protocol::ErrorCode::FunctionCrashed),
              "rfaas::status mirrors protocol::ErrorCode");

const char *to_string(status s) noexcept {
  switch (s) {
  case status::closed:
    return "closed";
  case status::network_error:
    return "network_error";
  case status::busy:
    return "busy";
  case status::invalid_argument:
    return "invalid_argument";
  default:
    break;
  }
  if (static_cast<uint16_t>(s) <= protocol::kMaxErrorCode)
    return protocol::to_string(static_cast<protocol::ErrorCode>(s));
  return "unknown_status";
}

const char *to_string(phase p) noexcept {
  switch (p) {
  case phase::configuration:
    return "configuration";
  case phase::connect:
    return "connect";
  case phase::allocation:
    return "allocation";
  case phase::workers:
    return "workers";
  case phase::code:
    return "code";
  case phase::deallocation:
    return "deallocation";
  case phase::usage:
    return "usage";
  case phase::lease:
    return "lease";
  }
  return "unknown";
}

namespace {
std::string sentence(phase ph, const std::string &manager, status st, const std::string &detail) {
  std::string s = "rfaas: ";
  s += to_string(ph);
  if (!manager.empty())
    s += " at " + manager;
  s += " failed: ";
  s += to_string(st);
  if (!detail.empty())
    s += ": " + detail;
  return s;
}
} // namespace

Error::Error(phase ph, std::string manager, status st, const std::string &detail)
    : std::runtime_error(sentence(ph, manager, st, detail)), phase_(ph),
      manager_(std::move(manager)), status_(st) {}

} // namespace rfaas
