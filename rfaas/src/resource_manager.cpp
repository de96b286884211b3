// rfaas::resource_manager: leases over one control connection to the
// resource manager (rfaas/protocol/rm_messages.hpp, docs/protocol.md).
#include <rfaas/resource_manager.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <thread>

#include <rdmalib/rdmalib.hpp>

#include "channel_status.hpp"
#include "logging.hpp"
#include "munge_credential.hpp"
#include "protocol/control_channel.hpp"
#include "protocol/rm_messages.hpp"
#include "rm_address.hpp"

namespace rfaas {

namespace proto = rfaas::protocol;
using Clock = std::chrono::steady_clock;
static_assert(sizeof(lease::secret) == proto::kTokenSize, "LeaseGrant::secret fits rfaas::lease");

namespace {

std::string default_client() {
  const char *user = std::getenv("USER");
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string name = std::string(user && *user ? user : "rfaas") + "@" + host;
  return name.substr(0, proto::kNameCapacity - 1);
}

/// How long a wait for the resource manager's answer polls before it
/// sleeps (ControlOptions::spin). Its loop answers a lease in some tens of
/// microseconds; a sleep costs a wake-up of about as much (measured on
/// loopback tcp: lease median 60 us with it, 75 us without;
/// benchmarks/README.md). Longer answers (a busy resource manager) pay this
/// much CPU, then sleep as before.
constexpr std::chrono::microseconds kAnswerSpin{100};

} // namespace

const server &lease::server(size_t part) const {
  if (part >= parts.size())
    throw Error(phase::usage, "", status::invalid_argument,
                "lease " + std::to_string(id) + " has no part " + std::to_string(part));
  return parts[part].server;
}

allocation_options lease::options(size_t part, allocation_options base) const {
  server(part); // throws for a part that does not exist
  const lease_part &p = parts[part];
  base.lease_id = id;
  base.token = p.token;
  base.lease_expiry_ms = expiry_ms;
  base.lease_cores = p.cores;
  base.lease_memory_mib = p.memory_mib;
  base.lease_client = client;
  base.lease_owner_uid = owner_uid;
  if (base.cores == 0)
    base.cores = p.cores;
  return base;
}

uint32_t lease::cores() const noexcept {
  uint32_t n = 0;
  for (const lease_part &p : parts)
    n += p.cores;
  return n;
}

struct resource_manager::impl {
  impl(const device &dev, const std::string &addr, std::string name, const timeouts &t)
      : address(addr), client(name.empty() ? default_client() : std::move(name)), deadlines(t),
        fabric(open(dev)) {
    if (client.size() >= proto::kNameCapacity)
      throw Error(phase::usage, address, status::invalid_argument,
                  "client name longer than 63 bytes");
    try {
      where = rdmalib::Address::parse(address);
    } catch (const rdmalib::Error &e) {
      throw Error(phase::configuration, address, status::invalid_argument, e.what());
    }
    connect(deadlines.connect);
  }

  void connect(std::chrono::milliseconds within) {
    proto::ClientHello hello;
    uint8_t pd[sizeof hello];
    proto::encode(hello, pd, sizeof pd);
    rdmalib::ConnectionOptions o;
    o.recv_depth = 6;
    o.send_depth = 4;
    o.refused_retries = 3;
    try {
      conn = rdmalib::Connection::connect(fabric, where, pd, sizeof pd, within, o);
      proto::ConnectReply reply;
      const std::vector<uint8_t> &rpd = conn.peer_private_data();
      if (!proto::decode(rpd.data(), rpd.size(), reply) || reply.status != proto::ErrorCode::Ok)
        throw Error(phase::connect, address,
                    reply.status == proto::ErrorCode::Ok ? status::bad_request
                                                         : static_cast<status>(reply.status),
                    "the resource manager refused the connection");
      proto::ControlOptions copts;
      copts.receives = 4;
      copts.receive_size = proto::kMaxLeaseGrantSize;
      // A LeaseRequest with its credential is larger than other messages.
      copts.send_size = proto::kMaxResourceManagerRequest;
      copts.spin = kAnswerSpin;
      channel = proto::ControlChannel(fabric, conn, copts);
    } catch (const rdmalib::Error &e) {
      throw Error(phase::connect, address,
                  e.kind() == rdmalib::ErrorKind::Timeout ? status::timeout : status::closed,
                  std::string("cannot reach the resource manager: ") + e.what());
    }
  }
  ~impl() {
    if (conn.is_open()) {
      proto::Shutdown bye;
      // Bounded by the goodbye's deadline, post included (ControlChannel::send):
      // a reliable-datagram provider may refuse posts to a resource manager
      // that died while it tries to reconnect.
      channel.send(bye, Clock::now() + deadlines.shutdown);
    }
    conn.close();
  }

