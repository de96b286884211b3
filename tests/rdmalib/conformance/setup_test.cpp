// Connection setup failures and configuration errors: refused / timed-out
// connects, rejected requests, oversized private data, unknown providers, bad
// device databases.
#include "common.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace rdmalib;
using namespace conformance;

namespace {

class Setup : public ProviderFixture {};

/// A TCP port on the server IP that is bound (so nobody else takes it during
/// the test) but not listening: connecting to it is refused by the kernel. On
/// RDMA (rdma_cm has its own port space) nobody listens there either.
class DeadPort {
public:
  DeadPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    if (inet_pton(AF_INET, server_ip().c_str(), &a.sin_addr) != 1)
      throw std::runtime_error("RFAAS_TEST_SERVER_IP " + server_ip() + " is not an IPv4 address");
    a.sin_port = 0;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0)
      throw std::runtime_error("cannot bind a probe socket on " + server_ip() + ": " +
                               std::strerror(errno));
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr *>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~DeadPort() { close(fd_); }
  uint16_t port() const { return port_; }

private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

/// Address ranges reserved inaccessible for the life of the object.
class Fences {
public:
  Fences() = default;
  Fences(const Fences &) = delete;
  Fences &operator=(const Fences &) = delete;
  ~Fences() {
    for (auto &r : held_)
      munmap(reinterpret_cast<void *>(r.first), r.second);
  }
  /// Reserve [start, start + len) if nothing is mapped there; false if not.
  bool add(uintptr_t start, size_t len) {
    void *p = mmap(reinterpret_cast<void *>(start), len, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
      return false;
    if (reinterpret_cast<uintptr_t>(p) != start) {
      munmap(p, len); // a kernel without MAP_FIXED_NOREPLACE took it as a hint
      return false;
    }
    held_.emplace_back(start, len);
    return true;
  }

private:
  std::vector<std::pair<uintptr_t, size_t>> held_;
};

TEST_P(Setup, ConnectToClosedPortFailsWithinDeadline) {
  Address where;
  std::optional<DeadPort> dead;
  if (opaque_addresses()) {
    // A provider name nobody holds any more: a listener's, once closed.
    Listener gone(*server_fabric_, Address{});
    where = gone.address();
  } else {
    dead.emplace();
    where = Address{server_ip(), dead->port()};
  }
  const auto timeout = std::chrono::milliseconds(3000);
  auto pd = pattern_vector(32, 3);
  auto t0 = Clock::now();
  try {
    Connection c = Connection::connect(*client_fabric_, where, pd.data(), pd.size(), timeout);
    FAIL() << "connect to " << where.to_string() << ", where nobody listens, succeeded";
  } catch (const Error &e) {
    auto took = Clock::now() - t0;
    std::string msg = e.what();
    RecordProperty("error", std::string(kind_name(e.kind())) + ": " + msg);
    EXPECT_TRUE(e.kind() == ErrorKind::Refused || e.kind() == ErrorKind::Timeout)
        << "kind " << kind_name(e.kind()) << ": " << msg;
    EXPECT_NE(msg.find(where.to_string()), std::string::npos)
        << "the message must name the address " << where.to_string() << ": " << msg;
    EXPECT_LT(took, timeout + kSlack) << "connect overran its deadline: " << msg;
  }
}

/// A listener opened again at the address of one this process has closed,
/// and reached from this process. (shm keeps the name of every endpoint a
/// process ever opened on a list that it searches before it maps a peer, with
/// the closed endpoint's region long unmapped: a connect to the new listener
/// spun for ever on a lock in that stale region, or faulted:
/// Quirks::closed_names_stay_local.)
TEST_P(Setup, ListenerReopenedAtTheSameAddressServesThisProcess) {
  if (opaque_addresses())
    GTEST_SKIP() << "the provider names listeners itself here: none can be opened again";
  Address where;
  std::vector<std::pair<uintptr_t, size_t>> regions;
  {
    Listener first(*server_fabric_, Address{server_ip(), 0});
    where = first.address();
    regions = shm_mappings("rdmalib-" + where.host + "-" + std::to_string(where.port));
  }
  // Where the first listener's shared-memory region was mapped (shm), nothing
  // may be mapped again by chance: a stale pointer into it must fault, not
  // find the new listener's region at the same address. rdmalib may hold
  // that range itself (then the fence is not needed and cannot be placed).
  Fences fences;
  for (auto &r : regions)
    fences.add(r.first, r.second);
  Listener again(*server_fabric_, where);
  ASSERT_EQ(again.address().to_string(), where.to_string());
  auto pd = pattern_vector(32, 9);
  run_both(
      [&] {
        Connection c = again.accept(pd.data(), pd.size(), kDeadline);
        EXPECT_TRUE(c.is_open());
      },
      [&] {
        Connection c = Connection::connect(*client_fabric_, where, pd.data(), pd.size(), kDeadline);
        EXPECT_TRUE(c.is_open());
        EXPECT_EQ(c.peer_private_data(), pd);
      });
}

/// Server side of the refusal cases: reject the first request (carrying
/// `pd`), then accept the next one, answering with `pd`.
void reject_then_accept(Listener &listener, const std::vector<uint8_t> &pd) {
  ConnectionRequest first = listener.next_request(kDeadline);
  EXPECT_EQ(first.private_data(), pd);
  first.reject();
  // The listener serves the next request normally (a new client, or the
  // same client asking again).
  Connection ok = listener.accept(pd.data(), pd.size(), kDeadline);
  EXPECT_TRUE(ok.is_open());
}

TEST_P(Setup, RefusedRequestIsRetriedWhenAsked) {
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  Address where = listener.address();
  auto pd = pattern_vector(32, 5);
  run_both([&] { reject_then_accept(listener, pd); },
           [&] {
             ConnectionOptions opts;
             opts.refused_retries = 2;
             auto t0 = Clock::now();
             Connection c =
                 Connection::connect(*client_fabric_, where, pd.data(), pd.size(), kDeadline, opts);
             EXPECT_TRUE(c.is_open());
             EXPECT_EQ(c.peer_private_data(), pd);
             // It waited its first backoff (20 ms) before asking again.
             EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(20));
           });
}

TEST_P(Setup, RejectedRequestIsRefusedAndListenerKeepsWorking) {
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  Address where = listener.address();
  auto pd = pattern_vector(32, 4);
  run_both([&] { reject_then_accept(listener, pd); },
           [&] {
             auto t0 = Clock::now();
             try {
               Connection c =
                   Connection::connect(*client_fabric_, where, pd.data(), pd.size(), kDeadline);
               ADD_FAILURE() << "connect succeeded although the server rejected it";
             } catch (const Error &e) {
               EXPECT_EQ(e.kind(), ErrorKind::Refused) << kind_name(e.kind()) << ": " << e.what();
               EXPECT_NE(std::string(e.what()).find(where.to_string()), std::string::npos)
                   << e.what();
               EXPECT_LT(Clock::now() - t0, kDeadline + kSlack);
             }
             Connection second =
                 Connection::connect(*client_fabric_, where, pd.data(), pd.size(), kDeadline);
             EXPECT_TRUE(second.is_open());
             EXPECT_EQ(second.peer_private_data(), pd);
           });
}

/// A client that gives up its handshake before the listener looked at it
/// closes its endpoint; the listener must still serve the next client. (shm
/// 1.17 queues a "map my region" command in the listener's region before the
/// first message and crashed the listening process when that region was gone
/// by the time the listener read the command: Quirks::connreq_names_vanished_peer.)
TEST_P(Setup, HandshakeAbandonedBeforeTheListenerReadItLeavesItWorking) {
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  Address where = listener.address();
  auto stale = pattern_vector(32, 6);
  auto pd = pattern_vector(32, 7);
  try {
    Connection c = Connection::connect(*client_fabric_, where, stale.data(), stale.size(),
                                       std::chrono::milliseconds(200));
    // Providers with their own progress may complete the handshake alone.
    c.close();
  } catch (const Error &e) {
    EXPECT_TRUE(e.kind() == ErrorKind::Timeout || e.kind() == ErrorKind::Refused)
        << kind_name(e.kind()) << ": " << e.what();
  }
  run_both(
      [&] {
        // The abandoned request may still be queued: refuse it, serve the next.
        for (;;) {
          ConnectionRequest r = listener.next_request(kDeadline);
          if (r.private_data() == pd) {
            Connection c = r.accept(pd.data(), pd.size(), kDeadline);
            EXPECT_TRUE(c.is_open());
            return;
          }
          EXPECT_EQ(r.private_data(), stale);
          r.reject();
        }
      },
      [&] {
        Connection c = Connection::connect(*client_fabric_, where, pd.data(), pd.size(), kDeadline);
        EXPECT_TRUE(c.is_open());
        EXPECT_EQ(c.peer_private_data(), pd);
      });
}

/// ConnectionOptions::cancel: a connect that would wait for its whole timeout
/// (the listener never takes the request) gives up soon after the flag is set
/// from elsewhere, as a signal handler would, and at once when it is set
/// already.
TEST_P(Setup, ConnectGivesUpWhenCancelled) {
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  const Address where = listener.address();
  auto pd = pattern_vector(32, 8);
  volatile std::sig_atomic_t flag = 0;
  ConnectionOptions opts;
  opts.cancel = &flag;
  const auto timeout = std::chrono::milliseconds(10000);
  // The slowest look between provider calls: verbs waits for connection
  // manager events in slices of up to a second.
  const auto soon = std::chrono::milliseconds(3000);
  auto attempt = [&](const char *when) {
    auto t0 = Clock::now();
    try {
      Connection c =
          Connection::connect(*client_fabric_, where, pd.data(), pd.size(), timeout, opts);
      c.close();
      return false; // the provider completed the handshake alone
    } catch (const Error &e) {
      std::string msg = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::Timeout) << when << ": " << kind_name(e.kind()) << ": " << msg;
      EXPECT_NE(msg.find("cancelled"), std::string::npos) << when << ": " << msg;
      EXPECT_LT(Clock::now() - t0, soon) << when << ": the connect did not give up soon: " << msg;
    }
    return true;
  };
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    flag = 1;
  });
  bool waited = attempt("flag set during the connect");
  setter.join();
  if (!waited)
    GTEST_SKIP() << GetParam().text << " completed the handshake without the listener";
  attempt("flag set before the connect");
  // The abandoned requests are refused before the listener goes: sockets
  // loses the fi_info and connection of an FI_CONNREQ left unread when its
  // event queue closes (LeakSanitizer).
  for (;;) {
    try {
      listener.next_request(std::chrono::milliseconds(300)).reject();
    } catch (const Error &) {
      break;
    }
  }
}

