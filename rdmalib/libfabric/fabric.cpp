// Fabric for the libfabric backend: provider resolution, capability
// negotiation, and the helpers endpoints need (addresses, keys).
#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <random>
#include <set>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/logging.hpp"
#include <rdma/fi_atomic.h>
#include <spdlog/spdlog.h>

#include <rdmalib/fabric.hpp>

#include "backend.hpp"

namespace rdmalib {

namespace lf {

void self_process(uint32_t &pid, uint64_t &pid_namespace) {
  pid = static_cast<uint32_t>(getpid());
  struct stat st {};
  pid_namespace = stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

bool process_gone(uint32_t pid) {
  if (kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH)
    return true;
  // A killed child stays a zombie until its parent reaps it.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%u/stat", pid);
  FILE *f = std::fopen(path, "r");
  if (!f)
    return false;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char *close_paren = std::strrchr(buf, ')');
  return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

namespace {

int open_pidfd(uint32_t pid) noexcept {
#ifdef SYS_pidfd_open
  // Close-on-exec by definition.
  long fd = syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  return fd >= 0 ? static_cast<int>(fd) : -1;
#else
  (void)pid;
  return -1;
#endif
}

/// The shared pidfds: by descriptor (its process and holders), and the one
/// handed out for each pid. A pid whose process ended gets a fresh pidfd
/// when a new process has its number: the old one stays with its holders.
struct PidfdTable {
  std::mutex m;
  std::unordered_map<int, std::pair<uint32_t, int>> by_fd; // fd -> (pid, refs)
  std::unordered_map<uint32_t, int> current;               // pid -> fd
};

PidfdTable &pidfds() {
  static PidfdTable *t = new PidfdTable; // never destroyed: links may outlive statics
  return *t;
}

} // namespace

int acquire_pidfd(uint32_t pid) noexcept {
  PidfdTable &t = pidfds();
  std::lock_guard<std::mutex> g(t.m);
  auto it = t.current.find(pid);
  if (it != t.current.end() && !pidfd_exited(it->second)) {
    ++t.by_fd[it->second].second;
    return it->second;
  }
  const int fd = open_pidfd(pid);
  if (fd < 0)
    return -1;
  try {
    t.by_fd[fd] = {pid, 1};
    t.current[pid] = fd;
  } catch (...) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void release_pidfd(int pidfd) noexcept {
  PidfdTable &t = pidfds();
  std::lock_guard<std::mutex> g(t.m);
  auto it = t.by_fd.find(pidfd);
  if (it == t.by_fd.end() || --it->second.second > 0)
    return;
  auto cur = t.current.find(it->second.first);
  if (cur != t.current.end() && cur->second == pidfd)
    t.current.erase(cur);
  t.by_fd.erase(it);
  ::close(pidfd);
}

bool pidfd_exited(int pidfd) noexcept {
  pollfd p{pidfd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

std::string fi_error_text(int ret) {
  int code = ret < 0 ? -ret : ret;
  return std::string(fi_strerror(code)) + " (" + std::to_string(code) + ")";
}

void throw_fi(const std::string &what, int ret) {
  int code = ret < 0 ? -ret : ret;
  ErrorKind kind = ErrorKind::Backend;
  if (code == FI_ECONNREFUSED)
    kind = ErrorKind::Refused;
  else if (code == FI_ETIMEDOUT)
    kind = ErrorKind::Timeout;
  else if (code == FI_ENODATA || code == FI_ENOENT)
    kind = ErrorKind::NotFound;
  throw Error(kind, "rdmalib: " + what + ": " + fi_error_text(ret), code);
}

void close_fid(fid *f) noexcept {
  int ret = fi_close(f);
  if (ret)
    rdmalib::logger().warn("rdmalib: fi_close of a libfabric object (class {}) failed: {}",
                           f->fclass, fi_error_text(ret));
}

namespace {

std::string join(const std::vector<std::string> &v) {
  std::string out;
  for (const auto &s : v) {
    if (!out.empty())
      out += ", ";
    out += s;
  }
  return out;
}

bool is_loopback(const std::string &ip) {
  return ip.empty() || ip.rfind("127.", 0) == 0 || ip == "::1" || ip == "localhost";
}

/// Hints offering the most any provider could need, so fi_getinfo only drops
/// what cannot work. The provider clears the mr_mode / mode bits it does not
/// require; what it keeps is honoured by FabricImpl.
InfoPtr make_hints(const ProviderPolicy &p, EndpointType ep, bool atomics, bool offer_virt_addr,
                   bool send_after_write, const std::string &domain) {
  InfoPtr h(fi_allocinfo());
  if (!h.p)
    throw Error(ErrorKind::Backend, "rdmalib: fi_allocinfo failed (out of memory)");
  h->fabric_attr->prov_name = strdup(p.name);
  h->ep_attr->type = ep == EndpointType::Connected ? FI_EP_MSG : FI_EP_RDM;
  h->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND |
            FI_RECV | (atomics ? FI_ATOMIC : 0);
  // Links over one shared endpoint tell each other apart by tag, which the
  // sender chooses: each message's source (FI_SOURCE) must match its link's
  // peer, and a receive aimed at one peer matches only that peer's messages
  // (FI_DIRECTED_RECV), or any process that reaches the endpoint could
  // write into another link.
  if (ep == EndpointType::ReliableDatagram && resolve_quirks(p, fi_version()).links_share_endpoint)
    h->caps |= FI_TAGGED | FI_SOURCE | FI_DIRECTED_RECV;
  h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT |
                            (offer_virt_addr ? FI_MR_VIRT_ADDR : 0);
  // Asked for explicitly by the probe of open(): providers report only the
  // ordering the hints ask for (shm and tcp;ofi_rxm 1.17 report none
  // otherwise).
  if (send_after_write)
    h->tx_attr->msg_order = FI_ORDER_SAW;
  h->domain_attr->threading = FI_THREAD_SAFE;
  h->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
  h->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
  if (!domain.empty())
    h->domain_attr->name = strdup(domain.c_str());
  return h;
}

/// fi_getinfo for one provider/endpoint type; returns null (and the error)
/// when the provider cannot serve it.
InfoPtr try_getinfo(const ProviderPolicy &p, EndpointType ep, const DeviceConfig &cfg, bool atomics,
                    bool offer_virt_addr, bool send_after_write, int *err,
                    std::string *why = nullptr) {
  InfoPtr hints = make_hints(p, ep, atomics, offer_virt_addr, send_after_write, cfg.domain);
  fi_info *out = nullptr;
  const char *node = nullptr;
  if (!p.node_local && !cfg.ip_address.empty())
    node = cfg.ip_address.c_str();
  int ret = fi_getinfo(kApiVersion, node, nullptr, node ? FI_SOURCE : 0, hints.get(), &out);
  if (ret) {
    *err = ret;
    return InfoPtr();
  }
  // Utility providers can stack several ways ("tcp;ofi_rxm" also matches
  // "verbs;ofi_rxm" on some machines): keep the first exact match. Some
  // providers (tcp) ignore the domain hint, so the domain is checked here.
  InfoPtr all(out);
  std::set<std::string> domains;
  for (fi_info *i = out; i; i = i->next) {
    if (std::strcmp(i->fabric_attr->prov_name, p.name) != 0)
      continue;
    const char *dom = i->domain_attr->name ? i->domain_attr->name : "";
    if (!cfg.domain.empty() && cfg.domain != dom) {
      domains.insert(dom);
      continue;
    }
    return InfoPtr(fi_dupinfo(i));
  }
  *err = -FI_ENODATA;
  if (why && !domains.empty()) {
    *why = "no domain '" + cfg.domain + "' (domains here:";
    for (const auto &d : domains)
      *why += " " + d;
    *why += ")";
  }
  return InfoPtr();
}

uint64_t mix64(uint64_t z) {
  // splitmix64's finaliser: a bijection on 64-bit values.
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint32_t mix32(uint32_t z) {
  // A bijection on 32-bit values (each step is invertible).
  z = (z ^ (z >> 16)) * 0x7feb352dU;
  z = (z ^ (z >> 15)) * 0x846ca68bU;
  return z ^ (z >> 16);
}

/// What the provider offers, before any mask (the front end applies it,
/// then FabricImpl::finish derives the backend's flags from the result).
void fill_capabilities(detail::FabricImpl &f) {
  fi_info *i = f.info.get();
  Capabilities &c = f.caps;
  const CapabilityMask &m = f.mask;
  c.endpoint = f.rdm ? EndpointType::ReliableDatagram : EndpointType::Connected;
  c.progress = i->domain_attr->data_progress == FI_PROGRESS_MANUAL ? Progress::Manual
               : f.quirks.prefers_blocking_wait                    ? Progress::Thread
                                                                   : Progress::Auto;
  uint64_t mr = static_cast<uint64_t>(i->domain_attr->mr_mode);
  f.app_keys = !(mr & FI_MR_PROV_KEY);
  f.virt_addr = mr & FI_MR_VIRT_ADDR;
  f.mr_endpoint = mr & FI_MR_ENDPOINT;
  f.mr_local = mr & FI_MR_LOCAL;
  f.need_context = i->mode & (FI_CONTEXT | FI_CONTEXT2);
  f.rx_cq_data = i->mode & FI_RX_CQ_DATA;
  f.ordered_saw = i->tx_attr->msg_order & FI_ORDER_SAW;
  f.inject_size = i->tx_attr->inject_size;
  f.addr_format = i->addr_format;
  f.opaque_names = f.config.ip_address.empty();

  // Quirks::srq_write_imm_reported_as_recv: a write-with-immediate that
  // lands on RxM's shared receive context is reported as a message.
  c.remote_cq_data = i->domain_attr->cq_data_size >= 4 &&
                     !(f.quirks.srq_write_imm_reported_as_recv && rxm_shared_receive_context());
  c.provider_keys = !f.app_keys;
  c.virtual_addressing = f.virt_addr;
  c.local_registration = f.mr_local;
  c.endpoint_bound_memory = f.mr_endpoint;
  c.write_consumes_receive = f.rx_cq_data;
  c.max_message = i->ep_attr->max_msg_size;
  c.mr_key_size = i->domain_attr->mr_key_size;
  c.max_inline = std::min<size_t>(f.config.max_inline_data, f.inject_size);
  // Quirks::cm_data_header_byte: the provider keeps one of rdma_cm's 56 bytes.
  c.max_private_data = f.rdm ? kMaxPrivateData : f.quirks.cm_data_header_byte ? 55 : 56;
  // One endpoint for every link: the link id travels as the tag of each
  // message and in the upper half of the remote CQ data (which must then hold
  // 64 bits). Not where a write consumes a posted (untagged) receive, where
  // memory binds to one endpoint, or where one dead peer can wedge progress
  // on the endpoint for every link.
  c.sockets_after_setup = f.quirks.opens_sockets_after_setup;
  c.shared_endpoint = f.rdm && f.quirks.links_share_endpoint && (i->caps & FI_TAGGED) &&
                      (i->caps & FI_SOURCE) && (i->caps & FI_DIRECTED_RECV) && !f.rx_cq_data &&
                      !f.mr_endpoint && !f.quirks.dead_peer_can_hang_progress &&
                      (i->domain_attr->cq_data_size >= 8 || !c.remote_cq_data);

  // Atomics: the provider must advertise FI_ATOMIC and really support the two
  // 64-bit operations rdmalib offers (not asked when masked off anyway).
  bool atomics = (i->caps & FI_ATOMIC) && !m.disables(CapAtomics);
  if (atomics) {
    fi_atomic_attr attr{};
    atomics = fi_query_atomic(f.domain.get(), FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC) == 0 &&
              fi_query_atomic(f.domain.get(), FI_UINT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC) == 0;
  }
  c.atomics = atomics;

  // Wait objects: probe once which kind of blocking CQ read the provider
  // supports. FI_WAIT_UNSPEC first: on tcp an fd wait object makes every
  // completion write a signal byte and every progress pass epoll and drain it
  // (~3 us per round trip measured here), and rdmalib only needs fi_cq_sread.
  // shm 1.17 refuses FI_WAIT_FD but supports the unspecified kind.
  for (auto wait : {FI_WAIT_UNSPEC, FI_WAIT_FD}) {
    fi_cq_attr attr{};
    attr.format = FI_CQ_FORMAT_DATA;
    attr.size = 1;
    attr.wait_obj = wait;
    Fid<fid_cq> probe;
    if (fi_cq_open(f.domain.get(), &attr, probe.out(), nullptr) == 0) {
      f.wait_cq = true;
      f.wait_fd_cq = wait == FI_WAIT_FD;
      break;
    }
  }
  if (f.quirks.cq_sread_ignores_timeout) {
    f.wait_cq = false;
    f.wait_fd_cq = false;
  }
  c.wait_fd = f.wait_cq;
}

} // namespace

void RecvOverflow::open(size_t scratch_bytes, bool guard_page) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t guard_bytes = guard_page ? page : 0;
  // Reserved, not committed: pages of the scratch area are only backed once
  // an oversized message is written there.
  void *p = mmap(nullptr, scratch_bytes + guard_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw Error(ErrorKind::Backend,
                std::string("rdmalib: mmap of the receive overflow area: ") + std::strerror(errno));
  base = static_cast<uint8_t *>(p);
  scratch = scratch_bytes;
  guard = guard_bytes;
  if (guard && mprotect(base + scratch, guard, PROT_NONE) != 0)
    guard = 0;
  iovs = guard ? 3 : 2;
}

RecvOverflow::~RecvOverflow() {
  if (base)
    munmap(base, scratch + guard);
}

} // namespace lf

namespace detail {

lf::InfoPtr FabricImpl::endpoint_info(const Address *src) const {
  lf::InfoPtr i(fi_dupinfo(info.get()));
  if (!i.p)
    throw Error(ErrorKind::Backend, "rdmalib: fi_dupinfo failed (out of memory)");
  free(i->dest_addr);
  i->dest_addr = nullptr;
  i->dest_addrlen = 0;
  if (!src)
    return i;
  std::vector<uint8_t> raw = raw_address(*src);
  free(i->src_addr);
  i->src_addr = malloc(raw.size());
  std::memcpy(i->src_addr, raw.data(), raw.size());
  i->src_addrlen = raw.size();
  return i;
}

std::string FabricImpl::format_token() const {
  switch (addr_format) {
  case FI_SOCKADDR_IN:
    return "in";
  case FI_SOCKADDR_IN6:
    return "in6";
  case FI_ADDR_STR:
    return "str";
  case FI_ADDR_EFA:
    return "efa";
  case FI_ADDR_PSMX2:
    return "psmx2";
  case FI_ADDR_IB_UD:
    return "ib_ud";
  case FI_SOCKADDR_IB:
    return "ib";
  default:
    return "fmt" + std::to_string(addr_format);
  }
}

bool FabricImpl::names_own_endpoint(const Address &a) const noexcept {
  // Only endpoints named by strings are node-local objects whose creator can
  // be read from the name (shm's regions in /dev/shm).
  if (addr_format != FI_ADDR_STR)
    return false;
  try {
    const std::vector<uint8_t> raw = raw_address(a);
    return lf::shm_region_of_this_process(raw.data(), raw.size());
  } catch (...) {
    return false;
  }
}

std::vector<uint8_t> FabricImpl::raw_address(const Address &a) const {
  if (a.opaque()) {
    if (a.format != format_token())
      throw Error(ErrorKind::Config, "rdmalib: address " + a.to_string() +
                                         " is a name in format '" + a.format + "', but " +
                                         provider + " names endpoints in format '" +
                                         format_token() + "' (an address of another network?)");
    if (a.name.size() > lf::kMaxRawAddress)
      throw Error(ErrorKind::Config, "rdmalib: address " + a.to_string() + " is longer than " +
                                         std::to_string(lf::kMaxRawAddress) + " bytes");
    return a.name;
  }
  if (a.host.empty())
    throw Error(ErrorKind::Config,
                "rdmalib: an address needs a host (or an opaque ofi: name), got ':" +
                    std::to_string(a.port) + "'");
  if (addr_format == FI_ADDR_STR) {
    std::string name = lf::named_endpoint(a.host, a.port);
    return std::vector<uint8_t>(name.c_str(), name.c_str() + name.size() + 1);
  }
  // IP providers: resolve the host; keep the family the provider asked for.
  addrinfo hints{};
  hints.ai_family = addr_format == FI_SOCKADDR_IN6  ? AF_INET6
                    : addr_format == FI_SOCKADDR_IN ? AF_INET
                                                    : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *res = nullptr;
  std::string port = std::to_string(a.port);
  int rc = getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res)
    throw Error(ErrorKind::NotFound,
                "rdmalib: cannot resolve address '" + a.to_string() + "': " + gai_strerror(rc));
  std::vector<uint8_t> out(reinterpret_cast<uint8_t *>(res->ai_addr),
                           reinterpret_cast<uint8_t *>(res->ai_addr) + res->ai_addrlen);
  freeaddrinfo(res);
  return out;
}

Address FabricImpl::decode_address(const void *raw, size_t len) const {
  Address a;
  if (!raw || len == 0 || len > lf::kMaxRawAddress)
    return a;
  if (opaque_names || (addr_format != FI_ADDR_STR && addr_format != FI_SOCKADDR_IN &&
                       addr_format != FI_SOCKADDR_IN6)) {
    // A string name is stored up to its terminator: padding after it would
    // make two names of one endpoint differ.
    if (addr_format == FI_ADDR_STR) {
      size_t n = strnlen(static_cast<const char *>(raw), len);
      if (n < len)
        len = n + 1;
    }
    a.name.assign(static_cast<const uint8_t *>(raw), static_cast<const uint8_t *>(raw) + len);
    a.format = format_token();
    return a;
  }
  if (addr_format == FI_ADDR_STR) {
    std::string name(static_cast<const char *>(raw), strnlen(static_cast<const char *>(raw), len));
    // "rdmalib-<host>-<port>" when rdmalib named it; otherwise the raw name.
    auto dash = name.rfind('-');
    if (name.rfind("rdmalib-", 0) == 0 && dash != std::string::npos && dash > 8) {
      a.host = name.substr(8, dash - 8);
      a.port = static_cast<uint16_t>(std::strtoul(name.c_str() + dash + 1, nullptr, 10));
    } else {
      a.host = name;
    }
    return a;
  }
  char buf[INET6_ADDRSTRLEN] = {0};
  auto *sa = static_cast<const sockaddr *>(raw);
  if (len >= sizeof(sockaddr_in) && sa->sa_family == AF_INET) {
    auto *in = static_cast<const sockaddr_in *>(raw);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    a.port = ntohs(in->sin_port);
  } else if (len >= sizeof(sockaddr_in6) && sa->sa_family == AF_INET6) {
    auto *in6 = static_cast<const sockaddr_in6 *>(raw);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    a.port = ntohs(in6->sin6_port);
  }
  a.host = buf;
  return a;
}

uint64_t FabricImpl::next_key() {
  uint64_t n = key_counter.fetch_add(1, std::memory_order_relaxed);
  if (caps.mr_key_size >= 8)
    return lf::mix64(key_secret + n);
  if (caps.mr_key_size >= 4)
    return lf::mix32(static_cast<uint32_t>(key_secret) + static_cast<uint32_t>(n));
  // Keys narrower than 32 bits cannot be both unique and unpredictable for
  // long; fall back to unique ones.
  return n & ((1ULL << (8 * caps.mr_key_size)) - 1);
}

} // namespace detail

namespace {

/// The addresses of this node's interfaces (in this network namespace).
std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  ifaddrs *ifa = nullptr;
  if (getifaddrs(&ifa) != 0)
    return out;
  for (ifaddrs *i = ifa; i; i = i->ifa_next) {
    if (!i->ifa_addr)
      continue;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (i->ifa_addr->sa_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in *>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    else if (i->ifa_addr->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6 *>(i->ifa_addr)->sin6_addr, buf,
                sizeof buf);
    else
      continue;
    out.push_back(buf);
  }
  freeifaddrs(ifa);
  return out;
}

/// A device's IP address must be one of this node's: a provider would
/// otherwise open some other interface, or fail much later with a vague error.
void check_local_address(const DeviceConfig &config) {
  const std::string &ip = config.ip_address;
  if (ip.empty() || lf::is_loopback(ip) || ip == "0.0.0.0" || ip == "::")
    return;
  in6_addr probe6;
  in_addr probe4;
  if (inet_pton(AF_INET, ip.c_str(), &probe4) != 1 && inet_pton(AF_INET6, ip.c_str(), &probe6) != 1)
    return; // a host name: resolved by the provider, which reports its own errors
  std::vector<std::string> here = local_addresses();
  if (here.empty() || std::find(here.begin(), here.end(), ip) != here.end())
    return;
  throw Error(ErrorKind::NotFound,
              "rdmalib: device '" + config.name + "' has IP address " + ip +
                  ", which is not an address of this node; addresses here: " + lf::join(here));
}

} // namespace

namespace detail {

void FabricImpl::open() {
  using namespace lf;
  apply_env_defaults();
  FabricImpl &f = *this;
  const DeviceConfig &config = f.config;
  const CapabilityMask mask = f.mask;
  check_local_address(config);

  std::vector<const ProviderPolicy *> candidates;
  if (config.provider.empty()) {
    for (const auto &p : provider_table())
      if (!p.node_local || is_loopback(config.ip_address))
        candidates.push_back(&p);
  } else {
    const ProviderPolicy *p = find_provider(config.provider);
    if (!p) {
      std::vector<std::string> here;
      try {
        for (const auto &d : discover())
          if (std::find(here.begin(), here.end(), d.provider) == here.end())
            here.push_back(d.provider);
      } catch (const Error &) {
      }
      throw Error(ErrorKind::NotFound,
                  "rdmalib: unknown provider '" + config.provider + "' in device '" + config.name +
                      "'; available here: " + join(here) + "; known names: " + provider_names() +
                      " (run rfaas-info to list devices)");
    }
    candidates.push_back(p);
  }

  std::string attempts;
  bool offer_va = !mask.disables(CapVirtualAddressing);
  for (const ProviderPolicy *p : candidates) {
    EndpointType ep = p->natural;
    if (config.endpoint == EndpointPreference::Connected)
      ep = EndpointType::Connected;
    else if (config.endpoint == EndpointPreference::ReliableDatagram)
      ep = EndpointType::ReliableDatagram;
    int err = 0;
    std::string why;
    // Ask for atomics first; a provider without them is still usable.
    InfoPtr info =
        try_getinfo(*p, ep, config, !mask.disables(CapAtomics), offer_va, false, &err, &why);
    if (!info.p)
      info = try_getinfo(*p, ep, config, false, offer_va, false, &err, &why);
    if (!info.p) {
      attempts += std::string(attempts.empty() ? "" : "; ") + p->name + " (" + to_string(ep) +
                  "): " + (why.empty() ? fi_error_text(err) : why);
      continue;
    }
    f.info = std::move(info);
    f.policy = p;
    f.quirks = resolve_quirks(*p, fi_version());
    f.provider = p->name;
    f.rdm = ep == EndpointType::ReliableDatagram;
    break;
  }
  if (!f.info.p) {
    std::string why =
        config.provider.empty() ? "no provider can" : "provider '" + config.provider + "' cannot";
    std::string extra;
    if (!offer_va)
      extra = " (virtual addressing is masked off; providers that require it cannot be used)";
    std::string at = config.ip_address.empty() ? "" : " at '" + config.ip_address + "'";
    throw Error(ErrorKind::NotFound,
                "rdmalib: " + why + " serve device '" + config.name + "'" + at + extra + ": " +
                    attempts +
                    ". Run rfaas-info to list the providers available here, and name one of "
                    "them in the device entry's \"provider\" (or "
                    "--provider).");
  }

  int ret = fi_fabric(f.info->fabric_attr, f.fabric.out(), nullptr);
  if (ret)
    throw_fi("fi_fabric for provider " + f.provider, ret);
  ret = fi_domain(f.fabric.get(), f.info.get(), f.domain.out(), nullptr);
  if (ret)
    throw_fi("fi_domain " + std::string(f.info->domain_attr->name) + " of " + f.provider, ret);

  std::random_device rd;
  f.key_secret = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  lf::fill_capabilities(f);

  // The emulated write-with-immediate (no remote CQ data, or masked off)
  // needs its notification to follow the write's data: ask whether the
  // provider orders a send after a write, with the same hints plus that
  // ordering (the chosen fi_info only lists orderings that were asked for).
  // Without atomics too: tcp;ofi_rxm 1.17 offers the ordering for messages
  // and RMA but not once FI_ATOMIC is asked for (its atomics are messages of
  // its own, outside that order), and the emulation involves no atomic.
  // Endpoints then require the ordering (create_endpoint).
  if (!f.ordered_saw && (!f.caps.remote_cq_data || mask.disables(CapRemoteCqData))) {
    const EndpointType ep = f.rdm ? EndpointType::ReliableDatagram : EndpointType::Connected;
    for (bool atomics : {(f.info->caps & FI_ATOMIC) != 0, false}) {
      int err = 0;
      InfoPtr probe = try_getinfo(*f.policy, ep, config, atomics, offer_va, true, &err);
      if (probe.p && (probe->tx_attr->msg_order & FI_ORDER_SAW)) {
        f.ordered_saw = true;
        break;
      }
    }
  }
}

void FabricImpl::finish() {
  native_cq_data = caps.remote_cq_data;
  shared = caps.shared_endpoint;
  if (!caps.wait_fd) {
    wait_cq = false;
    wait_fd_cq = false;
  }
  link_wait_set = !rdm && quirks.link_queues_share_wait_set;
  // A receive must never be truncated inside such a provider (the quirk's
  // comment). The overflow descriptors are null: only for providers that do
  // not need local registration, with room for three iovecs per receive.
  if (quirks.truncation_hangs_receiver && !mr_local && info->rx_attr->iov_limit >= 3)
    overflow.open(64 * 1024, lf::shm_cross_memory_attach_likely());
  // On a shared endpoint a message truncated inside the provider stalled
  // every link to that peer process (tcp;ofi_rxm 1.17: they share its one
  // transport connection), not only the link it was sent on: what overruns a
  // receive lands behind it, and only that link ends.
  else if (shared && !mr_local && info->rx_attr->iov_limit >= 2)
    overflow.open(64 * 1024, false);
  // The emulated write-with-immediate relies on the endpoint delivering its
  // notification after the write's data; endpoints ask for send-after-write
  // ordering where the provider offers it (create_endpoint).
  write_notify_ordered = ordered_saw;
  if (quirks.endpoint_open_is_slow && rdm && !shared)
    preparer = std::make_unique<lf::Preparer>(*this);
  if (!caps.remote_cq_data && !write_notify_ordered)
    logger().warn("{}: no remote CQ data and no send-after-write ordering (FI_ORDER_SAW): "
                  "write_imm is refused on this fabric",
                  provider);
}

std::string FabricImpl::describe_details() const {
  return std::string("domain=") + info->domain_attr->name + " fabric=" + info->fabric_attr->name;
}

std::string FabricImpl::backend_version() {
  uint32_t v = fi_version();
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

std::vector<std::string> FabricImpl::known_providers() {
  std::vector<std::string> out;
  for (const auto &p : lf::provider_table())
    out.push_back(p.name);
  return out;
}

std::string FabricImpl::canonical_provider(const std::string &name_or_alias) {
  const lf::ProviderPolicy *p = lf::find_provider(name_or_alias);
  return p ? std::string(p->name) : std::string();
}

Fabric::ConfinementNeeds FabricImpl::confinement_needs(const DeviceConfig &config) {
  Fabric::ConfinementNeeds n;
  const lf::ProviderPolicy *one = lf::find_provider(config.provider);
  const uint32_t version = fi_version();
  for (const auto &p : lf::provider_table()) {
    if (one && one != &p)
      continue;
    for (const char *path : p.host_paths)
      if (std::find(n.host_paths.begin(), n.host_paths.end(), path) == n.host_paths.end())
        n.host_paths.emplace_back(path);
    n.same_uid_peers = n.same_uid_peers || p.quirks.regions_owner_only.contains(version);
    n.host_pids = n.host_pids || p.quirks.names_peers_by_pid.contains(version);
  }
  return n;
}

void FabricImpl::isolate_tenants() noexcept { lf::apply_tenant_env(); }

void FabricImpl::preload(const DeviceConfig &config) {
  // Quirks::contexts_survive_fork (libfabric's verbs providers): a forked
  // child would use the parent's device contexts and fail like the verbs
  // backend's (seen with the e2e suite on rxe). Nothing of theirs can be
  // loaded. An empty provider that libfabric resolves to verbs is not caught
  // here.
  const lf::ProviderPolicy *p = lf::find_provider(config.provider);
  if (p && lf::resolve_quirks(*p, fi_version()).contexts_survive_fork)
    return;
  // fi_getinfo loads and initialises the providers once per process; a
  // throw-away Fabric gets the whole path a child will take (fabric, domain)
  // warmed without leaving an endpoint or queue behind.
  Fabric warm(config);
}

std::vector<ProviderInfo> FabricImpl::discover() {
  using namespace lf;
  std::vector<ProviderInfo> out;
  std::set<std::string> seen;
  for (const auto &p : provider_table()) {
    for (EndpointType ep : {EndpointType::Connected, EndpointType::ReliableDatagram}) {
      InfoPtr hints = make_hints(p, ep, false, true, false, "");
      fi_info *res = nullptr;
      if (fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints.get(), &res) != 0)
        continue;
      InfoPtr all(res);
      for (fi_info *i = res; i; i = i->next) {
        if (std::strcmp(i->fabric_attr->prov_name, p.name) != 0)
          continue;
        ProviderInfo pi;
        pi.provider = p.name;
        pi.domain = i->domain_attr->name ? i->domain_attr->name : "";
        pi.fabric = i->fabric_attr->name ? i->fabric_attr->name : "";
        pi.endpoint = ep;
        if (i->src_addr &&
            (i->addr_format == FI_SOCKADDR_IN || i->addr_format == FI_SOCKADDR_IN6)) {
          detail::FabricImpl tmp;
          tmp.addr_format = i->addr_format;
          pi.ip_address = tmp.decode_address(i->src_addr, i->src_addrlen).host;
        }
        std::string key = pi.provider + "|" + pi.domain + "|" + pi.ip_address + "|" +
                          (ep == EndpointType::Connected ? "c" : "r");
        if (seen.insert(key).second)
          out.push_back(pi);
      }
    }
  }
  return out;
}

} // namespace detail

} // namespace rdmalib
