// rfaas::resource_manager: lease cores from an rFaaS resource manager, then
// allocate executors on the nodes it names.
//
//   rfaas::resource_manager rm(device, "10.0.0.5:10100");  // throws rfaas::Error
//   rfaas::lease l = rm.lease(4, 1024, std::chrono::minutes(10));
//   rfaas::executor ex(device);
//   rfaas::allocation_options opts = l.options(0);         // lease id + token of part 0
//   opts.library = "libfunctions.so";
//   ex.allocate(l.server(0), opts);                        // the node verifies the lease
//   ...
//   ex.deallocate();
//   rm.release(l);                                         // also done when the lease expires
//
// A lease is cores and memory on one or more nodes (parts) until an expiry;
// each part carries a token that only that node can verify, so allocating
// from a lease costs nothing at the resource manager. An executor manager
// that works with a resource manager refuses a client without a valid lease
// (status lease_invalid: forged, expired, foreign or ended). Executors of a
// lease that ends (released, expired, revoked by an operator, or because one
// of its nodes went down) are ended by their nodes.
//
// Thread-safety: one thread at a time per resource_manager object.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rfaas/devices.hpp>
#include <rfaas/errors.hpp>
#include <rfaas/executor.hpp>
#include <rfaas/servers.hpp>

namespace rfaas {

/// One node's share of a lease.
struct lease_part {
  /// The node's name at the resource manager.
  std::string node;
  /// Where its executor manager listens.
  rfaas::server server;
  /// Cores granted on that node.
  uint32_t cores = 0;
  /// Memory granted on that node, MiB.
  uint64_t memory_mib = 0;
  /// What the node verifies (with lease id, expiry, cores, memory, client).
  std::array<uint8_t, 16> token{};
};

/// A granted lease. Plain data; copyable.
struct lease {
  /// The resource manager's id of the lease: renew() and release() name it.
  uint64_t id = 0;
  /// Milliseconds since the Unix epoch (wall clock).
  uint64_t expiry_ms = 0;
  /// The client name it was granted to.
  std::string client;
  /// The lease's secret: renew() and release() present it, and without it
  /// nobody can (the id and the client name are not secret). Keep it as
  /// private as the lease itself.
  std::array<uint8_t, 16> secret{};
  /// One part per node the cores were spread over.
  std::vector<lease_part> parts;
  /// The uid the resource manager authenticated this client as, from the
  /// MUNGE credential the lease request carried; anonymous_uid when it does
  /// not authenticate clients (its auth "none"). Nodes whose executor
  /// manager runs as root run the lease's executors as this uid.
  uint32_t owner_uid = anonymous_uid;
  /// owner_uid of a lease granted to an unauthenticated client.
  static constexpr uint32_t anonymous_uid = 0xffffffffu;

  /// The executor manager of part `part`, for executor::allocate().
  /// Throws Error(phase::usage) for a part that does not exist.
  const rfaas::server &server(size_t part) const;
  /// Allocation options that present part `part` of this lease: `base` with
  /// its lease fields set and, when base.cores is 0, all the part's cores.
  /// Throws Error(phase::usage) for a part that does not exist.
  allocation_options options(size_t part, allocation_options base = {}) const;
  /// Cores over every part.
  uint32_t cores() const noexcept;
};

/// A client's link to an rFaaS resource manager, over the fabric: lease, renew, release
/// (the file's opening comment has an example). Move-only.
class resource_manager {
public:
  /// Connect over `dev` to the resource manager at `address` ("host:port" of
  /// its fabric listener). `client` names this client in its accounting
  /// (empty: "user@host"). An empty `address` means the value of the
  /// environment variable RFAAS_RESOURCE_MANAGER, which a deployment such as
  /// rfaas-slurm exports to the application (docs/slurm.md); with neither,
  /// throws Error(phase::usage) naming the variable. Throws
  /// Error(phase::connect) when it cannot be reached within deadlines.connect.
  resource_manager(const device &dev, const std::string &address, std::string client = "",
                   const timeouts &deadlines = {});
  ~resource_manager();
  /// Takes over the link; the source is left closed.
  resource_manager(resource_manager &&) noexcept;
  /// Ends the current link as the destructor does, then takes over the source's.
  resource_manager &operator=(resource_manager &&) noexcept;
  resource_manager(const resource_manager &) = delete;
  resource_manager &operator=(const resource_manager &) = delete;

  /// Lease `cores` cores and `memory_mib` MiB in total for `duration` (0:
  /// the resource manager's default), on at most `max_nodes` nodes (1..16).
  /// The request carries a MUNGE credential when munged answers on this host
  /// (its socket: RFAAS_MUNGE_SOCKET, else libmunge's default), with the
  /// SLURM job id (SLURM_JOB_ID) inside; without munged it carries none and
  /// the resource manager decides (a munged found unreachable is asked
  /// again at most once a second). Throws Error(phase::lease) with
  /// resources_unavailable when not enough is free, lease_invalid when the
  /// resource manager refused the credential (the message says why:
  /// missing, expired, replayed, another realm), bad_request for an
  /// unusable request, timeout, network_error. A resource manager that
  /// starts nodes for the request (SLURM pilot jobs, docs/slurm.md) answers
  /// "provisioning" with a time to wait: this call waits and asks again, for
  /// at most deadlines.provisioning, then throws with status provisioning.
  rfaas::lease lease(uint32_t cores, uint64_t memory_mib, std::chrono::milliseconds duration,
                     uint32_t max_nodes = 1);
  /// Extend `l` to now + `duration` (0: the default); its tokens change, so
  /// allocate with options() of the renewed lease. Throws Error(phase::lease)
  /// with lease_invalid when it ended or is not ours; the message says how it
  /// ended, e.g. that a node it held cores on went down (which ends the whole
  /// lease: ask for a new one).
  void renew(rfaas::lease &l, std::chrono::milliseconds duration);
  /// End `l` now: its cores are free at once and its nodes end its
  /// executors. Throws Error(phase::lease) with lease_invalid when it had
  /// ended already.
  void release(const rfaas::lease &l);

  /// "host:port" of the resource manager.
  const std::string &address() const noexcept;
  /// The client name this link leases under.
  const std::string &client() const noexcept;
  /// Empty when the last lease() attached a MUNGE credential; otherwise why
  /// it did not (munged's error, or "no lease requested yet"), for a program
  /// that reports how it authenticated.
  const std::string &credential_problem() const noexcept;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace rfaas
