// Capability masks (the test-only switch that forces fallback paths) and the
// one-line description of negotiated capabilities.
#include <rdmalib/capabilities.hpp>
#include <rdmalib/errors.hpp>

#include <cstdlib>

namespace rdmalib {

namespace {

struct CapName {
  CapabilityBit bit;
  const char *name;
};

// Canonical order: to_string() prints in this order.
constexpr CapName kCapNames[] = {
    {CapRemoteCqData, "remote_cq_data"},
    {CapAtomics, "atomics"},
    {CapVirtualAddressing, "virtual_addressing"},
    {CapWaitFd, "wait_fd"},
    {CapInline, "inline"},
    {CapSharedEndpoint, "shared_endpoint"},
};

std::string valid_names() {
  std::string out;
  for (const auto &c : kCapNames) {
    if (!out.empty())
      out += ", ";
    out += c.name;
  }
  return out;
}

std::string trim(const std::string &s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos)
    return "";
  auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

const char *yes_no(bool b) { return b ? "yes" : "no"; }

} // namespace

CapabilityMask CapabilityMask::parse(const std::string &list) {
  CapabilityMask mask;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos)
      comma = list.size();
    std::string token = trim(list.substr(start, comma - start));
    start = comma + 1;
    // Empty tokens ("", "a,", " ") are tolerated: an empty list is the empty mask.
    if (token.empty())
      continue;
    bool found = false;
    for (const auto &c : kCapNames) {
      if (token == c.name) {
        mask.disabled |= c.bit;
        found = true;
        break;
      }
    }
    if (!found)
      throw Error(ErrorKind::Config, "rdmalib: unknown capability \"" + token + "\" in \"" + list +
                                         "\"; valid names: " + valid_names());
  }
  return mask;
}

CapabilityMask CapabilityMask::from_environment() {
  const char *env = std::getenv("RDMALIB_DISABLE_CAPS");
  if (!env)
    return {};
  try {
    return parse(env);
  } catch (const Error &e) {
    throw Error(ErrorKind::Config, std::string("RDMALIB_DISABLE_CAPS: ") + e.what());
  }
}

std::string CapabilityMask::to_string() const {
  std::string out;
  for (const auto &c : kCapNames) {
    if (disables(c.bit)) {
      if (!out.empty())
        out += ",";
      out += c.name;
    }
  }
  return out;
}

const char *to_string(Progress p) noexcept {
  switch (p) {
  case Progress::Manual:
    return "manual";
  case Progress::Thread:
    return "thread";
  case Progress::Auto:
    break;
  }
  return "auto";
}

bool parse_progress(std::string_view text, Progress &out) noexcept {
  for (Progress p : {Progress::Auto, Progress::Manual, Progress::Thread}) {
    if (text == to_string(p)) {
      out = p;
      return true;
    }
  }
  return false;
}

const char *to_string(EndpointType e) noexcept {
  return e == EndpointType::Connected ? "connected" : "rdm";
}

bool parse_endpoint_type(std::string_view text, EndpointType &out) noexcept {
  // "msg" is libfabric's name (FI_EP_MSG), the one RFAAS_TEST_PROVIDERS and the
  // benchmarks' --endpoint use; it is read, never written.
  if (text == to_string(EndpointType::Connected) || text == "msg") {
    out = EndpointType::Connected;
    return true;
  }
  if (text == to_string(EndpointType::ReliableDatagram)) {
    out = EndpointType::ReliableDatagram;
    return true;
  }
  return false;
}

std::string Capabilities::describe() const {
  std::string s;
  s += "endpoint=";
  s += to_string(endpoint);
  s += " progress=";
  s += to_string(progress);
  s += " remote_cq_data=";
  s += yes_no(remote_cq_data);
  s += " atomics=";
  s += yes_no(atomics);
  s += " provider_keys=";
  s += yes_no(provider_keys);
  s += " virtual_addressing=";
  s += yes_no(virtual_addressing);
  s += " local_registration=";
  s += yes_no(local_registration);
  s += " endpoint_bound_memory=";
  s += yes_no(endpoint_bound_memory);
  s += " write_consumes_receive=";
  s += yes_no(write_consumes_receive);
  s += " notify_message_size=" + std::to_string(notify_message_size);
  s += " wait_fd=";
  s += yes_no(wait_fd);
  s += " max_inline=" + std::to_string(max_inline);
  s += " max_message=" + std::to_string(max_message);
  s += " mr_key_size=" + std::to_string(mr_key_size);
  s += " max_private_data=" + std::to_string(max_private_data);
  s += " shared_endpoint=";
  s += yes_no(shared_endpoint);
  s += " sockets_after_setup=";
  s += yes_no(sockets_after_setup);
  return s;
}

} // namespace rdmalib
