// Per-provider policy of the libfabric backend, kept in one table: the
// automatic choice, aliases, and every provider quirk as a column with the
// libfabric releases it applies to. docs/rdmalib.md explains how to add a
// provider or a quirk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <rdmalib/capabilities.hpp>

struct fi_info;

namespace rdmalib::lf {

/// libfabric releases a quirk applies to, as FI_VERSION(major, minor) values,
/// both ends included. A quirk that no release is known to fix runs to
/// kOpenEnded; the default (first = 0) applies to none.
struct Versions {
  uint32_t first = 0;
  uint32_t last = 0;
  bool contains(uint32_t version) const noexcept {
    return first != 0 && version >= first && version <= last;
  }
};
constexpr uint32_t kOpenEnded = UINT32_MAX;
/// FI_VERSION without <rdma/fabric.h>.
constexpr uint32_t fi_release(uint32_t major, uint32_t minor) { return (major << 16) | minor; }
/// From `major.minor` on, with no fixed release known.
constexpr Versions since(uint32_t major, uint32_t minor) {
  return Versions{fi_release(major, minor), kOpenEnded};
}
/// From `first` to `last`, both included.
constexpr Versions releases(uint32_t major0, uint32_t minor0, uint32_t major1, uint32_t minor1) {
  return Versions{fi_release(major0, minor0), fi_release(major1, minor1)};
}

/// A provider's quirks, one column each, with the releases they apply to.
/// Each column's comment says what was observed, on which release, and what
/// rdmalib does about it. A Fabric resolves them once when it opens
/// (resolve_quirks) into Quirks; nothing else in rdmalib looks at a
/// provider's name.
struct QuirkColumns {
  /// A progress thread per endpoint that a caller spinning on the CQ starves
  /// on small machines (sockets 1.17: milliseconds per message on 2 cores).
  /// Blocking reads are preferred; Capabilities::progress = Progress::Thread.
  Versions prefers_blocking_wait;
  /// The CQ accepts a wait object (FI_WAIT_UNSPEC) but fi_cq_sread ignores
  /// its timeout when nothing completes (shm 1.17: a 50 ms read still blocked
  /// after 5 s). Blocking CQ reads are not used; Operations::wait polls with
  /// a backoff.
  Versions cq_sread_ignores_timeout;
  /// fi_fetch_atomic (FI_SUM) and fi_compare_atomic take the operand and
  /// compare value from the buffer POINTERS, not from the memory they point
  /// to (verbs MSG 1.17: `wr.wr.atomic.compare_add = (uintptr_t) buf`): the
  /// pointers carry the values themselves.
  Versions atomic_operands_by_value;
  /// A 1-byte header inside rdma_cm's 56 bytes of RC private data
  /// (VERBS_CM_DATA_SIZE = 55; verbs 1.17): fi_connect fails with EINVAL
  /// beyond 55 bytes, so a MSG endpoint's connect/accept carries 55, not 56.
  Versions cm_data_header_byte;
  /// A peer endpoint of the same process is reached through that endpoint's
  /// own memory, so a send to a peer already closed in this process crashes
  /// inside the provider (shm 1.17: SIGSEGV in fi_send). rdmalib tracks its
  /// in-process endpoints and sends no goodbye to a closed one.
  Versions in_process_peer_must_be_alive;
  /// Each endpoint's shared region is guarded by a plain spinlock that the
  /// peer process takes while it delivers; a peer killed inside that window
  /// leaves it held and every later progress call spins for ever (shm 1.17).
  /// rdmalib exchanges process ids in the handshake and checks (at most once
  /// per millisecond) that the peer still runs before calling into the
  /// provider; a dead peer makes the link Closed.
  Versions dead_peer_can_hang_progress;
  /// A message longer than the receive it matches is copied by cross-memory
  /// attach in a loop that never ends once the receive is full (shm 1.17,
  /// unchanged in 2.x): the receiving process is wedged for good. rdmalib
  /// posts every receive with an overflow area behind it (RecvOverflow), so
  /// that no receive is truncated inside the provider.
  Versions truncation_hangs_receiver;
  /// A "map my region" command naming a sender's region that is gone by the
  /// time the receiver progresses makes the receiver read a null mapping
  /// (shm 1.17 through 1.20: SIGSEGV in smr_progress_connreq). rdmalib points
  /// such commands at a live endpoint of its own (ShmConnreqGuard) before
  /// each progress call on a handshake or connecting endpoint. A region
  /// that vanishes between the receiver's check and its progress call still
  /// crashes it (docs/BACKEND-BUGS.md: executors therefore take SIGTERM on a
  /// thread of their own, so shm's handler does not unlink their regions).
  Versions connreq_names_vanished_peer;
  /// The first message from a new sender makes the receiving endpoint map
  /// the sender's region, with no address-vector entry; only fi_av_remove of
  /// that sender or closing the address vector unmaps it (shm 1.17,
  /// unchanged in 2.6: smr_progress_connreq). A listener's endpoint lives as
  /// long as the listener, so every client endpoint that ever said hello
  /// stayed mapped: 16 MiB of address space and ~84 KiB of /dev/shm each,
  /// for the life of the listening process. The listener enters each hello's
  /// sender in its address vector and removes it at once; a client sends the
  /// listener nothing after its hello.
  Versions receiver_keeps_senders_mapped;
  /// Every endpoint leaves its name, with the address its region was mapped
  /// at, on a process-wide list that is searched first when a peer's region is
  /// mapped (shm 1.17, unchanged in 2.6: ep_name_list, never pruned). A
  /// process that closed a named endpoint (a listener) and then connects to
  /// that name again, opened anew here or elsewhere, gets the closed region's
  /// address: its send spun for ever or faulted. rdmalib reserves the range of
  /// a closed listener's region and maps the live region of that name there
  /// before connecting to it (shm_stale_names.hpp).
  Versions closed_names_stay_local;
  /// An address-vector insert of a name whose region cannot be mapped (the
  /// file is gone, or not yet initialised) succeeds with an entry that has no
  /// region (shm 1.17, util_shm.c smr_map_add: `return ret == -ENOENT ? 0 :
  /// ret`, region NULL, peer.id -1; unchanged through 1.22). fi_av_remove
  /// leaves that name in the map (smr_map_del returns at peer.id < 0), and a
  /// send to the entry, where its slot held a peer before, takes the slot's
  /// leftover state for a live peer (smr_unmap_from_endpoint never resets the
  /// slot's addr.id; smr_ep.c smr_verify_peer returns the slot) and locks the
  /// missing region (smr_msg.c:308 pthread_spin_lock(&peer_smr->lock)):
  /// SIGSEGV. A listener met it whenever a client was gone, shm's SIGTERM
  /// handler having removed its region, by the time its request was rejected:
  /// the listener's handshake endpoint had mapped the client at its hello and
  /// let it go (receiver_keeps_senders_mapped), so the rejection's insert
  /// took that very slot. rdmalib enters a hello's sender in the handshake
  /// endpoint's address vector only while its region can be mapped
  /// (shm_region_usable), checks again after the insert, and sends nothing to
  /// a client whose region is gone: nobody would read the answer.
  Versions absent_region_enters_av;
  /// A send to a name without a listener is queued and never completes
  /// (shm 1.17). Every endpoint rdmalib names has its region at
  /// /dev/shm/<name>: connect() answers Refused at once when the listener's
  /// region is absent, instead of waiting out its deadline.
  Versions send_to_absent_name_never_completes;
  /// The provider opens devices through librdmacm, which keeps the contexts
  /// for the life of the process: a child forked after loading it fails like
  /// the verbs backend's (verbs, verbs;ofi_rxm 1.17). Fabric::preload does
  /// not load such providers.
  Versions contexts_survive_fork;
  /// Not a fault but a verified property: established reliable-datagram
  /// links can share one endpoint, address vector and pair of completion
  /// queues per fabric (tagged messages carry the link id; remote CQ data
  /// carries it in its upper 32 bits). Measured on tcp;ofi_rxm 1.17 (each
  /// endpoint preposted ~34 MiB and took ~66 ms). Left off where one dead
  /// peer could wedge the shared endpoint for every link
  /// (dead_peer_can_hang_progress: shm) and where it was not run.
  Versions links_share_endpoint;
  /// Every completion and event queue gets its own wait object, whatever
  /// wait_obj asks for (tcp 1.17: FI_WAIT_NONE and FI_WAIT_UNSPEC become
  /// FI_WAIT_POLLFD, two socket pairs each; an EQ on FI_WAIT_UNSPEC an epoll
  /// fd and a socket pair): 11 descriptors per connection beyond its TCP
  /// socket, on both sides. rdmalib opens one FI_WAIT_POLLFD wait set per
  /// connected link for both its queues and its event queue (4 descriptors),
  /// reads that event queue with fi_eq_read and fi_wait (fi_eq_sread and
  /// fi_cq_sread refuse queues on an application's wait set), and before it
  /// sleeps on one queue moves what the other queue holds to its stash (the
  /// wait set wakes at once while any of its queues holds an entry).
  Versions link_queues_share_wait_set;
  /// A measured cost: opening an endpoint creates a shared-memory region and
  /// writes zeros over half of it (shm 1.17: 16 MiB, ~2,000 pages faulted in
  /// fi_enable, see region_padding_zero_filled; ~4 ms on an idle core and
  /// 25-45 ms on a loaded 2-core host), twice per link, which made a link
  /// cost 25-35 ms against tcp's 0.5 ms. Fabric::prepare keeps connection
  /// endpoints opened ahead of need on a background thread.
  Versions endpoint_open_is_slow;
  /// The region behind an endpoint is its used size rounded up to a power of
  /// two, and the endpoint's name, which ends the used part, is copied with
  /// strncpy bounded by the rest of the region: strncpy pads with zeros, so
  /// everything past the name is faulted in and stays resident (shm 1.12 to
  /// 2.4; 1.17: ~8 MiB of a 16 MiB region, the whole of an idle link's
  /// memory; 2.5 no longer rounds up). rdmalib punches that tail out of the
  /// region's file after fi_enable (release_region_padding): the pages read
  /// as zeros again if anything ever touches them.
  Versions region_padding_zero_filled;
  /// Every completion of a shared receive queue is reported as a receive
  /// (verbs 1.17 to 2.6 and later: vrb_poll_cq sets IBV_WC_RECV over
  /// IBV_WC_RECV_RDMA_WITH_IMM for VRB_OP_SRQ), so a write-with-immediate
  /// that consumed one reaches RxM as a message and the application as an
  /// empty receive. Where RxM receives on a shared context
  /// (rxm_shared_receive_context(): rdmalib sets FI_OFI_RXM_USE_SRX for
  /// verbs;ofi_rxm), remote CQ data is not used and write_imm is emulated.
  Versions srq_write_imm_reported_as_recv;
  /// New TCP connections are made after the links are up: RxM over tcp
  /// connects to a peer lazily, at its first message, and again after a
  /// loss (tcp;ofi_rxm 1.17); sockets' RDM endpoints do the same.
  /// Capabilities::sockets_after_setup tells a process that forbids new
  /// sockets once its links are up (the executor's seccomp filter) to keep
  /// TCP sockets allowed.
  Versions opens_sockets_after_setup;
  /// One-sided operations bypass memory keys and access flags: with cross-
  /// memory attach (CMA, process_vm_readv/writev) the initiator copies
  /// straight into the target's address space, so no key is checked (shm
  /// 1.17: a write with a wrong key and a read of a write-only region were
  /// accepted). Without CMA shm carries every RMA through its shared region
  /// and the target checks key, bounds and access (ofi_mr_map_verify in
  /// smr_progress_cmd_rma). Fabric::isolate_tenants() turns CMA off (each
  /// side's region says whether it takes CMA, and a peer adopts the first
  /// answer it finds: a region of an isolated process answers no).
  Versions rma_bypasses_keys;
  /// Shared-memory regions are created mode 0600 (shm 1.17: shm_open with
  /// S_IRUSR | S_IWUSR), so only processes of one uid (or with
  /// CAP_DAC_OVERRIDE) can be peers. Fabric::confinement_needs() says so,
  /// and a sandboxed executor keeps the manager's uid on such a provider.
  Versions regions_owner_only;
  /// Endpoints are named after the process id ("<pid>:<uid>:<index>", shm
  /// 1.17) and peers are watched by the pid their region records, so two
  /// processes that are both PID 1 of their own namespaces collide, and a
  /// peer in another PID namespace is watched under the wrong pid.
  /// Fabric::confinement_needs() asks for the host's PID namespace.
  Versions names_peers_by_pid;
};

/// A provider variable rdmalib sets (unless the operator did) before any
/// provider is loaded, for the releases on which its default was measured to
/// hurt.
struct EnvDefault {
  const char *name;
  const char *value;
  Versions versions;
  /// What was measured.
  const char *why;
};

/// The quirks of one provider on the libfabric release this process runs,
/// resolved once when a Fabric opens.
struct Quirks {
  bool prefers_blocking_wait = false;
  bool cq_sread_ignores_timeout = false;
  bool atomic_operands_by_value = false;
  bool cm_data_header_byte = false;
  bool in_process_peer_must_be_alive = false;
  bool dead_peer_can_hang_progress = false;
  bool truncation_hangs_receiver = false;
  bool connreq_names_vanished_peer = false;
  bool receiver_keeps_senders_mapped = false;
  bool closed_names_stay_local = false;
  bool absent_region_enters_av = false;
  bool send_to_absent_name_never_completes = false;
  bool contexts_survive_fork = false;
  bool links_share_endpoint = false;
  bool link_queues_share_wait_set = false;
  bool endpoint_open_is_slow = false;
  bool region_padding_zero_filled = false;
  bool srq_write_imm_reported_as_recv = false;
  bool opens_sockets_after_setup = false;
  bool rma_bypasses_keys = false;
  bool regions_owner_only = false;
  bool names_peers_by_pid = false;
};

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
  /// The provider's quirks.
  QuirkColumns quirks;
  /// Provider variables set before loading (see EnvDefault).
  std::vector<EnvDefault> env;
  /// Paths of the host the provider opens in a process confined to a
  /// minimal file system (Fabric::host_paths): device files, shared memory.
  std::vector<const char *> host_paths = {};
  /// Provider variables Fabric::isolate_tenants() sets (over any value), in
  /// processes that serve peers they must not trust.
  std::vector<EnvDefault> tenant_env = {};
};

