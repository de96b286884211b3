#include <rfaas/devices.hpp>
#include <rfaas/errors.hpp>

#include <rdmalib/device.hpp>
#include <rdmalib/errors.hpp>

namespace rfaas {

device_database device_database::load(const std::string &path) {
  device_database db;
  db.origin_ = path;
  try {
    // One parser for the format and one type: rdmalib's, which every rFaaS
    // binary uses.
    db.devices_ = rdmalib::DeviceDatabase::load(path).devices();
  } catch (const rdmalib::Error &e) {
    throw Error(phase::configuration, "", status::invalid_argument, e.what());
  }
  return db;
}

const char *to_string(endpoint_preference e) noexcept { return rdmalib::to_string(e); }

std::optional<endpoint_preference> parse_endpoint_preference(std::string_view text) noexcept {
  endpoint_preference e = endpoint_preference::Auto;
  if (!rdmalib::parse_endpoint_preference(text, e))
    return std::nullopt;
  return e;
}

const device &device_database::find(const std::string &name_or_ip) const {
  for (const device &d : devices_)
    if (d.name == name_or_ip)
      return d;
  for (const device &d : devices_)
    if (d.ip_address == name_or_ip)
      return d;
  std::string known;
  for (const device &d : devices_)
    known += (known.empty() ? "" : ", ") + d.name;
  throw Error(phase::configuration, "", status::invalid_argument,
              origin_ + ": no device named \"" + name_or_ip + "\" (known: " + known + ")");
}

} // namespace rfaas
