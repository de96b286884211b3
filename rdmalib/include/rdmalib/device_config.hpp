// One device entry: which NIC / provider a Fabric opens. The one device type
// of rFaaS: rdmalib opens Fabrics from it, the device database (device.hpp)
// reads and writes it, and librfaas hands it to applications as rfaas::device.
//
// Standard C++ only, on purpose: librfaas installs this header with its own,
// so that an application sees the same type without any network-library
// header (the JSON shape and the names of the preferences are in device.hpp).
#pragma once

#include <cstdint>
#include <string>

namespace rdmalib {

/// Endpoint type requested by configuration.
enum class EndpointPreference : uint8_t { Auto, Connected, ReliableDatagram };

/// One device entry. Plain data; copyable.
struct DeviceConfig {
  /// Name users select it by.
  std::string name;
  /// libfabric provider name or alias ("tcp", "sockets", "shm", "tcp;ofi_rxm",
  /// "verbs", "verbs;ofi_rxm", "efa", ...); empty = automatic choice (fastest
  /// available first, sockets last). Ignored by the verbs backend.
  std::string provider;
  /// libfabric domain name, or the verbs device name as ibv_devices prints it
  /// ("mlx5_0", "rxe0"). Empty = any.
  std::string domain;
  /// Network interface name, for documentation and rfaas-info.
  std::string interface;
  /// IP address this node listens on / connects from.
  std::string ip_address;
  /// Default listening port; 0 lets the operating system choose (the chosen
  /// port is reported by Listener::address()).
  uint16_t port = 0;
  /// Inline send limit requested; 0 disables inline sends.
  uint32_t max_inline_data = 0;
  /// Default receive-queue depth.
  uint32_t default_receive_buffer_size = 32;
  /// Connected, reliable-datagram, or whichever the provider prefers ("endpoint" in the
  /// file).
  EndpointPreference endpoint = EndpointPreference::Auto;
};

} // namespace rdmalib
