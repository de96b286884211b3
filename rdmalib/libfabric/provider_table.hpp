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
  /// Why the provider sits where it does (a note for readers of this table).
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

/// shm (1.17) queues a send to a name that has no shared-memory region and
/// never completes it, so a client on shm facing a server that listens with
/// another provider (tcp, say) waited its whole deadline and then blamed the
/// handshake. Every shm endpoint rdmalib names has its region at
/// /dev/shm/<name>: true when the region of the listener at host:port is
/// absent, i.e. nothing listens there over shm.
bool quirk_shm_listener_absent(const std::string &provider, const std::string &host, unsigned port);

/// sockets (1.17) runs a progress thread per endpoint; a caller that spins on
/// the CQ starves it on small machines (milliseconds per message on 2 cores).
/// Returns true when blocking reads must be preferred over spinning; such
/// providers report Capabilities::progress = Progress::Thread.
bool quirk_prefers_blocking_wait(const std::string &provider);

/// sockets (1.17) progress threads spin for FI_SOCKETS_PE_WAITTIME ms (10 by
/// default) after each piece of work before sleeping: with one thread per
/// endpoint, a client, a worker and their threads on 2 cores took 25 ms per
/// call (10,000 calls in 265 s; 92 s with 0 under the same load). rdmalib
/// sets 0 (unless the user set it) before the provider is loaded. Must run
/// before the first fi_getinfo.
void quirk_sockets_pe_waittime();

/// shm (1.17) accepts a CQ wait object (FI_WAIT_UNSPEC) but fi_cq_sread then
/// never returns when nothing completes: it ignores its timeout (measured: a
/// 50 ms read still blocked after 5 s). Returns true when blocking CQ reads
/// must not be used; Operations::wait then polls with a backoff.
bool quirk_cq_sread_ignores_timeout(const std::string &provider);

/// Bytes of private data a MSG endpoint's connect/accept carries. libfabric's
/// verbs provider (1.17) puts a 1-byte header into rdma_cm's 56 bytes of RC
/// private data (VERBS_CM_DATA_SIZE = 55) and fails fi_connect with EINVAL
/// beyond that; the other MSG providers carry 56.
size_t quirk_msg_private_data_size(const std::string &provider);

/// libfabric's verbs provider (MSG, 1.17) takes the operand of fi_fetch_atomic
/// (FI_SUM) and the operand and compare value of fi_compare_atomic from the
/// buffer POINTERS, not from the memory they point to
/// (`wr.wr.atomic.compare_add = (uintptr_t) buf`): the pointers must carry the
/// values themselves. Returns true for such providers.
bool quirk_atomic_operands_by_value(const std::string &provider);

/// shm (1.17) reaches a peer endpoint of the same process through that
/// endpoint's own memory, so a send to a peer that was already closed in this
/// process crashes inside the provider (SIGSEGV in fi_send), where a peer in
/// another process just gets the message dropped. Returns true when rdmalib
/// must track its in-process endpoints and not send a goodbye to a closed one.
bool quirk_in_process_peer_must_be_alive(const std::string &provider);

/// shm (1.17) guards each endpoint's shared region with a plain spinlock that
/// the peer process takes while it delivers into that region. A peer killed
/// inside that window leaves the lock held, and every later progress call on
/// our endpoint (fi_cq_read) spins forever. The lock cannot be recovered, so
/// rdmalib exchanges process ids in the handshake and, for these providers,
/// Operations::wait checks (at most once per millisecond) that the peer still
/// runs before it calls into the provider; a dead peer makes the link Closed.
bool quirk_dead_peer_can_hang_progress(const std::string &provider);

/// shm (1.17, unchanged upstream in 2.x) copies a message longer than 4 KiB by
/// cross-memory attach (process_vm_readv of the sender) in a loop that ends
/// only when the whole message is copied: once the posted receive is full,
/// process_vm_readv is called with no local space, returns 0, and the loop
/// spins forever inside fi_cq_read while holding the receiver's region lock
/// (the sender then spins on that lock too). A message longer than the
/// receive it matches thus wedges the receiving process for good; nothing
/// above the provider can interrupt it. Returns true for such providers:
/// rdmalib then posts every receive with an overflow area behind it (see
/// RecvOverflow) so that no receive is ever truncated inside the provider.
bool quirk_truncation_hangs_receiver(const std::string &provider);

/// shm (1.17; the code is unchanged through 1.20) sends a "map my region"
/// command (connreq, carrying the sender's region name) into the receiver's
/// region before a sender's first message, and the sender's send stays in
/// EAGAIN until the receiver has processed it. The receiver maps the named
/// region when it next progresses; when that region is gone by then (the
/// sender gave up and closed its endpoint, exited, or was SIGTERMed, which
/// runs shm's own handler that unlinks the process's regions), shm_open fails
/// with ENOENT, which the provider treats as success and then reads the null
/// mapping: SIGSEGV in fi_cq_read (smr_progress_connreq). A listener cannot
/// vet peers it does not know yet, so for these providers rdmalib watches its
/// handshake endpoint's region (and a connecting endpoint's, until the answer
/// arrives: the server's link endpoint announces itself there) and, before
/// each progress call, points such a command at a live endpoint of its own
/// (ShmConnreqGuard).
bool quirk_connreq_names_vanished_peer(const std::string &provider);

/// Whether shm will use cross-memory attach between processes of this user:
/// off when FI_SHM_DISABLE_CMA is set, or when the Yama LSM restricts ptrace
/// (kernel.yama.ptrace_scope >= 1), in which case shm falls back to copying
/// through shared bounce buffers with memcpy.
bool shm_cross_memory_attach_likely();

} // namespace rdmalib::lf
