// Quirks::closed_names_stay_local: shm remembers every endpoint a process
// ever created, by name, with the address where it mapped that endpoint's
// region, and looks a peer's name up there first. A process that closed a
// named endpoint (a listener) and then maps a peer of that name (the same
// listener opened again, here or in another process) would be handed the old,
// unmapped address.
//
// rdmalib keeps that address valid: when a named endpoint closes, the range
// its region occupied is reserved (inaccessible, no memory); before this
// process connects to that name again, the current region of that name is
// mapped into the reserved range, so that the provider's stale pointer reads
// the live region. Only the first endpoint of a name matters: the provider's
// lookup always finds the oldest entry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rdmalib::lf {

/// Where this process maps /dev/shm/`name`, once only the provider maps it:
/// start and length, or {0, 0} when there is not exactly one such mapping.
struct MappedRange {
  uintptr_t start = 0;
  size_t length = 0;
};
MappedRange provider_mapping(const std::string &name);

/// Right after the endpoint named `name` has closed (the provider has
/// unmapped `where`): reserve that range unless the name already has one.
/// When it cannot be reserved (something else took it in between), the name
/// is marked unusable for connections from this process.
void retire_named_region(const std::string &name, const MappedRange &where) noexcept;

/// Before this process maps a peer named `name` (a connect): when the name
/// belonged to an endpoint of this process that has closed, map the region
/// that now carries the name where the provider will look. False, with the
/// reason in `why`, when that cannot be done; true otherwise (also when the
/// name was never this process's, or nothing carries it now).
bool refresh_retired_name(const std::string &name, std::string &why) noexcept;

} // namespace rdmalib::lf