  static rdmalib::Fabric open(const device &dev) {
    try {
      return rdmalib::Fabric(dev);
    } catch (const rdmalib::Error &e) {
      throw Error(phase::configuration, "", status::network_error,
                  "cannot open device \"" + dev.name + "\": " + e.what());
    }
  }

  /// Sends `m` and decodes the LeaseGrant that answers it; throws on any
  /// failure or a status other than ok. A connection the resource manager
  /// closed meanwhile (an idle client, fabric.client_idle_timeout_ms) is
  /// opened again first: no request was lost on it. With
  /// `provisioning_ok`, a Provisioning answer is returned, not thrown.
  template <class M>
  proto::LeaseGrant exchange(const M &m, std::vector<proto::LeaseGrantPart> &parts,
                             bool provisioning_ok = false) {
    auto deadline = Clock::now() + deadlines.allocation;
    // Empty after a reconnection that failed (the resource manager was down).
    if (!channel.valid() || channel.closed() ||
        channel.poll().status == proto::ChannelStatus::Closed) {
      rfaas::logger().info("the connection to the resource manager {} is closed (an idle client "
                           "is closed after fabric.client_idle_timeout_ms); connecting again",
                           address);
      channel = proto::ControlChannel();
      conn.close();
      connect(std::min(deadlines.connect, deadlines.allocation));
    }
    proto::ChannelStatus s = channel.send(m, deadline);
    proto::ControlMessage reply;
    if (s == proto::ChannelStatus::Ok)
      reply = channel.next(deadline);
    if (s != proto::ChannelStatus::Ok || reply.status != proto::ChannelStatus::Ok)
      throw Error(phase::lease, address,
                  s != proto::ChannelStatus::Ok ? detail::from_channel(s, {})
                                                : detail::from_channel(reply.status, reply.wire),
                  std::string("no answer to ") + M::kName + " (" +
                      proto::to_string(s != proto::ChannelStatus::Ok ? s : reply.status) + ")");
    proto::LeaseGrant grant;
    proto::WireResult r = proto::decode(reply.data, reply.size, grant, parts);
    if (!r)
      throw Error(phase::lease, address, status::bad_request,
                  "unreadable LeaseGrant: " + proto::describe(r));
    if (grant.status != proto::ErrorCode::Ok &&
        !(provisioning_ok && grant.status == proto::ErrorCode::Provisioning))
      throw Error(phase::lease, address, static_cast<status>(grant.status),
                  std::string(proto::get_text(grant.message)));
    return grant;
  }

  void fill(rfaas::lease &l, const proto::LeaseGrant &g,
            const std::vector<proto::LeaseGrantPart> &parts) {
    l.id = g.lease_id;
    l.expiry_ms = g.expiry_ms;
    l.client = client;
    // Every part carries the lease's owner (the token of each covers it).
    if (!parts.empty())
      l.owner_uid = parts.front().owner_uid;
    // Only the grant carries the secret; a renewal keeps the one it had.
    if (!std::all_of(std::begin(g.secret.bytes), std::end(g.secret.bytes),
                     [](uint8_t b) { return b == 0; }))
      std::memcpy(l.secret.data(), g.secret.bytes, l.secret.size());
    l.parts.clear();
    for (const proto::LeaseGrantPart &p : parts) {
      lease_part out;
      out.node = std::string(proto::get_text(p.node));
      rdmalib::Address a;
      try {
        a = rdmalib::Address::parse(std::string(proto::get_text(p.address)));
      } catch (const rdmalib::Error &e) {
        throw Error(phase::lease, address, status::bad_request,
                    "the resource manager named an unusable address: " + std::string(e.what()));
      }
      out.server.name = out.node;
      out.server.address = a.host_text();
      out.server.port = a.port;
      out.cores = p.cores;
      out.memory_mib = p.memory_mib;
      std::memcpy(out.token.data(), p.token.bytes, out.token.size());
      l.parts.push_back(std::move(out));
    }
  }

