// The JSON device database, read with the one strict reader (ConfigNode): every
// error is one line naming the file, the JSON path of the key, what was expected
// and the valid keys or values.
#include <rdmalib/config_node.hpp>
#include <rdmalib/device.hpp>
#include <rdmalib/errors.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace rdmalib {

namespace {

// Keeps keys in the documented order when writing.
using ordered_json = nlohmann::ordered_json;

DeviceConfig parse_device(const ConfigNode &d) {
  d.expect_object({"name", "provider", "domain", "interface", "ip_address", "port",
                   "max_inline_data", "default_receive_buffer_size", "endpoint"});
  DeviceConfig c;
  c.name = d.required("name", "a string: the name users select the device by").nonempty_string();
  d.optional("provider", c.provider);
  d.optional("domain", c.domain);
  d.optional("interface", c.interface);
  d.optional("ip_address", c.ip_address);
  d.optional("port", c.port, 0, 65535);
  d.optional("max_inline_data", c.max_inline_data, 0, UINT32_MAX);
  d.optional("default_receive_buffer_size", c.default_receive_buffer_size, 1, UINT32_MAX);
  if (d.has("endpoint"))
    c.endpoint = d["endpoint"].enumeration(parse_endpoint_preference, endpoint_preference_names());
  return c;
}

} // namespace

bool parse_endpoint_preference(std::string_view text, EndpointPreference &out) noexcept {
  if (text == to_string(EndpointPreference::Auto)) {
    out = EndpointPreference::Auto;
    return true;
  }
  EndpointType type;
  if (!parse_endpoint_type(text, type))
    return false;
  out = type == EndpointType::Connected ? EndpointPreference::Connected
                                        : EndpointPreference::ReliableDatagram;
  return true;
}

const char *endpoint_preference_names() noexcept { return "auto, connected (or msg), rdm"; }

const char *to_string(EndpointPreference e) noexcept {
  switch (e) {
  case EndpointPreference::Connected:
    return "connected";
  case EndpointPreference::ReliableDatagram:
    return "rdm";
  case EndpointPreference::Auto:
    break;
  }
  return "auto";
}

DeviceDatabase DeviceDatabase::parse(const std::string &json_text, const std::string &origin) {
  nlohmann::json doc = ConfigNode::parse(json_text, origin);
  ConfigNode root(doc, origin);
  root.expect_object({"devices"});
  ConfigNode devs = root.required("devices", "an array of device entries: {\"devices\": [...]}");
  size_t n = devs.expect_array();
  std::vector<DeviceConfig> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    DeviceConfig c = parse_device(devs[i]);
    for (size_t j = 0; j < out.size(); ++j)
      if (out[j].name == c.name)
        devs[i]["name"].fail("duplicate device name \"" + c.name + "\"; devices[" +
                             std::to_string(j) + "] already has it (names must be unique)");
    out.push_back(std::move(c));
  }
  return DeviceDatabase(std::move(out));
}

DeviceDatabase DeviceDatabase::load(const std::string &path) {
  return parse(ConfigNode::read_file(
                   path, "device database (write one with rfaas-info, or pass the right path)"),
               path);
}

std::string DeviceDatabase::to_json() const {
  ordered_json devs = ordered_json::array();
  for (const auto &c : devices_) {
    ordered_json d;
    d["name"] = c.name;
    d["provider"] = c.provider;
    d["domain"] = c.domain;
    d["interface"] = c.interface;
    d["ip_address"] = c.ip_address;
    d["port"] = c.port;
    d["max_inline_data"] = c.max_inline_data;
    d["default_receive_buffer_size"] = c.default_receive_buffer_size;
    d["endpoint"] = to_string(c.endpoint);
    devs.push_back(std::move(d));
  }
  ordered_json root;
  root["devices"] = std::move(devs);
  return root.dump(2) + "\n";
}

void DeviceDatabase::save(const std::string &path) const {
  std::string text = to_json();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    int err = errno;
    throw Error(ErrorKind::Config, path + ": cannot write device database: " + std::strerror(err));
  }
  out << text;
  out.flush();
  if (!out)
    throw Error(ErrorKind::Config, path + ": cannot write device database (write failed)");
}

const DeviceConfig &DeviceDatabase::find(const std::string &name_or_ip) const {
  for (const auto &c : devices_)
    if (c.name == name_or_ip)
      return c;
  for (const auto &c : devices_)
    if (!c.ip_address.empty() && c.ip_address == name_or_ip)
      return c;
  std::string names;
  for (const auto &c : devices_) {
    if (!names.empty())
      names += ", ";
    names += c.name;
  }
  throw Error(ErrorKind::NotFound, "rdmalib: no device named or with IP address \"" + name_or_ip +
                                       "\" in the device database; known devices: " +
                                       (names.empty() ? std::string("(none)") : names));
}

} // namespace rdmalib