TEST_P(Setup, OversizedPrivateDataIsConfigError) {
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  std::vector<uint8_t> pd(caps().max_private_data + 1, 0x42);
  try {
    Connection c =
        Connection::connect(*client_fabric_, listener.address(), pd.data(), pd.size(), 3000ms);
    FAIL() << "connect with " << pd.size() << " bytes of private data (max "
           << caps().max_private_data << ") succeeded";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config) << kind_name(e.kind()) << ": " << e.what();
  }
}

TEST_P(Setup, DeviceDatabaseEntryOpensFabric) {
  char path[] = "/tmp/rdmalib-conformance-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  DeviceConfig d = device_for(GetParam());
  d.name = "conformance-device";
  DeviceDatabase({d}).save(path);
  DeviceDatabase db = DeviceDatabase::load(path);
  std::remove(path);
  Fabric f(db.find("conformance-device"), CapabilityMask{});
  EXPECT_EQ(f.provider(), server_fabric_->provider());
  EXPECT_EQ(f.device().name, "conformance-device");
  EXPECT_EQ(f.device().ip_address, server_ip());
  std::string line = f.describe();
  EXPECT_NE(line.find(Fabric::backend_name()), std::string::npos) << line;
  EXPECT_NE(line.find(f.provider()), std::string::npos) << line;
}