  std::string address;
  rdmalib::Address where;
  std::string client;
  /// rfaas::resource_manager::credential_problem().
  std::string credential_problem = "no lease requested yet";
  /// Until when lease() does not ask munged again after it found none: a
  /// client without munged would otherwise pay a failed connect (about a
  /// microsecond and a half, a sizeable part of a lease on shm) per request.
  Clock::time_point munge_retry_at{};
  timeouts deadlines;
  rdmalib::Fabric fabric;
  // The channel before the connection: its buffers outlive the close.
  proto::ControlChannel channel;
  rdmalib::Connection conn;
};

resource_manager::resource_manager(const device &dev, const std::string &address,
                                   std::string client, const timeouts &deadlines)
    : impl_(std::make_unique<impl>(dev, resolve_resource_manager_address(address),
                                   std::move(client), deadlines)) {}
resource_manager::~resource_manager() = default;
resource_manager::resource_manager(resource_manager &&) noexcept = default;
resource_manager &resource_manager::operator=(resource_manager &&) noexcept = default;

rfaas::lease resource_manager::lease(uint32_t cores, uint64_t memory_mib,
                                     std::chrono::milliseconds duration, uint32_t max_nodes) {
  proto::LeaseRequest req;
  req.cores = cores;
  req.memory_mib = memory_mib;
  req.duration_ms = static_cast<uint64_t>(duration.count() > 0 ? duration.count() : 0);
  req.max_nodes = max_nodes;
  proto::set_text(req.client, impl_->client);
  if (!req.validate())
    throw Error(phase::lease, impl_->address, status::invalid_argument,
                proto::describe(req.validate()));
  // Last: the credential covers every other field. A munged found absent
  // is looked for again a second later, so one started meanwhile is used
  // from then on.
  std::string problem = impl_->credential_problem;
  std::memset(req.credential, 0, sizeof req.credential);
  const auto now = Clock::now();
  if (now >= impl_->munge_retry_at) {
    bool unreachable = false;
    problem = detail::attach_munge_credential(req, &unreachable);
    impl_->munge_retry_at = unreachable ? now + std::chrono::seconds(1) : Clock::time_point{};
  }
  if (problem != impl_->credential_problem) {
    if (problem.empty())
      rfaas::logger().info("lease requests carry a MUNGE credential");
    else
      rfaas::logger().info("lease requests carry no MUNGE credential ({}); the resource manager "
                           "decides whether it leases to anonymous clients",
                           problem);
  }
  impl_->credential_problem = problem;
  std::vector<proto::LeaseGrantPart> parts;
  // A resource manager that starts nodes for this request (a SLURM pilot
  // job) says so with a retry hint; ask again until timeouts::provisioning.
  const auto give_up = Clock::now() + impl_->deadlines.provisioning;
  proto::LeaseGrant g = impl_->exchange(req, parts, true);
  while (g.status == proto::ErrorCode::Provisioning) {
    const std::string why(proto::get_text(g.message));
    const auto hint = std::chrono::milliseconds(std::clamp<uint64_t>(g.expiry_ms, 10, 10'000));
    if (Clock::now() + hint > give_up)
      throw Error(phase::lease, impl_->address, status::provisioning,
                  why + " (gave up after timeouts::provisioning, " +
                      std::to_string(impl_->deadlines.provisioning.count()) + " ms)");
    rfaas::logger().info("resource manager {}: {}; asking again in {} ms", impl_->address, why,
                         hint.count());
    std::this_thread::sleep_for(hint);
    g = impl_->exchange(req, parts, true);
  }
  rfaas::lease l;
  impl_->fill(l, g, parts);
  rfaas::logger().info("lease {}: {} core(s) on {} node(s) until {} (epoch ms), {}", l.id,
                       l.cores(), l.parts.size(), l.expiry_ms,
                       l.owner_uid == rfaas::lease::anonymous_uid
                           ? std::string("anonymous")
                           : "owner uid " + std::to_string(l.owner_uid));
  return l;
}

void resource_manager::renew(rfaas::lease &l, std::chrono::milliseconds duration) {
  proto::LeaseRenew req;
  req.lease_id = l.id;
  req.duration_ms = static_cast<uint64_t>(duration.count() > 0 ? duration.count() : 0);
  std::memcpy(req.secret.bytes, l.secret.data(), l.secret.size());
  if (!proto::set_text(req.client, l.client.empty() ? impl_->client : l.client) || !req.validate())
    throw Error(phase::usage, impl_->address, status::invalid_argument, "not a granted lease");
  std::vector<proto::LeaseGrantPart> parts;
  proto::LeaseGrant g = impl_->exchange(req, parts);
  std::string client = l.client;
  impl_->fill(l, g, parts);
  if (!client.empty())
    l.client = client;
}

void resource_manager::release(const rfaas::lease &l) {
  proto::LeaseRelease req;
  req.lease_id = l.id;
  std::memcpy(req.secret.bytes, l.secret.data(), l.secret.size());
  if (!proto::set_text(req.client, l.client.empty() ? impl_->client : l.client) || !req.validate())
    throw Error(phase::usage, impl_->address, status::invalid_argument, "not a granted lease");
  std::vector<proto::LeaseGrantPart> parts;
  impl_->exchange(req, parts);
}

const std::string &resource_manager::address() const noexcept { return impl_->address; }
const std::string &resource_manager::client() const noexcept { return impl_->client; }
const std::string &resource_manager::credential_problem() const noexcept {
  return impl_->credential_problem;
}

} // namespace rfaas
