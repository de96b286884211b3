#include <rfaas/devices.hpp>
#include <rfaas/errors.hpp>

#include <rdmalib/device.hpp>
#include <rdmalib/errors.hpp>

#include "device_conversion.hpp"

namespace rfaas {

device_database device_database::load(const std::string &path) {
  device_database db;
  db.origin_ = path;
  try {
    // One parser for the format: rdmalib's, which every rFaaS binary uses.
    rdmalib::DeviceDatabase parsed = rdmalib::DeviceDatabase::load(path);
    for (const rdmalib::DeviceConfig &c : parsed.devices()) {
      device d;
      d.name = c.name;
      d.provider = c.provider;
      d.domain = c.domain;
      d.interface = c.interface;
      d.ip_address = c.ip_address;
      d.port = c.port;
      d.max_inline_data = c.max_inline_data;
      d.default_receive_buffer_size = c.default_receive_buffer_size;
      d.endpoint = rdmalib::to_string(c.endpoint);
      db.devices_.push_back(std::move(d));
    }
  } catch (const rdmalib::Error &e) {
    throw Error(phase::configuration, "", status::invalid_argument, e.what());
  }
  return db;
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

namespace detail {

rdmalib::DeviceConfig to_rdmalib(const device &d) {
  rdmalib::DeviceConfig c;
  c.name = d.name;
  c.provider = d.provider;
  c.domain = d.domain;
  c.interface = d.interface;
  c.ip_address = d.ip_address;
  c.port = d.port;
  c.max_inline_data = d.max_inline_data;
  c.default_receive_buffer_size = d.default_receive_buffer_size;
  c.endpoint = rdmalib::EndpointPreference::Auto;
  if (!d.endpoint.empty() && !rdmalib::parse_endpoint_preference(d.endpoint, c.endpoint))
    throw Error(phase::configuration, "", status::invalid_argument,
                "device \"" + d.name + "\": endpoint must be one of " +
                    rdmalib::endpoint_preference_names() + ", not \"" + d.endpoint + "\"");
  return c;
}

} // namespace detail
} // namespace rfaas
