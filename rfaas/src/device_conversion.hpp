// Internal: rfaas::device (neutral, public) to rdmalib::DeviceConfig.
#pragma once

#include <rdmalib/device.hpp>
#include <rfaas/devices.hpp>

namespace rfaas::detail {

/// Throws rfaas::Error(phase::configuration) for an unknown endpoint name.
rdmalib::DeviceConfig to_rdmalib(const device &d);

} // namespace rfaas::detail
