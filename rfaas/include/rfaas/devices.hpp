// Which network device the client uses: an entry of the device database
// (config/devices.json, the same file every rFaaS binary reads; rfaas-info
// --write-devices writes one for this machine).
//
// rfaas::device IS rdmalib::DeviceConfig, the one device type of rFaaS, from a
// header that holds nothing but standard C++ (installed with librfaas), so
// applications need no network-library header and nothing is converted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <rdmalib/device_config.hpp>

namespace rfaas {

/// One device entry (name, provider, domain, interface, ip_address, port,
/// max_inline_data, default_receive_buffer_size, endpoint). Plain data.
using device = rdmalib::DeviceConfig;
/// Which endpoint type a device entry asks for: Auto, Connected or
/// ReliableDatagram.
using endpoint_preference = rdmalib::EndpointPreference;

/// The one spelling of a preference, as device databases write it: "auto",
/// "connected" or "rdm".
const char *to_string(endpoint_preference e) noexcept;
/// The preference named `text` ("auto", "connected" or its libfabric alias
/// "msg", "rdm"); nothing for any other text.
std::optional<endpoint_preference> parse_endpoint_preference(std::string_view text) noexcept;

/// The device database. Thread-safety: const calls are safe from any thread.
class device_database {
public:
  /// Load a JSON device database. Throws rfaas::Error(phase::configuration)
  /// naming the file and the offending key.
  static device_database load(const std::string &path);

  /// Every entry, in file order.
  const std::vector<device> &devices() const noexcept { return devices_; }

  /// The entry named `name_or_ip`, else the first whose ip_address equals it.
  /// Throws rfaas::Error(phase::configuration) listing the known names.
  const device &find(const std::string &name_or_ip) const;

private:
  std::vector<device> devices_;
  std::string origin_;
};

} // namespace rfaas
