// The resource manager's address from the environment (rm_address.hpp).
#include "rm_address.hpp"

#include <cstdlib>

#include <rfaas/errors.hpp>

namespace rfaas {

std::string resolve_resource_manager_address(const std::string &address) {
  if (!address.empty())
    return address;
  const char *value = std::getenv(kResourceManagerVariable);
  if (value != nullptr && *value != '\0')
    return value;
  throw Error(phase::usage, "", status::invalid_argument,
              std::string("no resource manager address: pass its host:port, or set ") +
                  kResourceManagerVariable + " (rfaas-slurm sets it inside a job)");
}

} // namespace rfaas
