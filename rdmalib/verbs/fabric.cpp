// Fabric on ibverbs + librdmacm: picks the device (by name, or as the owner of
// the configured IP address), allocates the protection domain and fills the
// Capabilities from the device attributes.
//
// The device context comes from rdma_get_devices(), not ibv_open_device():
// rdma_cm ids resolve to librdmacm's own contexts, and a QP can only be created
// with a protection domain of the same context.
#include "backend.hpp"

#include <chrono>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <link.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "common/logging.hpp"
#include <spdlog/spdlog.h>

#include <rdmalib/fabric.hpp>

namespace rdmalib {

namespace {

std::string device_names(ibv_context **list) {
  std::string out;
  for (ibv_context **p = list; p && *p; ++p) {
    if (!out.empty())
      out += ", ";
    out += ibv_get_device_name((*p)->device);
  }
  return out.empty() ? "none" : out;
}

[[noreturn]] void no_devices() {
  throw Error(ErrorKind::NotFound,
              "rdmalib verbs: no RDMA device found (ibv_get_device_list is empty). This machine "
              "needs an InfiniBand/RoCE NIC or a soft-RoCE device (rdma link add rxe0 type rxe "
              "netdev eth0); without RDMA in the kernel, run the tests in a VM with "
              "tests/softroce/run-in-vm.sh");
}

/// The device context owning local address `a` (rdma_bind_addr on a scratch
/// id), and the port it is on. Throws NotFound naming the address.
ibv_context *device_of_address(const std::string &ip, ibv_context **list, uint8_t &port) {
  vb::AddrInfo ai = vb::resolve(Address{ip, 0}, true);
  rdma_event_channel *raw_ch = rdma_create_event_channel();
  if (!raw_ch)
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_create_event_channel", errno);
  vb::EventChannel ch(raw_ch);
  rdma_cm_id *raw_id = nullptr;
  if (rdma_create_id(ch.get(), &raw_id, nullptr, RDMA_PS_TCP))
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_create_id", errno);
  vb::CmId id(raw_id);
  if (rdma_bind_addr(id.get(), ai->ai_src_addr))
    vb::throw_errno(ErrorKind::NotFound,
                    "rdmalib verbs: ip_address " + ip + " is not an address of this node", errno);
  if (!id->verbs)
    throw Error(ErrorKind::NotFound,
                "rdmalib verbs: ip_address " + ip + " is not on an RDMA device (devices: " +
                    device_names(list) + "); use the address of a RoCE/IPoIB interface");
  port = id->port_num ? id->port_num : 1;
  return id->verbs;
}

const char *link_layer_name(uint8_t ll) {
  switch (ll) {
  case IBV_LINK_LAYER_ETHERNET:
    return "Ethernet";
  case IBV_LINK_LAYER_INFINIBAND:
    return "InfiniBand";
  default:
    return "unspecified";
  }
}

/// Largest inline size, at most `wanted`, that an RC QP of this device
/// accepts. Devices report it only through QP creation (ibv_query_device has
/// no field), so a throw-away QP is created; providers either fail the
/// creation or lower cap.max_inline_data when asked for too much.
uint32_t probe_inline(ibv_context *ctx, ibv_pd *pd, uint32_t wanted) {
  if (wanted == 0)
    return 0;
  vb::Cq cq;
  cq.create(ctx, 2, nullptr, "inline probe");
  for (uint32_t ask = wanted; ask > 0; ask /= 2) {
    ibv_qp_init_attr attr{};
    attr.send_cq = cq.get();
    attr.recv_cq = cq.get();
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = 1;
    attr.cap.max_recv_wr = 1;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = ask;
    ibv_qp *qp = ibv_create_qp(pd, &attr);
    if (qp) {
      ibv_destroy_qp(qp);
      return std::min(ask, attr.cap.max_inline_data);
    }
  }
  return 0;
}

} // namespace

namespace detail {

void FabricImpl::open() {
  auto &f = *this;
  const DeviceConfig &config = f.config;
  const CapabilityMask mask = f.mask;
  f.provider = "verbs";

  // One provider here. Anything else is a libfabric provider name: say so
  // rather than silently opening an RDMA device for a "tcp" configuration.
  if (!config.provider.empty() && canonical_provider(config.provider).empty())
    throw Error(ErrorKind::NotFound,
                "rdmalib verbs: no provider \"" + config.provider + "\" (device config \"" +
                    config.name +
                    "\"): this build's verbs backend provides only \"verbs\" (known providers: "
                    "verbs); libfabric providers need a build with "
                    "-DRFAAS_NETWORK_BACKEND=libfabric");
  if (config.endpoint == EndpointPreference::ReliableDatagram)
    throw Error(ErrorKind::Unsupported,
                "rdmalib verbs: device config \"" + config.name +
                    "\" asks for reliable-datagram endpoints; the verbs backend has connected "
                    "(RC) endpoints only: set \"endpoint\" to \"connected\" or \"auto\"");

  int n = 0;
  f.devices.reset(rdma_get_devices(&n));
  if (!f.devices || n == 0)
    no_devices();
  ibv_context **list = f.devices.get();

  // Device by name, by IP address, or the first one.
  if (!config.domain.empty()) {
    for (ibv_context **p = list; *p; ++p)
      if (config.domain == ibv_get_device_name((*p)->device))
        f.ctx = *p;
    if (!f.ctx)
      throw Error(ErrorKind::NotFound, "rdmalib verbs: no RDMA device named \"" + config.domain +
                                           "\" (device config \"" + config.name +
                                           "\"); devices here: " + device_names(list) +
                                           " (see ibv_devices or rfaas-info)");
  }
  if (!config.ip_address.empty()) {
    uint8_t port = 1;
    ibv_context *owner = device_of_address(config.ip_address, list, port);
    if (f.ctx && owner != f.ctx)
      throw Error(ErrorKind::Config,
                  "rdmalib verbs: device config \"" + config.name + "\" names device " +
                      config.domain + " but ip_address " + config.ip_address + " is on " +
                      ibv_get_device_name(owner->device) + "; fix one of the two");
    f.ctx = owner;
    f.port = port;
  }
  if (!f.ctx)
    f.ctx = list[0];
  f.device_name = ibv_get_device_name(f.ctx->device);

  if (ibv_query_device(f.ctx, &f.attr))
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: ibv_query_device on " + f.device_name,
                    errno);
  ibv_port_attr port_attr{};
  if (ibv_query_port(f.ctx, f.port, &port_attr))
    vb::throw_errno(
        ErrorKind::Backend,
        "rdmalib verbs: ibv_query_port " + std::to_string(f.port) + " on " + f.device_name, errno);
  f.link_layer = link_layer_name(port_attr.link_layer);
  if (port_attr.state != IBV_PORT_ACTIVE)
    rdmalib::logger().warn("rdmalib verbs: port {} of {} is {}, not active", f.port, f.device_name,
                           ibv_port_state_str(port_attr.state));

