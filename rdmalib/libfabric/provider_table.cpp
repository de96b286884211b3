#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "provider_table.hpp"
#include <cerrno>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <rdma/fabric.h>
#include <string>
#include <vector>

namespace rdmalib::lf {

static_assert(fi_release(1, 17) == FI_VERSION(1, 17), "fi_release is FI_VERSION");

namespace {

// The oldest release rdmalib accepts (kApiVersion). Quirks were observed on
// 1.17; where no release is known to have fixed one, its workaround applies
// from here on: each is harmless on a provider that does not need it.
constexpr Versions kFromOldest = since(1, 9);
// Provider variables whose defaults were measured on 1.17 to 1.20; newer
// releases may change the default.
constexpr Versions kMeasuredEnv = releases(1, 9, 1, 20);

const EnvDefault kRxmCmProgress{
    "FI_OFI_RXM_CM_PROGRESS_INTERVAL", "100", kMeasuredEnv,
    "RxM connects lazily and looks for connection events every 10000 us by default: the first "
    "message to a new peer waited ~23 ms (tcp;ofi_rxm 1.17)"};

// RxM preposts this many receive buffers of FI_OFI_RXM_BUFFER_SIZE (16 KiB)
// on each endpoint's shared receive context (RXM_MSG_SRX_SIZE, 4096 in 1.17):
// 64 MiB per endpoint, touched and, on verbs, registered. rdmalib's endpoints
// carry a few control messages at a time, so 128 is plenty.
const EnvDefault kRxmMsgRxSize{
    "FI_OFI_RXM_MSG_RX_SIZE", "128", kMeasuredEnv,
    "RxM preposts 4096 receives of 16 KiB per endpoint: ~84 MiB of RSS and ~0.55 s per link on "
    "tcp;ofi_rxm 1.17; with 128, ~34 MiB and ~66 ms (benchmarks/run-links.sh)"};

// Every message RxM reads takes a receive buffer of FI_OFI_RXM_BUFFER_SIZE
// (16 KiB by default) from its endpoint's pool, and one that arrives before a
// receive matches it (unexpected) keeps it until one does. The pool grows
// 1024 buffers at a time and never shrinks; each growth zero-fills the new
// chunk (ofi_bufpool_grow), 17 MiB at 16 KiB, inside the fi_cq_read that
// needed it. A resource manager of 10,000 nodes over tcp;ofi_rxm that fell
// behind its heartbeats was found in that memset, and grew by 1.6 GiB of
// such buffers. rdmalib's messages through a shared endpoint are at most
// kPoolMessage (4 KiB), so 4 KiB buffers hold every one of them unexpected,
// at a quarter of the memory and of the zero-filling.
const EnvDefault kRxmBufferSize{
    "FI_OFI_RXM_BUFFER_SIZE", "4096", kMeasuredEnv,
    "RxM's 16 KiB receive buffers: a resource manager of 10,000 nodes over tcp;ofi_rxm 1.17 "
    "zero-filled 17 MiB per growth of its pool and held 1.6 GiB of them (benchmarks/README.md)"};

// FI_OFI_RXM_BUFFER_SIZE is also RxM's eager limit unless FI_OFI_RXM_EAGER_LIMIT
// says otherwise; over tcp (direct send and dynamic receive buffers) a larger
// eager message goes straight from and into the application's buffers, so
// keeping the old 16 KiB keeps the wire protocol of 4-16 KiB messages as it
// was (rendezvous only above it). RxM reads this variable only over tcp;
// verbs;ofi_rxm's eager limit follows FI_OFI_RXM_BUFFER_SIZE.
const EnvDefault kRxmEagerLimit{
    "FI_OFI_RXM_EAGER_LIMIT", "16384", kMeasuredEnv,
    "keeps tcp;ofi_rxm's eager limit at its 16 KiB default under FI_OFI_RXM_BUFFER_SIZE=4096"};

// RxM's connection close (rxm_close_conn) frees the connection's verbs
// endpoint and only then reads the completion queue the endpoint used: a
// message from the peer still queued there is handed a fresh receive buffer
// posted on the freed endpoint. rxe, unlike hardware providers, keeps a
// destroyed queue pair's completions, so the peer's last messages (a
// goodbye racing the close) are there. With a shared receive context RxM
// posts its buffers on it, and it outlives the connections. Every release
// up to 2.6 closes in that order (upstream 697688386 flushes first, after
// 2.6); tcp;ofi_rxm uses the shared context already.
const EnvDefault kRxmUseSrx{
    "FI_OFI_RXM_USE_SRX", "1", releases(1, 9, 2, 6),
    "verbs;ofi_rxm 1.17 on rxe: SIGSEGV in rxm_post_recv under fi_close of an endpoint whose "
    "peer's messages were unread (rdmalib/libfabric/repro/rxm_close_repro.c crashes in its "
    "first round; with 1, none in 10)"};

/// What libibverbs and rdma_cm open: the device files, and sysfs (the
/// class entries of /sys/class/infiniband* are links into /sys/devices).
const std::vector<const char *> kVerbsHostPaths = {"/dev/infiniband", "/sys"};

QuirkColumns verbs_quirks() {
  QuirkColumns q;
  q.atomic_operands_by_value = kFromOldest;
  q.cm_data_header_byte = kFromOldest;
  q.contexts_survive_fork = kFromOldest;
  return q;
}

QuirkColumns verbs_rxm_quirks() {
  QuirkColumns q;
  q.contexts_survive_fork = kFromOldest;
  q.srq_write_imm_reported_as_recv = kFromOldest;
  return q;
}

QuirkColumns tcp_rxm_quirks() {
  QuirkColumns q;
  q.links_share_endpoint = releases(1, 17, 1, 17);
  q.opens_sockets_after_setup = kFromOldest;
  return q;
}

QuirkColumns tcp_quirks() {
  QuirkColumns q;
  q.link_queues_share_wait_set = releases(1, 17, 1, 17);
  return q;
}

QuirkColumns shm_quirks() {
  QuirkColumns q;
  q.cq_sread_ignores_timeout = kFromOldest;
  q.in_process_peer_must_be_alive = kFromOldest;
  q.dead_peer_can_hang_progress = kFromOldest;
  q.truncation_hangs_receiver = kFromOldest;
  q.connreq_names_vanished_peer = kFromOldest;
  q.receiver_keeps_senders_mapped = kFromOldest;
  q.closed_names_stay_local = kFromOldest;
  q.absent_region_enters_av = kFromOldest;
  q.send_to_absent_name_never_completes = kFromOldest;
  q.endpoint_open_is_slow = kFromOldest;
  q.region_padding_zero_filled = releases(1, 12, 2, 4);
  q.rma_bypasses_keys = kFromOldest;
  q.regions_owner_only = kFromOldest;
  q.names_peers_by_pid = kFromOldest;
  return q;
}

QuirkColumns sockets_quirks() {
  QuirkColumns q;
  q.prefers_blocking_wait = kFromOldest;
  q.opens_sockets_after_setup = kFromOldest;
  return q;
}

} // namespace

const std::vector<ProviderPolicy> &provider_table() {
  static const std::vector<ProviderPolicy> table = {
      {"verbs",
       {"ibverbs", "verbs-msg"},
       EndpointType::Connected,
       0,
       false,
       "InfiniBand / RoCE through libfabric; connected endpoints",
       verbs_quirks(),
       {},
       kVerbsHostPaths},
      {"efa",
       {"aws-efa"},
       EndpointType::ReliableDatagram,
       1,
       false,
       "AWS Elastic Fabric Adapter; reliable datagrams only",
       {},
       {},
       kVerbsHostPaths},
      {"cxi", {}, EndpointType::ReliableDatagram, 2, false, "HPE Slingshot", {}, {}},
      {"verbs;ofi_rxm",
       {"verbs-rdm", "verbs-rxm"},
       EndpointType::ReliableDatagram,
       3,
       false,
       "verbs under the RxM utility layer",
       verbs_rxm_quirks(),
       {kRxmCmProgress, kRxmMsgRxSize, kRxmUseSrx},
       kVerbsHostPaths},
      {"tcp",
       {"tcp-msg"},
       EndpointType::Connected,
       10,
       false,
       "kernel TCP; manual progress; no atomics",
       tcp_quirks(),
       {}},
      {"tcp;ofi_rxm",
       {"rxm", "tcp-rdm", "tcp-rxm"},
       EndpointType::ReliableDatagram,
       11,
       false,
       "tcp under RxM; connects lazily; atomics emulated by RxM",
       tcp_rxm_quirks(),
       {kRxmCmProgress, kRxmMsgRxSize, kRxmBufferSize, kRxmEagerLimit}},
      {"shm",
       {"shared-memory"},
       EndpointType::ReliableDatagram,
       20,
       true,
       "processes on one node only; virtual addressing; atomics",
       shm_quirks(),
       {},
       {"/dev/shm"},
       {{"FI_SHM_DISABLE_CMA", "1", kFromOldest,
         "Quirks::rma_bypasses_keys: without CMA the target checks every RMA's key and access"}}},
      {"sockets",
       {},
       EndpointType::Connected,
       30,
       false,
       "functional fallback with a progress thread per endpoint; wait, do not spin",
       sockets_quirks(),
       {{"FI_SOCKETS_PE_WAITTIME", "0", kMeasuredEnv,
         "progress threads spin 10 ms after each piece of work: a client, a worker and their "
         "threads on 2 cores took 25 ms per call (10,000 calls in 265 s; 92 s with 0)"}}},
  };
  return table;
}

const ProviderPolicy *find_provider(const std::string &name) {
  for (const auto &p : provider_table()) {
    if (name == p.name)
      return &p;
    for (const char *a : p.aliases)
      if (name == a)
        return &p;
  }
  return nullptr;
}

std::string provider_names() {
  std::string out;
  for (const auto &p : provider_table()) {
    if (!out.empty())
      out += ", ";
    out += p.name;
    if (!p.aliases.empty()) {
      out += " (alias";
      for (const char *a : p.aliases) {
        out += " ";
        out += a;
      }
      out += ")";
    }
  }
  return out;
}

Quirks resolve_quirks(const ProviderPolicy &policy, uint32_t version) noexcept {
  const QuirkColumns &c = policy.quirks;
  Quirks q;
  q.prefers_blocking_wait = c.prefers_blocking_wait.contains(version);
  q.cq_sread_ignores_timeout = c.cq_sread_ignores_timeout.contains(version);
  q.atomic_operands_by_value = c.atomic_operands_by_value.contains(version);
  q.cm_data_header_byte = c.cm_data_header_byte.contains(version);
  q.in_process_peer_must_be_alive = c.in_process_peer_must_be_alive.contains(version);
  q.dead_peer_can_hang_progress = c.dead_peer_can_hang_progress.contains(version);
  q.truncation_hangs_receiver = c.truncation_hangs_receiver.contains(version);
  q.connreq_names_vanished_peer = c.connreq_names_vanished_peer.contains(version);
  q.receiver_keeps_senders_mapped = c.receiver_keeps_senders_mapped.contains(version);
  q.closed_names_stay_local = c.closed_names_stay_local.contains(version);
  q.absent_region_enters_av = c.absent_region_enters_av.contains(version);
  q.send_to_absent_name_never_completes = c.send_to_absent_name_never_completes.contains(version);
  q.contexts_survive_fork = c.contexts_survive_fork.contains(version);
  q.links_share_endpoint = c.links_share_endpoint.contains(version);
  q.link_queues_share_wait_set = c.link_queues_share_wait_set.contains(version);
  q.endpoint_open_is_slow = c.endpoint_open_is_slow.contains(version);
  q.region_padding_zero_filled = c.region_padding_zero_filled.contains(version);
  q.srq_write_imm_reported_as_recv = c.srq_write_imm_reported_as_recv.contains(version);
  q.opens_sockets_after_setup = c.opens_sockets_after_setup.contains(version);
  q.rma_bypasses_keys = c.rma_bypasses_keys.contains(version);
  q.regions_owner_only = c.regions_owner_only.contains(version);
  q.names_peers_by_pid = c.names_peers_by_pid.contains(version);
  return q;
}

void apply_tenant_env() {
  const uint32_t version = fi_version();
  for (const auto &p : provider_table())
    for (const EnvDefault &e : p.tenant_env)
      if (e.versions.contains(version))
        setenv(e.name, e.value, /*overwrite=*/1);
}

void apply_env_defaults() {
  const uint32_t version = fi_version();
  for (const auto &p : provider_table())
    for (const EnvDefault &e : p.env)
      if (e.versions.contains(version))
        setenv(e.name, e.value, /*overwrite=*/0);
}

bool rxm_shared_receive_context() {
  // libfabric's boolean parameters: 1/0, yes/no, true/false, on/off.
  const char *v = std::getenv("FI_OFI_RXM_USE_SRX");
  if (!v)
    return false;
  std::string s(v);
  for (char &ch : s)
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s == "1" || s == "yes" || s == "true" || s == "on";
}

std::string named_endpoint(const std::string &host, unsigned port) {
  return "rdmalib-" + host + "-" + std::to_string(port);
}

std::string shm_region_name(const void *raw, size_t len) {
  const char *text = static_cast<const char *>(raw);
  std::string name(text, strnlen(text, len));
  if (size_t scheme = name.find("://"); scheme != std::string::npos)
    name.erase(0, scheme + 3);
  return name;
}

namespace {

/// Where shm keeps the region of the endpoint named `name`, or "" when `name`
/// is not a plain file name (which shm could not have created either).
std::string shm_region_path(const std::string &name) {
  if (name.empty() || name.size() > 255 || name.find('/') != std::string::npos || name == "." ||
      name == "..")
    return {};
  return "/dev/shm/" + name;
}

} // namespace

bool named_endpoint_absent(const std::string &name) {
  // Anything that cannot be looked up is left to the connection's deadline.
  const std::string path = shm_region_path(name);
  return !path.empty() && ::access(path.c_str(), F_OK) != 0 && errno == ENOENT;
}

bool shm_region_usable(const void *raw, size_t len) noexcept {
  try {
    const std::string path = shm_region_path(shm_region_name(raw, len));
    if (path.empty())
      return false;
    // What smr_map_to_region needs before it maps a peer: the file opens
    // read-write, is larger than the region's header, and the header's pid
    // (struct smr_region: uint8 version, uint8 resv, uint16 flags, int pid)
    // is set.
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
      return false;
    struct stat st;
    int pid = 0;
    const bool usable =
        ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= ::sysconf(_SC_PAGESIZE) &&
        ::pread(fd, &pid, sizeof pid, 4) == static_cast<ssize_t>(sizeof pid) && pid != 0;
    ::close(fd);
    return usable;
  } catch (...) {
    return false;
  }
}

bool shm_region_of_this_process(const void *raw, size_t len) noexcept {
  try {
    const std::string path = shm_region_path(shm_region_name(raw, len));
    if (path.empty())
      return false;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
      return false;
    struct stat st;
    int pid = 0;
    const bool header = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                        ::pread(fd, &pid, sizeof pid, 4) == static_cast<ssize_t>(sizeof pid);
    ::close(fd);
    if (!header || pid != ::getpid())
      return false;
    // The provider maps every region it creates for as long as the endpoint
    // is open; a peer's region mapped here carries the peer's pid.
    FILE *maps = std::fopen("/proc/self/maps", "re");
    if (!maps)
      return false;
    bool mapped = false;
    char line[4096];
    while (!mapped && std::fgets(line, sizeof line, maps)) {
      unsigned long long inode = 0;
      char file[4096] = {};
      if (std::sscanf(line, "%*s %*s %*s %*s %llu %4095s", &inode, file) == 2)
        mapped = inode == static_cast<unsigned long long>(st.st_ino) &&
                 std::strncmp(file, "/dev/shm/", 9) == 0;
    }
    std::fclose(maps);
    return mapped;
  } catch (...) {
    return false;
  }
}

void release_region_padding(const std::string &endpoint_name) noexcept {
  try {
    const std::string name = shm_region_name(endpoint_name.data(), endpoint_name.size());
    const std::string path = shm_region_path(name);
    if (path.empty())
      return;
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
      return;
    struct stat st;
    const off_t page = static_cast<off_t>(::sysconf(_SC_PAGESIZE));
    if (::fstat(fd, &st) != 0 || st.st_size < 2 * page || (st.st_size & (st.st_size - 1)) != 0) {
      ::close(fd);
      return;
    }
    const off_t size = st.st_size;
    // The used part is more than half the region, and the name ends it but
    // for the socket name (108 bytes) behind its 256 bytes: the name starts
    // in the upper half, less a page. Holes (the untouched message pools)
    // are skipped; the name is the first occurrence because no peer, whose
    // entries would hold names, has mapped the region yet.
    off_t at = ::lseek(fd, (size / 2 - page) & ~(page - 1), SEEK_DATA);
    const std::string needle = name + '\0';
    // On the stack: this runs on every shm endpoint open. 256 bytes carry a
    // name (at most 255 + its NUL) across two reads.
    std::array<char, 16 * 1024 + 256> buf;
    off_t found = -1;
    size_t carry = 0;
    while (at >= 0 && at < size && found < 0) {
      ssize_t n = ::pread(fd, buf.data() + carry, buf.size() - carry, at);
      if (n <= 0)
        break;
      const size_t have = carry + static_cast<size_t>(n);
      auto hit = std::search(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(have),
                             needle.begin(), needle.end());
      if (hit != buf.begin() + static_cast<std::ptrdiff_t>(have)) {
        found = at - static_cast<off_t>(carry) + (hit - buf.begin());
        break;
      }
      at += n;
      carry = std::min(have, needle.size() - 1);
      std::memmove(buf.data(), buf.data() + have - carry, carry);
    }
    if (found >= 0) {
      // 512 bytes cover the name (256) and the socket name (108).
      const off_t from = (found + 512 + page - 1) & ~(page - 1);
      if (from < size)
        (void)::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, from, size - from);
    }
    ::close(fd);
  } catch (...) {
  }
}

bool shm_cross_memory_attach_likely() {
  const char *off = std::getenv("FI_SHM_DISABLE_CMA");
  if (off && *off && std::strchr("1yYtT", *off))
    return false;
  std::FILE *f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (!f)
    return true; // no Yama: same-user processes may read each other
  int scope = 0;
  if (std::fscanf(f, "%d", &scope) != 1)
    scope = 1;
  std::fclose(f);
  return scope == 0;
}

} // namespace rdmalib::lf
