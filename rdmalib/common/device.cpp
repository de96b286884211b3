// The JSON device database. Strict on purpose: every error names the file and
// the JSON path of the offending key, unknown keys are rejected (a typo must not
// silently fall back to a default), and numbers are range-checked.
#include <rdmalib/device.hpp>
#include <rdmalib/errors.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace rdmalib {

namespace {

using json = nlohmann::json;
// Keeps keys in the documented order when writing.
using ordered_json = nlohmann::ordered_json;

constexpr const char *kDeviceKeys[] = {
    "name",       "provider", "domain",          "interface",
    "ip_address", "port",     "max_inline_data", "default_receive_buffer_size",
    "endpoint",
};

[[noreturn]] void fail(const std::string &origin, const std::string &path,
                       const std::string &what) {
  throw Error(ErrorKind::Config, origin + ": " + path + ": " + what);
}

// A short rendering of the offending value for the message.
std::string shown(const json &v) {
  std::string s = v.dump();
  if (s.size() > 60)
    s = s.substr(0, 57) + "...";
  return s;
}

const char *type_name(const json &v) {
  return v.type_name(); // "null", "object", "array", "string", "number", "boolean"
}

std::string get_string(const json &v, const std::string &origin, const std::string &path) {
  if (!v.is_string())
    fail(origin, path, std::string("expected a string, got ") + type_name(v) + " " + shown(v));
  return v.get<std::string>();
}

uint64_t get_uint(const json &v, const std::string &origin, const std::string &path, uint64_t max,
                  const char *range) {
  std::string expected = std::string("expected an integer ") + range;
  if (v.is_number_unsigned()) {
    uint64_t value = v.get<uint64_t>();
    if (value > max)
      fail(origin, path, expected + ", got " + shown(v));
    return value;
  }
  if (v.is_number_integer()) // negative
    fail(origin, path, expected + ", got " + shown(v));
  fail(origin, path, expected + ", got " + type_name(v) + " " + shown(v));
}

EndpointPreference get_endpoint(const json &v, const std::string &origin, const std::string &path) {
  std::string s = get_string(v, origin, path);
  EndpointPreference e;
  if (parse_endpoint_preference(s, e))
    return e;
  fail(origin, path, "expected \"auto\", \"connected\" or \"rdm\", got \"" + s + "\"");
}

std::string valid_keys() {
  std::string out;
  for (const char *k : kDeviceKeys) {
    if (!out.empty())
      out += ", ";
    out += k;
  }
  return out;
}

DeviceConfig parse_device(const json &d, const std::string &origin, const std::string &path) {
  if (!d.is_object())
    fail(origin, path, std::string("expected an object, got ") + type_name(d));
  for (auto it = d.begin(); it != d.end(); ++it) {
    bool known = false;
    for (const char *k : kDeviceKeys)
      known = known || it.key() == k;
    if (!known)
      fail(origin, path + "." + it.key(), "unknown key; valid keys: " + valid_keys());
  }
  DeviceConfig c;
  auto name = d.find("name");
  if (name == d.end())
    fail(origin, path + ".name", "missing (every device needs a name)");
  c.name = get_string(*name, origin, path + ".name");
  if (c.name.empty())
    fail(origin, path + ".name", "must not be empty");

  auto str = [&](const char *key, std::string &out) {
    auto it = d.find(key);
    if (it != d.end())
      out = get_string(*it, origin, path + "." + key);
  };
  str("provider", c.provider);
  str("domain", c.domain);
  str("interface", c.interface);
  str("ip_address", c.ip_address);

  if (auto it = d.find("port"); it != d.end())
    c.port = static_cast<uint16_t>(get_uint(*it, origin, path + ".port", 65535, "0..65535"));
  if (auto it = d.find("max_inline_data"); it != d.end())
    c.max_inline_data = static_cast<uint32_t>(
        get_uint(*it, origin, path + ".max_inline_data", UINT32_MAX, "0..4294967295"));
  if (auto it = d.find("default_receive_buffer_size"); it != d.end()) {
    uint64_t v =
        get_uint(*it, origin, path + ".default_receive_buffer_size", UINT32_MAX, "1..4294967295");
    if (v == 0)
      fail(origin, path + ".default_receive_buffer_size",
           "expected an integer 1..4294967295, got 0");
    c.default_receive_buffer_size = static_cast<uint32_t>(v);
  }
  if (auto it = d.find("endpoint"); it != d.end())
    c.endpoint = get_endpoint(*it, origin, path + ".endpoint");
  return c;
}

} // namespace

bool parse_endpoint_preference(std::string_view text, EndpointPreference &out) noexcept {
  for (EndpointPreference e : {EndpointPreference::Auto, EndpointPreference::Connected,
                               EndpointPreference::ReliableDatagram}) {
    if (text == to_string(e)) {
      out = e;
      return true;
    }
  }
  return false;
}

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
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error &e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 3, column 5: ...";
    // the byte offset is what editors jump to.
    throw Error(ErrorKind::Config,
                origin + ": malformed JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const json::exception &e) {
    // Not a syntax error but still the parser's: a number too large for a
    // double (out_of_range.406), for example.
    throw Error(ErrorKind::Config, origin + ": unreadable JSON: " + e.what());
  }
  if (!root.is_object())
    fail(origin, "(top level)",
         std::string("expected an object {\"devices\": [...]}, got ") + type_name(root));
  for (auto it = root.begin(); it != root.end(); ++it)
    if (it.key() != "devices")
      fail(origin, it.key(), "unknown key; the top level holds only \"devices\"");
  auto devs = root.find("devices");
  if (devs == root.end())
    fail(origin, "devices", "missing (expected {\"devices\": [...]})");
  if (!devs->is_array())
    fail(origin, "devices", std::string("expected an array, got ") + type_name(*devs));

  std::vector<DeviceConfig> out;
  out.reserve(devs->size());
  for (size_t i = 0; i < devs->size(); ++i) {
    std::string path = "devices[" + std::to_string(i) + "]";
    DeviceConfig c = parse_device((*devs)[i], origin, path);
    for (size_t j = 0; j < out.size(); ++j)
      if (out[j].name == c.name)
        fail(origin, path + ".name",
             "duplicate device name \"" + c.name + "\" (also devices[" + std::to_string(j) + "])");
    out.push_back(std::move(c));
  }
  return DeviceDatabase(std::move(out));
}

DeviceDatabase DeviceDatabase::load(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    throw Error(ErrorKind::Config, path + ": cannot open device database: " + std::strerror(err) +
                                       " (write one with rfaas-info, or pass the right path)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw Error(ErrorKind::Config, path + ": cannot read device database");
  return parse(text.str(), path);
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