  f.pd.reset(ibv_alloc_pd(f.ctx));
  if (!f.pd)
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: ibv_alloc_pd on " + f.device_name, errno);

  int rd = std::min({f.attr.max_qp_rd_atom, f.attr.max_qp_init_rd_atom, 16});
  f.rd_atomic = static_cast<uint8_t>(rd > 0 ? rd : 1);

  Capabilities &c = f.caps;
  c.endpoint = EndpointType::Connected;
  c.progress = Progress::Auto;
  c.remote_cq_data = true;
  c.atomics = f.attr.atomic_cap != IBV_ATOMIC_NONE;
  c.provider_keys = true;
  c.virtual_addressing = true;
  c.local_registration = true;
  c.endpoint_bound_memory = false;
  c.write_consumes_receive = true;
  c.notify_message_size = 0;
  c.wait_fd = true;
  c.max_inline =
      mask.disables(CapInline) ? 0 : probe_inline(f.ctx, f.pd.get(), config.max_inline_data);
  c.max_message = port_attr.max_msg_sz ? port_attr.max_msg_sz : (1u << 31);
  c.mr_key_size = sizeof(uint32_t); // rkey
  c.max_private_data = vb::kMaxPrivateData;
}

void FabricImpl::finish() {
  // The mask switches capabilities off to force the fallbacks (DESIGN §3).
  // Without remote CQ data, write_imm becomes a write plus an ordered
  // 16-byte notification send (RC executes them in order), which consumes a
  // receive just like the native immediate.
  emulate_imm = !caps.remote_cq_data;
  // Without virtual addressing, registrations are zero-based
  // (ibv_reg_mr_iova with iova 0): remote addresses are offsets.
  zero_based = !caps.virtual_addressing;
}

std::string FabricImpl::describe_details() const {
  std::string s =
      "device=" + device_name + " port=" + std::to_string(port) + " link_layer=" + link_layer;
  if (!config.ip_address.empty())
    s += " ip=" + config.ip_address;
  return s;
}

namespace {

int find_library(dl_phdr_info *info, size_t, void *data) {
  auto *out = static_cast<std::string *>(data);
  if (info->dlpi_name && std::strstr(info->dlpi_name, "/libibverbs.so")) {
    *out = info->dlpi_name;
    return 1;
  }
  return 0;
}

} // namespace

std::string FabricImpl::backend_version() {
  // libibverbs has no version call. rdma-core names the library file
  // libibverbs.so.1.<abi>.<rdma-core major>.<minor>: read it from the copy
  // actually loaded.
  std::string path;
  dl_iterate_phdr(find_library, &path);
  if (!path.empty()) {
    char real[PATH_MAX];
    if (realpath(path.c_str(), real)) {
      std::string file = real;
      auto pos = file.rfind("libibverbs.so.");
      if (pos != std::string::npos) {
        std::string ver = file.substr(pos + std::strlen("libibverbs.so."));
        // "1.14.44.0" -> "rdma-core 44.0 (libibverbs 1.14)"
        auto d1 = ver.find('.');
        auto d2 = d1 == std::string::npos ? d1 : ver.find('.', d1 + 1);
        if (d2 != std::string::npos)
          return "rdma-core " + ver.substr(d2 + 1) + " (libibverbs " + ver.substr(0, d2) + ")";
        return "libibverbs " + ver;
      }
    }
  }
  return "rdma-core (version unknown)";
}

std::vector<ProviderInfo> FabricImpl::discover() {
  std::vector<ProviderInfo> out;
  int n = 0;
  ibv_device **raw = ibv_get_device_list(&n);
  if (!raw) {
    if (errno == ENOSYS || errno == 0)
      return out; // no RDMA support in this kernel
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: ibv_get_device_list", errno);
  }
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i)
    names.emplace_back(ibv_get_device_name(raw[i]));
  ibv_free_device_list(raw);
  if (names.empty())
    return out;