/// The table, in automatic-choice order.
const std::vector<ProviderPolicy> &provider_table();

/// Resolve a configured name or alias to its policy; nullptr if unknown.
const ProviderPolicy *find_provider(const std::string &name_or_alias);

/// Names and aliases, for error messages.
std::string provider_names();

/// The quirks of `policy` that apply to libfabric release `version`
/// (FI_VERSION(major, minor); the running library's is fi_version()).
Quirks resolve_quirks(const ProviderPolicy &policy, uint32_t version) noexcept;

/// Set every provider variable of the table (EnvDefault) that applies to the
/// running release, unless already set. Must run before the first
/// fi_getinfo: providers read them when they load.
void apply_env_defaults();

/// Set every tenant_env variable of the table that applies to the running
/// release, overriding the environment. Before the first fi_getinfo.
void apply_tenant_env();

/// True when RxM receives on a shared receive context: FI_OFI_RXM_USE_SRX
/// holds a true value (apply_env_defaults sets it for verbs;ofi_rxm).
/// Quirks::srq_write_imm_reported_as_recv applies only then.
bool rxm_shared_receive_context();

/// The name rdmalib gives an endpoint on providers that address endpoints by
/// name (FI_ADDR_STR, shm): "rdmalib-<host>-<port>". shm 1.17 appends
/// ":<uid>:<endpoint index>" to a name given with its "fi_shm://" prefix, so
/// the name is given without it; a duplicate name fails with -FI_EBUSY, which
/// is how a port conflict shows.
std::string named_endpoint(const std::string &host, unsigned port);

