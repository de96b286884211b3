// Which network device the client uses: an entry of the device database
// (config/devices.json, the same file every rFaaS binary reads; rfaas-info
// --write-devices writes one for this machine).
//
// rfaas::device is a neutral copy of the entry, so applications need no
// network-library header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rfaas {

/// One device entry. Plain data; copyable.
struct device {
  /// What users select it by ("lo-tcp").
  std::string name;
  /// libfabric provider or alias ("tcp", "shm", "tcp;ofi_rxm", ...); "" = automatic.
  std::string provider;
  /// Domain / verbs device name; "" = any.
  std::string domain;
  /// Network interface, informational.
  std::string interface;
  /// The address the client's own listener binds (workers connect to it), and
  /// that it connects from.
  std::string ip_address;
  /// Listening port for the client's listener; 0 = let the OS choose.
  uint16_t port = 0;
  /// Inline send limit requested; 0 disables inline sends.
  uint32_t max_inline_data = 0;
  /// Default receive-queue depth.
  uint32_t default_receive_buffer_size = 32;
  /// "auto", "connected" or "rdm".
  std::string endpoint = "auto";
};

/// The device database. Thread-safety: const calls are safe from any thread.
class device_database {
public:
  /// Load a JSON device database. Throws rfaas::Error(phase::configuration)
  /// naming the file and the offending key.
  static device_database load(const std::string &path);

  const std::vector<device> &devices() const noexcept { return devices_; }

  /// The entry named `name_or_ip`, else the first whose ip_address equals it.
  /// Throws rfaas::Error(phase::configuration) listing the known names.
  const device &find(const std::string &name_or_ip) const;

private:
  std::vector<device> devices_;
  std::string origin_;
};

} // namespace rfaas