  // Which local address is on which device: bind a scratch rdma_cm id to each
  // interface address and look at the device it lands on.
  struct Found {
    std::string device, ip, network;
  };
  std::vector<Found> found;
  ifaddrs *ifs = nullptr;
  rdma_event_channel *raw_ch = rdma_create_event_channel();
  vb::EventChannel ch(raw_ch);
  if (ch && getifaddrs(&ifs) == 0) {
    for (ifaddrs *i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || (i->ifa_flags & IFF_LOOPBACK))
        continue;
      int fam = i->ifa_addr->sa_family;
      if (fam != AF_INET && fam != AF_INET6)
        continue;
      rdma_cm_id *raw_id = nullptr;
      if (rdma_create_id(ch.get(), &raw_id, nullptr, RDMA_PS_TCP))
        continue;
      vb::CmId id(raw_id);
      if (rdma_bind_addr(id.get(), i->ifa_addr) || !id->verbs)
        continue;
      Found fd;
      fd.device = ibv_get_device_name(id->verbs->device);
      fd.ip = vb::sockaddr_address(i->ifa_addr).host;
      int prefix = 0;
      if (i->ifa_netmask) {
        const auto *m = reinterpret_cast<const uint8_t *>(
            fam == AF_INET ? static_cast<const void *>(
                                 &reinterpret_cast<sockaddr_in *>(i->ifa_netmask)->sin_addr)
                           : static_cast<const void *>(
                                 &reinterpret_cast<sockaddr_in6 *>(i->ifa_netmask)->sin6_addr));
        for (int b = 0; b < (fam == AF_INET ? 4 : 16); ++b)
          prefix += __builtin_popcount(m[b]);
      }
      fd.network = fd.ip + "/" + std::to_string(prefix) + " (" + i->ifa_name + ")";
      found.push_back(fd);
    }
    freeifaddrs(ifs);
  }

  for (const auto &name : names) {
    bool any = false;
    for (const auto &fd : found) {
      if (fd.device != name)
        continue;
      out.push_back(ProviderInfo{"verbs", name, fd.network, EndpointType::Connected, fd.ip});
      any = true;
    }
    if (!any)
      out.push_back(ProviderInfo{"verbs", name, "", EndpointType::Connected, ""});
  }
  // Fastest first: software devices (soft-RoCE, soft-iWARP) after hardware.
  auto soft = [](const ProviderInfo &p) {
    return p.domain.rfind("rxe", 0) == 0 || p.domain.rfind("siw", 0) == 0;
  };
  std::stable_sort(out.begin(), out.end(), [&](const ProviderInfo &a, const ProviderInfo &b) {
    return !soft(a) && soft(b);
  });
  return out;
}

std::vector<std::string> FabricImpl::known_providers() { return {"verbs"}; }

// The one provider of this backend, under its one name.
std::string FabricImpl::canonical_provider(const std::string &name_or_alias) {
  return name_or_alias == "verbs" ? name_or_alias : std::string();
}

// Nothing of a verbs process outlives it: the kernel releases its queue
// pairs and registrations when it dies.
Fabric::ReclaimReport FabricImpl::reclaim_stale(std::chrono::seconds) { return {}; }

Fabric::ConfinementNeeds FabricImpl::confinement_needs(const DeviceConfig &) {
  // libibverbs and rdma_cm open the device files and read sysfs (the class
  // entries are links into /sys/devices).
  Fabric::ConfinementNeeds n;
  n.host_paths = {"/dev/infiniband", "/sys"};
  return n;
}

// The hardware checks every remote access against its registration.
void FabricImpl::isolate_tenants() noexcept {}

void FabricImpl::preload(const DeviceConfig &) {
  // Only libibverbs and its user-space drivers. Opening the device is not an
  // option: librdmacm keeps the contexts of rdma_get_devices() open for the
  // life of the process, a forked child would inherit them instead of opening
  // its own, and the kernel refuses uverbs commands written to a file opened
  // under another process's credentials (EACCES). rxe posts every work
  // request through such a command, so a child's first send failed.
  int n = 0;
  ibv_device **raw = ibv_get_device_list(&n);
  if (!raw) {
    if (errno == ENOSYS || errno == 0)
      return; // no RDMA support in this kernel: nothing to load
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: ibv_get_device_list", errno);
  }
  ibv_free_device_list(raw);
}

} // namespace detail

} // namespace rdmalib
