// Where the resource manager's executor-manager nodes come from
// (nodes.provider in the configuration). "static": an operator adds them
// through REST, and nothing here runs. "slurm": a SlurmProvider submits
// pilot jobs that start them (slurm_provider.hpp).
//
// A NodeProvider is driven from the loop thread, like the Registry it
// changes: the Loop calls tick() after each Registry::tick(), and the fabric
// side asks it when a lease cannot be placed and when an unknown node
// registers. Every call returns promptly: anything slow (SLURM's commands)
// runs on the provider's own thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "resource_manager/lease_token.hpp"
#include "resource_manager/registry.hpp"

namespace rfaas::rm {

/// The answer to a lease that cannot be placed now but will be once nodes
/// that are starting have registered.
struct Provisioning {
  /// When the client should ask again.
  uint64_t retry_after_ms = 0;
  /// Said to the client ("provisioning: pilot job 12 is starting ...").
  std::string message;
};

class NodeProvider {
public:
  virtual ~NodeProvider() = default;

  /// Periodic, on the loop thread: takes what SLURM answered, adds and
  /// removes nodes, grows to the minimum, cancels idle pilots.
  virtual void tick(Registry &registry) = 0;

  /// `request` could not be placed (Outcome::Unavailable). Returns a
  /// Provisioning answer when nodes are starting (or were just asked for)
  /// that may serve it; nullopt keeps the refusal.
  virtual std::optional<Provisioning> unplaceable(const LeaseRequest &request,
                                                  Registry &registry) = 0;

  /// A node the registry does not know registers with `claim` and `proof`.
  /// The provider may add it (returns true) when the proof verifies under
  /// the secret of one of its pilots and the name is one that pilot may use;
  /// the registration then proceeds as for any known node.
  virtual bool admit(const RegistrationClaim &claim, const LeaseToken &proof,
                     Registry &registry) = 0;

  /// The resource manager stops (the loop has ended, so the caller's thread
  /// owns the registry): cancel every pilot, bounded in time.
  virtual void stop(Registry &registry) = 0;
};

} // namespace rfaas::rm
