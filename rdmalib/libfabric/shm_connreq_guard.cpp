// Quirks::connreq_names_vanished_peer, see shm_connreq_guard.hpp and
// provider_table.hpp. The structures below mirror libfabric 1.17's
// include/ofi_shm.h and ofi_rbuf.h (region version 4); the constructor checks
// them against the live region before the guard touches anything.
#include "shm_connreq_guard.hpp"

#include "common/logging.hpp"
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rdma/fabric.h>

namespace rdmalib::lf {

namespace {

constexpr uint8_t kRegionVersion = 4; // SMR_VERSION
constexpr uint32_t kOpConnreq = 256;  // SMR_OP_MAX + ofi_ctrl_connreq
constexpr size_t kCmdSize = 256;      // SMR_CMD_SIZE
constexpr size_t kNameMax = 256;      // SMR_NAME_MAX
constexpr int64_t kMaxPeers = 256;    // SMR_MAX_PEERS
constexpr size_t kInjectSize = 4096;  // SMR_INJECT_SIZE

struct Region { // struct smr_region
  uint8_t version;
  uint8_t resv;
  uint16_t flags;
  int pid;
  uint8_t cma_cap_peer;
  uint8_t cma_cap_self;
  uint32_t max_sar_buf_per_peer;
  void *base_addr;
  pthread_spinlock_t lock;
  int32_t signal;
  void *map;
  size_t total_size;
  size_t cmd_cnt;
  size_t sar_cnt;
  size_t cmd_queue_offset;
  size_t resp_queue_offset;
  size_t inject_pool_offset;
  size_t sar_pool_offset;
  size_t peer_data_offset;
  size_t name_offset;
  size_t sock_name_offset;
};

struct alignas(16) MsgHeader { // struct smr_msg_hdr
  uint64_t msg_id;
  int64_t id;
  uint32_t op;
  uint16_t op_src;
  uint16_t op_flags;
  uint64_t size;
  uint64_t src_data;
  uint64_t data;
  uint64_t tag;
};

struct CmdQueue { // OFI_DECLARE_CIRQUE(struct smr_cmd, smr_cmd_queue)
  size_t size;
  size_t size_mask;
  size_t rcnt;
  size_t wcnt;
};

const char *no_prefix(const char *name) {
  const char *p = std::strstr(name, "://");
  return p ? p + 3 : name;
}

} // namespace

ShmConnreqGuard::ShmConnreqGuard(const std::string &region_name, std::function<std::string()> sink)
    : sink_source_(std::move(sink)) {
  if (fi_version() < FI_VERSION(1, 17) || fi_version() >= FI_VERSION(1, 18)) {
    why_ = "libfabric is not 1.17";
    return;
  }
  int fd = shm_open(region_name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    why_ = "cannot open /dev/shm/" + region_name + ": " + std::strerror(errno);
    return;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(Region)) {
    ::close(fd);
    why_ = "region /dev/shm/" + region_name + " is too small";
    return;
  }
  size_t size = static_cast<size_t>(st.st_size);
  void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    why_ = std::string("cannot map the region: ") + std::strerror(errno);
    return;
  }
  auto *base = static_cast<uint8_t *>(p);
  const auto *r = reinterpret_cast<const Region *>(base);
  const auto *q = reinterpret_cast<const CmdQueue *>(base + r->cmd_queue_offset);
  bool ok = r->version == kRegionVersion && r->pid == getpid() && r->total_size == size &&
            r->name_offset < size && r->name_offset + region_name.size() < size &&
            std::strncmp(reinterpret_cast<const char *>(base + r->name_offset), region_name.c_str(),
                         region_name.size() + 1) == 0 &&
            r->cmd_queue_offset + sizeof(CmdQueue) <= size && q->size != 0 &&
            (q->size & (q->size - 1)) == 0 && q->size_mask == q->size - 1 &&
            r->cmd_queue_offset + sizeof(CmdQueue) + q->size * kCmdSize <= size &&
            sizeof(MsgHeader) == 64;
  if (!ok) {
    munmap(p, size);
    why_ = "the region's layout is not libfabric 1.17's";
    return;
  }
  base_ = base;
  size_ = size;
}

ShmConnreqGuard::~ShmConnreqGuard() {
  if (base_)
    munmap(base_, size_);
}

size_t ShmConnreqGuard::sweep() noexcept {
  if (!base_)
    return 0;
  auto *r = reinterpret_cast<Region *>(base_);
  auto *q = reinterpret_cast<CmdQueue *>(base_ + r->cmd_queue_offset);
  if (__atomic_load_n(&q->wcnt, __ATOMIC_ACQUIRE) == __atomic_load_n(&q->rcnt, __ATOMIC_ACQUIRE))
    return 0;
  size_t redirected = 0;
  // The second pass runs once the sink is open, if the first found a
  // command to redirect before it was.
  for (int pass = 0; pass < 2; ++pass) {
    if (redirect_locked(redirected))
      return redirected;
    if (!sink_source_)
      return redirected;
    std::string s = sink_source_();
    sink_source_ = nullptr;
    while (!s.empty() && s.back() == '\0')
      s.pop_back();
    if (s.empty() || s.size() >= kNameMax)
      return redirected;
    sink_ = std::move(s);
  }
  return redirected;
}

bool ShmConnreqGuard::redirect_locked(size_t &redirected) noexcept {
  auto *r = reinterpret_cast<Region *>(base_);
  auto *q = reinterpret_cast<CmdQueue *>(base_ + r->cmd_queue_offset);
  // Peers append commands under the region's lock; a peer that died holding
  // it already stalls the provider (Quirks::dead_peer_can_hang_progress), so do
  // not wait for it here.
  int tries = 0;
  while (pthread_spin_trylock(&r->lock) != 0) {
    if (++tries > 1000)
      return true;
    sched_yield();
  }
  bool complete = true;
  uint8_t *cmds = base_ + r->cmd_queue_offset + sizeof(CmdQueue);
  for (size_t i = q->rcnt; i != q->wcnt; ++i) {
    auto *h = reinterpret_cast<MsgHeader *>(cmds + (i & q->size_mask) * kCmdSize);
    if (h->op != kOpConnreq || h->src_data + kInjectSize > size_)
      continue;
    char *name = reinterpret_cast<char *>(base_ + h->src_data);
    size_t len = strnlen(name, kNameMax);
    if (len == kNameMax || (len == sink_.size() && std::memcmp(name, sink_.data(), len) == 0))
      continue;
    // The provider maps the sender by this name; a region that is gone (the
    // sender closed its endpoint, exited, or shm's own SIGTERM/SIGINT handler
    // unlinked it) leaves the provider with a null mapping that it reads.
    std::string path = std::string("/dev/shm/") + no_prefix(name);
    if (access(path.c_str(), F_OK) == 0)
      continue;
    if (sink_.empty()) {
      complete = false;
      break;
    }
    // The sink is a live endpoint of this process: the provider finds it
    // without shm_open, its pid matches, and it only records the (unused)
    // link ids in the sink's and our own bookkeeping.
    try {
      rdmalib::logger().info("rdmalib: shm: dropping the connection setup of {}: its "
                             "shared-memory region is gone (the peer closed or exited)",
                             std::string(name, len));
    } catch (...) {
    }
    std::memcpy(name, sink_.c_str(), sink_.size() + 1);
    h->size = sink_.size() + 1;
    h->data = static_cast<uint64_t>(getpid());
    if (h->id < 0 || h->id >= kMaxPeers)
      h->id = 0;
    ++redirected;
  }
  pthread_spin_unlock(&r->lock);
  return complete;
}

} // namespace rdmalib::lf
