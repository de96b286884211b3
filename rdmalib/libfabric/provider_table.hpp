// Per-provider policy of the libfabric backend, kept in one table, and every
// provider quirk in one named function.
#pragma once

#include <string>
#include <vector>

#include <rdmalib/capabilities.hpp>

struct fi_info;

namespace rdmalib::lf {

struct ProviderPolicy {
  /// Canonical name as libfabric reports prov_name ("tcp;ofi_rxm").
  const char *name;
  /// Other names users may write in configuration ("rxm", "tcp-rdm").
  std::vector<const char *> aliases;
  /// The endpoint type used when the configuration says "auto".
  EndpointType natural;
  /// Order of the automatic choice: lower is tried first. Node-local
  /// providers (shm) and functional fallbacks (sockets) come last.
  int auto_rank;
  /// True when only processes on one node can talk (shm): never chosen
  /// automatically for an address that is not loopback.
  bool node_local;
  /// Why the provider sits where it does, for rfaas-info.
  const char *note;
};

/// The table, in automatic-choice order.
const std::vector<ProviderPolicy> &provider_table();

/// Resolve a configured name or alias to its policy; nullptr if unknown.
const ProviderPolicy *find_provider(const std::string &name_or_alias);

/// Names and aliases, for error messages.
std::string provider_names();

// ---- quirks: each one names the provider and version it was observed on ----

/// tcp;ofi_rxm (libfabric 1.17) connects lazily and only checks for connection
/// events every FI_OFI_RXM_CM_PROGRESS_INTERVAL µs (10000 by default), so the
/// first message to a new peer waited ~23 ms here. rdmalib connects each
/// connection with a handshake, so it lowers the interval (unless the user set
/// it) before the provider is loaded. Must run before the first fi_getinfo.
void quirk_rxm_cm_progress_interval();

/// shm (1.17) appends ":<uid>:<endpoint index>" to a name given with its
/// "fi_shm://" prefix, so a listener's name would depend on how many endpoints
/// its process opened before. Without the prefix the name is used verbatim;
/// rdmalib therefore names shm endpoints "rdmalib-<host>-<port>" unprefixed. A
/// duplicate name fails with -FI_EBUSY, which is how a port conflict shows.
std::string quirk_shm_endpoint_name(const std::string &host, unsigned port);

/// sockets (1.17) runs a progress thread per endpoint; a caller that spins on
/// the CQ starves it on small machines (milliseconds per message on 2 cores).
/// Returns true when blocking reads must be preferred over spinning.
bool quirk_prefers_blocking_wait(const std::string &provider);

} // namespace rdmalib::lf
