// Where a client finds its resource manager when the application names none.
#pragma once

#include <string>

namespace rfaas {

/// The environment variable a deployment sets to the resource manager's
/// fabric address ("host:port"); rfaas-slurm exports it to the application.
inline constexpr const char *kResourceManagerVariable = "RFAAS_RESOURCE_MANAGER";

/// `address` when it is not empty, else the value of RFAAS_RESOURCE_MANAGER.
/// Throws Error(phase::usage, invalid_argument) when both are empty, naming
/// the variable, so that a client outside a deployment learns what to set.
std::string resolve_resource_manager_address(const std::string &address);

} // namespace rfaas