TEST_P(Setup, EnvironmentMaskIsTheDefault) {
  // Fabric's mask argument defaults to CapabilityMask::from_environment().
  const char *old = std::getenv("RDMALIB_DISABLE_CAPS");
  std::string saved = old ? old : "";
  setenv("RDMALIB_DISABLE_CAPS", "remote_cq_data,wait_fd", 1);
  std::unique_ptr<Fabric> f;
  try {
    f = std::make_unique<Fabric>(device_for(GetParam()));
  } catch (...) {
    old ? setenv("RDMALIB_DISABLE_CAPS", saved.c_str(), 1) : unsetenv("RDMALIB_DISABLE_CAPS");
    throw;
  }
  old ? setenv("RDMALIB_DISABLE_CAPS", saved.c_str(), 1) : unsetenv("RDMALIB_DISABLE_CAPS");
  EXPECT_EQ(f->mask().to_string(), "remote_cq_data,wait_fd");
  EXPECT_FALSE(f->capabilities().remote_cq_data);
  EXPECT_FALSE(f->capabilities().wait_fd);
  EXPECT_TRUE(f->capabilities().write_consumes_receive);
}

/// Fabric::prepare: where opening an endpoint is slow (shm), each side's
/// connections with the prepared depths take an endpoint opened ahead, which
/// carries messages like any other, and the next is opened for the next
/// connection; other depths open their own. Elsewhere prepare() does nothing.
TEST_P(Setup, PreparedEndpointsCarryLinks) {
  ConnectionOptions o;
  o.recv_depth = 8;
  o.send_depth = 8;
  const bool server_prepares = server_fabric_->prepare(o);
  ASSERT_EQ(client_fabric_->prepare(o), server_prepares);
  if (!server_prepares) {
    EXPECT_EQ(server_fabric_->prepared().waiting, 0u);
    EXPECT_EQ(server_fabric_->prepared().taken, 0u);
    return;
  }
  auto one_waits = [](Fabric &f) {
    for (auto until = Clock::now() + kDeadline; Clock::now() < until;) {
      if (f.prepared().waiting == 1)
        return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  };
  auto exchange = [](Link &k, Buffer<uint8_t> &s, Buffer<uint8_t> &c, int round) {
    Event posted;
    run_both(
        [&] {
          Operations ops = k.server.ops();
          ASSERT_EQ(ops.post_recv(s.local_bytes(0, 64), 1), Status::Ok) << ops.last_error();
          posted.post();
          ASSERT_TRUE(expect_completion(ops, Queue::Recv, OpKind::Recv, 1, "server receive"));
          EXPECT_EQ(pattern_mismatch(s.data(), 64, 300 + round), -1);
          fill_pattern(s.data() + 64, 64, 400 + round);
          ASSERT_EQ(ops.send(s.local_bytes(64, 64), 2), Status::Ok) << ops.last_error();
          ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::Send, 2, "server reply"));
        },
        [&] {
          Operations ops = k.client.ops();
          ASSERT_EQ(ops.post_recv(c.local_bytes(64, 64), 3), Status::Ok) << ops.last_error();
          fill_pattern(c.data(), 64, 300 + round);
          ASSERT_TRUE(posted.wait()) << "the server posted no receive";
          ASSERT_EQ(ops.send(c.local_bytes(0, 64), 4), Status::Ok) << ops.last_error();
          ASSERT_TRUE(expect_completion(ops, Queue::Send, OpKind::Send, 4, "client send"));
          ASSERT_TRUE(expect_completion(ops, Queue::Recv, OpKind::Recv, 3, "client receive"));
          EXPECT_EQ(pattern_mismatch(c.data() + 64, 64, 400 + round), -1);
        });
  };
  Buffer<uint8_t> s(*server_fabric_, 128), c(*client_fabric_, 128);
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(one_waits(*server_fabric_)) << "no endpoint opened ahead on the server side";
    ASSERT_TRUE(one_waits(*client_fabric_)) << "no endpoint opened ahead on the client side";
    Link k = make_link(*server_fabric_, *client_fabric_, o);
    ASSERT_FALSE(HasFailure());
    EXPECT_EQ(server_fabric_->prepared().taken, uint64_t(round + 1));
    EXPECT_EQ(client_fabric_->prepared().taken, uint64_t(round + 1));
    attach_if_needed(k.server, s.region());
    attach_if_needed(k.client, c.region());
    exchange(k, s, c, round);
  }
  ConnectionOptions other;
  other.recv_depth = 4;
  other.send_depth = 4;
  Link k = make_link(*server_fabric_, *client_fabric_, other);
  ASSERT_FALSE(HasFailure());
  attach_if_needed(k.server, s.region());
  attach_if_needed(k.client, c.region());
  exchange(k, s, c, 2);
  EXPECT_EQ(server_fabric_->prepared().taken, 2u) << "depths nobody prepared took an endpoint";
  EXPECT_EQ(client_fabric_->prepared().taken, 2u);
}