/// The name of the file in /dev/shm behind an endpoint whose raw name (what
/// fi_getname reports, or a peer's address) is `len` bytes at `raw`: the text
/// up to its first zero byte, without a "fi_shm://"-style scheme.
std::string shm_region_name(const void *raw, size_t len);

/// Quirks::send_to_absent_name_never_completes: true when the region of the
/// endpoint named `name` (named_endpoint()'s, or an opaque FI_ADDR_STR
/// address's text) is absent: nothing listens there over shm.
bool named_endpoint_absent(const std::string &name);

/// Quirks::absent_region_enters_av: true when shm can map the region of the
/// endpoint whose raw name (a hello's address) is `len` bytes at `raw`: its
/// file in /dev/shm opens for reading and writing, holds at least a page, and
/// its header names a process (pid != 0, set last by the provider when it
/// creates a region). False for anything else, a name that is not a plain
/// file name included. Never throws.
bool shm_region_usable(const void *raw, size_t len) noexcept;

/// Fabric::names_own_endpoint on shm: true when the region of the endpoint
/// whose raw name is `len` bytes at `raw` was created by this process: its
/// header's pid is this process's and this process maps that very file (the
/// pid alone could be another PID namespace's process). Never throws.
bool shm_region_of_this_process(const void *raw, size_t len) noexcept;

/// Quirks::region_padding_zero_filled: give back the zero-filled pages past
/// the name of the region behind the endpoint named `endpoint_name` (what
/// fi_getname reports, with or without its "fi_shm://" prefix), right after
/// fi_enable, before any peer has mapped it. Does nothing when the region's
/// file is absent, its size is not a power of two or the name is not found
/// in its upper half. Never throws.
void release_region_padding(const std::string &endpoint_name) noexcept;

/// Whether shm will use cross-memory attach between processes of this user:
/// off when FI_SHM_DISABLE_CMA is set, or when the Yama LSM restricts ptrace
/// (kernel.yama.ptrace_scope >= 1), in which case shm falls back to copying
/// through shared bounce buffers with memcpy.
bool shm_cross_memory_attach_likely();

} // namespace rdmalib::lf
