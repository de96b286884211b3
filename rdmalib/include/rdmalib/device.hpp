// Device configuration: which NIC / provider a Fabric opens, and the database
// of such entries that operators keep in JSON (config/devices.json).
//
// JSON shape (every key but "name" is optional):
//   { "devices": [ { "name": "lo-tcp",          // what users select
//                    "provider": "tcp",         // libfabric provider or alias, "" = auto
//                    "domain": "",              // libfabric domain / verbs device name
//                    "interface": "lo",         // network interface, informational
//                    "ip_address": "127.0.0.1",
//                    "port": 0,                 // 0 = let the OS choose
//                    "max_inline_data": 0,
//                    "default_receive_buffer_size": 32,
//                    "endpoint": "auto" } ] }   // "connected" ("msg") | "rdm" | "auto"
// Unknown keys are rejected, so a typo cannot silently fall back to a default.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <rdmalib/capabilities.hpp>
#include <rdmalib/device_config.hpp>

namespace rdmalib {

/// The device database's spelling of a preference: "auto", "connected" or
/// "rdm" (what DeviceDatabase::load accepts and save writes).
const char *to_string(EndpointPreference e) noexcept;

/// The inverse of to_string, and the one place that reads the name: "auto"
/// or any spelling parse_endpoint_type accepts ("connected", its alias "msg",
/// "rdm"). False (and `out` unchanged) for any other spelling, so that every
/// configuration file, command-line option and test parameter accepts the
/// same names.
bool parse_endpoint_preference(std::string_view text, EndpointPreference &out) noexcept;

/// The valid spellings, for error messages: "auto, connected (or msg), rdm".
const char *endpoint_preference_names() noexcept;

/// The device database: a list of DeviceConfig loaded from or written to JSON.
class DeviceDatabase {
public:
  DeviceDatabase() = default;
  /// A database of `devices`, as given (no check, no file).
  explicit DeviceDatabase(std::vector<DeviceConfig> devices) : devices_(std::move(devices)) {}

  /// Load from a file. Throws Error(Config) naming the file and the offending key
  /// (for example `devices.json: devices[1].port: expected an integer 0..65535`).
  static DeviceDatabase load(const std::string &path);
  /// Parse from JSON text; `origin` names the source in error messages.
  static DeviceDatabase parse(const std::string &json_text, const std::string &origin);

  /// Serialise to the JSON shape above (pretty-printed).
  std::string to_json() const;
  /// Write to_json() to a file. Throws Error(Config) if it cannot be written.
  void save(const std::string &path) const;

  /// Every entry, in file order.
  const std::vector<DeviceConfig> &devices() const noexcept { return devices_; }

  /// The entry whose name equals `name_or_ip`, else the first entry whose
  /// ip_address equals it. Throws Error(NotFound) listing the known names.
  const DeviceConfig &find(const std::string &name_or_ip) const;

private:
  std::vector<DeviceConfig> devices_;
};

} // namespace rdmalib