/// Fabric::Refill: an endpoint prepared Once is not replaced after a
/// connection took it; one kept (the default) is, after the quiet time.
TEST_P(Setup, PreparedOnceIsNotReplaced) {
  ConnectionOptions o;
  o.recv_depth = 6;
  o.send_depth = 6;
  const bool server_prepares = server_fabric_->prepare(o, Fabric::Refill::Keep);
  ASSERT_EQ(client_fabric_->prepare(o, Fabric::Refill::Once), server_prepares);
  if (!server_prepares)
    GTEST_SKIP() << server_fabric_->provider() << " opens endpoints fast: nothing is prepared";
  auto waiting_becomes = [](Fabric &f, size_t n, std::chrono::milliseconds within) {
    for (auto until = Clock::now() + within; Clock::now() < until;) {
      if (f.prepared().waiting == n)
        return true;
      std::this_thread::sleep_for(1ms);
    }
    return f.prepared().waiting == n;
  };
  ASSERT_TRUE(waiting_becomes(*server_fabric_, 1, kDeadline));
  ASSERT_TRUE(waiting_becomes(*client_fabric_, 1, kDeadline));
  Link k = make_link(*server_fabric_, *client_fabric_, o);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(client_fabric_->prepared().taken, 1u);
  EXPECT_EQ(server_fabric_->prepared().taken, 1u);
  EXPECT_TRUE(waiting_becomes(*server_fabric_, 1, kDeadline))
      << "the kept kind was not replaced after its endpoint was taken";
  // Three quiet times and the replacement's own opening: long enough for a
  // refill that should not happen.
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * Fabric::kRefillQuietMs));
  EXPECT_TRUE(waiting_becomes(*server_fabric_, 1, 1ms));
  EXPECT_EQ(client_fabric_->prepared().waiting, 0u) << "an endpoint prepared Once was replaced";
}

