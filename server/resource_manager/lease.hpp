// A lease: cores and memory on one or more nodes, granted to one client until
// an expiry, and the accounting its nodes report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "resource_manager/lease_token.hpp"
#include "resource_manager/owner.hpp"

namespace rfaas::rm {

/// NodeDown: a node the lease held cores on was marked down, which ends the
/// whole lease (also its parts on other nodes).
enum class LeaseState { Active, Released, Expired, Revoked, NodeDown };
const char *to_string(LeaseState s);
bool parse_lease_state(const std::string &text, LeaseState &out);

/// One node's share of a lease. `cores` are indices 0..node.cores-1 of that
/// node's cores; the executor manager maps them onto its own CPU list.
struct LeasePart {
  std::string node;
  std::vector<uint32_t> cores;
  uint64_t memory_mib = 0;
};

struct Lease {
  uint64_t id = 0;
  std::string client;
  LeaseState state = LeaseState::Active;
  uint64_t granted_ms = 0;
  uint64_t expiry_ms = 0;
  uint64_t ended_ms = 0; ///< 0 while active
  /// The latest expiry any of its tokens carried: a renewal may shorten
  /// expiry_ms, and an earlier token stays valid until its own expiry, so a
  /// node must refuse it as a replay until then. 0: not known (a lease
  /// stored before this was recorded); nodes then keep its end for their
  /// own retention.
  uint64_t tokens_until_ms = 0;
  std::vector<LeasePart> parts;
  /// The uid its client authenticated with (MUNGE); kAnonymousOwner when the
  /// resource manager does not authenticate clients. Its tokens cover it, and
  /// root executor managers run its executors as this uid.
  uint32_t owner_uid = kAnonymousOwner;
  /// The client's SLURM job id (empty outside a job or unauthenticated).
  std::string job_id{};
  /// Hash of the lease's secret (all zero for a lease recorded before lease
  /// secrets: it can be neither renewed nor released, only revoked).
  LeaseSecretHash secret_hash{};

  uint32_t total_cores() const {
    uint32_t n = 0;
    for (const auto &p : parts)
      n += static_cast<uint32_t>(p.cores.size());
    return n;
  }
  uint64_t total_memory_mib() const {
    uint64_t n = 0;
    for (const auto &p : parts)
      n += p.memory_mib;
    return n;
  }
  /// What the token of part `i` covers.
  LeaseClaim claim(size_t i) const {
    return LeaseClaim{id,
                      parts[i].node,
                      static_cast<uint32_t>(parts[i].cores.size()),
                      parts[i].memory_mib,
                      expiry_ms,
                      client,
                      owner_uid};
  }
};

/// What an executor manager reports for its part of a lease: at the lease's
/// end (final) and periodically for long leases. Times in microseconds, the
/// totals so far (a later report of the same lease and node supersedes an
/// earlier one).
struct AccountingRecord {
  uint64_t lease_id = 0;
  std::string node;
  std::string client;
  uint64_t reported_ms = 0;
  uint64_t allocation_us = 0;
  uint64_t hot_polling_us = 0;
  uint64_t execution_us = 0;
  uint64_t memory_mib = 0;
  bool final = false;
  /// The lease's owner_uid and job_id (copied from the lease when recorded).
  uint32_t owner_uid = kAnonymousOwner;
  std::string job_id{};
};

} // namespace rfaas::rm