TEST_P(Setup, ListenerFdSignalsPendingRequest) {
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  int fd = listener.fd();
  RecordProperty("listener_fd", fd >= 0 ? "yes" : "none");
  auto pd = pattern_vector(32, 6);
  Address where = listener.address();
  run_both(
      [&] {
        if (fd >= 0) {
          // A daemon multiplexes listeners with poll(): the fd must wake it.
          pollfd p{fd, POLLIN, 0};
          auto t0 = Clock::now();
          int r = 0;
          while (r == 0 && Clock::now() - t0 < kDeadline)
            r = poll(&p, 1, kDeadlineMs);
          ASSERT_EQ(r, 1) << "listener fd never became readable for a pending request";
          // ... and the daemon then takes the request with a zero timeout. The
          // fd may wake before the request is complete (tcp accepts the socket,
          // then reads the client's connection header), so a timeout means
          // "poll again"; a zero timeout that never reads the event queue
          // runs into the deadline.
          ConnectionRequest req;
          bool got = false;
          for (auto t0 = Clock::now(); !got && Clock::now() - t0 < kDeadline;) {
            try {
              req = listener.next_request(std::chrono::milliseconds(0));
              got = true;
            } catch (const Error &e) {
              if (e.kind() != ErrorKind::Timeout)
                throw;
              poll(&p, 1, 100);
            }
          }
          ASSERT_TRUE(got) << "next_request(0) never took the pending request";
          Connection c = req.accept(pd.data(), pd.size(), kDeadline);
          EXPECT_TRUE(c.is_open());
          return;
        }
        Connection c = listener.accept(pd.data(), pd.size(), kDeadline);
        EXPECT_TRUE(c.is_open());
      },
      [&] {
        Connection c = Connection::connect(*client_fabric_, where, pd.data(), pd.size(), kDeadline);
        EXPECT_TRUE(c.is_open());
      });
}

/// ConnectionOptions::accept_in_background: Connection::answer_pending()
/// holds exactly while the answer has not left (the client cannot have
/// connected meanwhile: only this thread's polls post it), and clears once
/// polls got it out; never set on connected fabrics, whose accept completes
/// in the connection manager. A single-threaded server (the executor
/// manager) sleeps only while it is clear.
TEST_P(Setup, BackgroundAnswerIsPendingUntilItLeaves) {
  Listener listener(*server_fabric_, Address{server_ip(), 0});
  const Address where = listener.address();
  auto pd = pattern_vector(32, 8);
  std::atomic<bool> connected{false};
  run_both(
      [&] {
        ConnectionOptions opts;
        opts.accept_in_background = true;
        ConnectionRequest req = listener.next_request(kDeadline);
        Connection c = req.accept(pd.data(), pd.size(), kDeadline, opts);
        ASSERT_TRUE(c.is_open());
        if (caps().endpoint == EndpointType::Connected) {
          EXPECT_FALSE(c.answer_pending()) << "a connected fabric's accept left an answer owed";
        }
        Completion out[4];
        size_t pending_polls = 0;
        const auto t0 = Clock::now();
        while (Clock::now() - t0 < kDeadline && (c.answer_pending() || !connected.load())) {
          if (c.answer_pending()) {
            ++pending_polls;
            ASSERT_FALSE(connected.load())
                << "the client connected while its answer was said not to have left";
          }
          c.ops().poll(Queue::Recv, out, 4);
          c.ops().poll(Queue::Send, out, 4);
          std::this_thread::yield();
        }
        EXPECT_FALSE(c.answer_pending()) << "the answer never left: " << c.ops().last_error();
        EXPECT_TRUE(connected.load()) << "the client never connected";
        RecordProperty("polls_while_pending", static_cast<int>(pending_polls));
        c.close();
        EXPECT_FALSE(c.answer_pending());
      },
      [&] {
        Connection c = Connection::connect(*client_fabric_, where, pd.data(), pd.size(), kDeadline);
        EXPECT_TRUE(c.is_open());
        EXPECT_EQ(c.peer_private_data(), pd);
        connected = true;
      });
}

INSTANTIATE_TEST_SUITE_P(Providers, Setup, testing::ValuesIn(provider_configs()), provider_name);

// ---- configuration errors (no provider parameter) ---------------------------------------------

TEST(Errors, UnknownProviderListsAvailableOnes) {
  DeviceConfig d;
  d.name = "bogus";
  d.provider = "no-such-provider";
  d.ip_address = server_ip();
  try {
    Fabric f(d, CapabilityMask{});
    FAIL() << "a Fabric opened with provider \"no-such-provider\"";
  } catch (const Error &e) {
    std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::NotFound) << kind_name(e.kind()) << ": " << msg;
    EXPECT_NE(msg.find("no-such-provider"), std::string::npos) << msg;
    // Every provider this suite runs on is available, so each must be listed.
    for (const auto &p : provider_configs()) {
      std::string base = p.provider.substr(0, p.provider.find(';'));
      EXPECT_NE(msg.find(base), std::string::npos)
          << "available provider " << base << " not listed: " << msg;
    }
  }
}

TEST(Errors, KnownProvidersAreListed) {
  auto names = Fabric::known_providers();
  EXPECT_FALSE(names.empty());
  for (const auto &p : provider_configs()) {
    bool found = false;
    for (const auto &n : names)
      found = found || n == p.provider;
    EXPECT_TRUE(found) << p.provider << " missing from Fabric::known_providers()";
  }
}

TEST(Errors, DiscoverFindsConfiguredProviders) {
  auto found = Fabric::discover();
  for (const auto &p : provider_configs()) {
    bool any = false;
    for (const auto &info : found)
      any = any || info.provider == p.provider;
    EXPECT_TRUE(any) << p.provider << " not in Fabric::discover()";
  }
}

class TempFile {
public:
  explicit TempFile(const std::string &content) {
    char tmpl[] = "/tmp/rdmalib-devices-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0)
      throw std::runtime_error("mkstemp failed");
    close(fd);
    path_ = tmpl;
    std::ofstream(path_) << content;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

void expect_config_error(const std::string &content, const std::string &key) {
  TempFile f(content);
  try {
    DeviceDatabase::load(f.path());
    ADD_FAILURE() << "device database accepted: " << content;
  } catch (const Error &e) {
    std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Config) << msg;
    EXPECT_NE(msg.find(f.path()), std::string::npos) << "file not named: " << msg;
    EXPECT_NE(msg.find(key), std::string::npos) << "key " << key << " not named: " << msg;
  }
}

TEST(Errors, MalformedDeviceDatabaseNamesFileAndKey) {
  expect_config_error(R"({"devices": [{"name": "a", "provider": "tcp", "prot": 1}]})",
                      "devices[0].prot");
  expect_config_error(R"({"devices": [{"name": "a"}, {"name": "b", "port": "x"}]})",
                      "devices[1].port");
  expect_config_error(R"({"devices": [{"name": "a", "endpoint": "datagram"}]})",
                      "devices[0].endpoint");
  expect_config_error(R"({"devices": [{"name": "a",}]})", "at byte");
}

} // namespace
