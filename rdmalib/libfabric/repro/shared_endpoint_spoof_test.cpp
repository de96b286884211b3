// A hostile peer against a shared endpoint (tcp;ofi_rxm). Links over one
// endpoint are told apart by the tag of each message, and the sender chooses
// the tag: without a check of each message's source, any process that
// reaches the endpoint could put messages on another process's link.
//
// The attack is a separate process (this program run with --attack) that
// uses plain libfabric only, as an attacker would, and learns what it needs
// the way an attacker could:
//  * it connects to the server's published listener with rdmalib's own
//    handshake (the layout is in the source), and the server's answer names
//    the shared endpoint's address and the attacker's own link id;
//  * link ids are handed out in order, so every id below its own belongs to
//    a link opened before it: the victims.
// It then sends a forged message tagged for each of those links, and last a
// marker on its own link. One connection keeps its messages in order, so
// once the marker reached the server, every forged message had been read.
//
// The server (this process, rdmalib's API only) holds one victim link whose
// peer is a legitimate client. Passes when no forged message reached the
// victim, the drop was logged as foreign, and the client's own message
// still arrives. Exit 0: passed; 1: failed; 77: skipped (this libfabric
// offers no shared endpoint), with the reason on stderr.
#include <rdmalib/log.hpp>
#include <rdmalib/rdmalib.hpp>

#include "libfabric/backend.hpp" // the handshake's layout and the tags: what an attacker reads

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace lf = rdmalib::lf;
using Clock = std::chrono::steady_clock;

constexpr char kSpoof[] = "SPOOFED-MESSAGE!";
constexpr char kMarker[] = "ATTACKER-OWNLINK";
constexpr char kLegit[] = "LEGITIMATE-HELLO";
constexpr size_t kLen = 16;
static_assert(sizeof kSpoof == kLen + 1 && sizeof kMarker == kLen + 1 && sizeof kLegit == kLen + 1);

int fail(const std::string &why) {
  std::fprintf(stderr, "shared_endpoint_spoof: FAIL: %s\n", why.c_str());
  return 1;
}

int skip(const std::string &why) {
  std::fprintf(stderr, "shared_endpoint_spoof: skipped: %s\n", why.c_str());
  return 77;
}

// ---- the attacker: plain libfabric in its own process ------------------------

/// A raw tcp;ofi_rxm endpoint with one completion queue for both directions.
/// Held by the backend's own owners, which close in the reverse order of
/// declaration: the endpoint first, the fabric and the info last.
struct RawEndpoint {
  lf::InfoPtr info;
  lf::Fid<fid_fabric> fab;
  lf::Fid<fid_domain> dom;
  lf::Fid<fid_av> av;
  lf::Fid<fid_cq> cq;
  lf::Fid<fid_ep> ep;

  /// Empty string on success, else what failed.
  std::string open() {
    fi_info *hints = fi_allocinfo();
    hints->fabric_attr->prov_name = strdup("tcp;ofi_rxm");
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    // Plain memory: the attacker registers nothing.
    hints->domain_attr->mr_mode = 0;
    fi_info *got = nullptr;
    int ret = fi_getinfo(FI_VERSION(1, 9), "127.0.0.1", nullptr, FI_SOURCE, hints, &got);
    fi_freeinfo(hints);
    info = lf::InfoPtr(got);
    if (ret)
      return std::string("fi_getinfo: ") + fi_strerror(-ret);
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_TAGGED;
    if ((ret = fi_fabric(info->fabric_attr, fab.out(), nullptr)) ||
        (ret = fi_domain(fab.get(), info.get(), dom.out(), nullptr)) ||
        (ret = fi_av_open(dom.get(), &aa, av.out(), nullptr)) ||
        (ret = fi_cq_open(dom.get(), &ca, cq.out(), nullptr)) ||
        (ret = fi_endpoint(dom.get(), info.get(), ep.out(), nullptr)) ||
        (ret = fi_ep_bind(ep.get(), &av->fid, 0)) ||
        (ret = fi_ep_bind(ep.get(), &cq->fid, FI_TRANSMIT | FI_RECV)) ||
        (ret = fi_enable(ep.get())))
      return std::string("opening the endpoint: ") + fi_strerror(-ret);
    return {};
  }

  /// Reads one completion (which also drives the provider's progress: RxM
  /// makes its connections only while the queue is read). 1: `*ctx` names
  /// the finished operation; 0: none yet; -1: an operation failed.
  int reap(void **ctx, std::string &err) {
    fi_cq_tagged_entry e{};
    ssize_t n = fi_cq_read(cq.get(), &e, 1);
    if (n == 1) {
      *ctx = e.op_context;
      return 1;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry ee{};
      fi_cq_readerr(cq.get(), &ee, 0);
      err = fi_strerror(ee.err);
      return -1;
    }
    return 0;
  }

  /// Posts `post` until the provider takes it (RxM says EAGAIN until its
  /// connection to the target exists), progressing meanwhile. Completions
  /// read while waiting are counted in `done`.
  template <class Post> ssize_t post(Post &&p, Clock::time_point until, size_t &done) {
    ssize_t r;
    std::string err;
    while ((r = p()) == -FI_EAGAIN && Clock::now() < until) {
      void *ctx = nullptr;
      if (reap(&ctx, err) < 0)
        return -FI_EIO;
      if (ctx)
        ++done;
    }
    return r;
  }
};

fi_addr_t insert(RawEndpoint &r, const void *addr) {
  fi_addr_t a = FI_ADDR_UNSPEC;
  return fi_av_insert(r.av.get(), addr, 1, &a, 0, nullptr) == 1 ? a : FI_ADDR_UNSPEC;
}

/// Speaks the first half of rdmalib's handshake to the listener at
/// host:port: a HELLO naming `link` as the attacker's link id, then the
/// server's answer. Returns an empty string once `answer` is the server's
/// acceptance, else what failed. Sends no confirmation.
std::string hello(RawEndpoint &r, const char *host, uint16_t port, uint32_t link,
                  lf::HandshakeMessage &answer, Clock::time_point until) {
  sockaddr_in listener{};
  listener.sin_family = AF_INET;
  listener.sin_port = htons(port);
  if (inet_pton(AF_INET, host, &listener.sin_addr) != 1)
    return std::string("not an IPv4 address: ") + host;
  const fi_addr_t to_listener = insert(r, &listener);
  if (to_listener == FI_ADDR_UNSPEC)
    return "fi_av_insert of the listener";
  lf::HandshakeMessage h{};
  h.magic = lf::kHandshakeMagic;
  h.version = lf::kHandshakeVersion;
  h.type = lf::HsHello;
  h.nonce = (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  h.link = link;
  h.pid = static_cast<uint32_t>(getpid());
  struct stat ns {};
  h.pid_namespace = stat("/proc/self/ns/pid", &ns) == 0 ? ns.st_ino : 0;
  size_t alen = sizeof h.address;
  if (fi_getname(&r.ep->fid, h.address, &alen))
    return "fi_getname";
  h.address_len = static_cast<uint32_t>(alen);

  fi_context2 rctx{}, sctx{};
  size_t done = 0;
  if (fi_trecv(r.ep.get(), &answer, sizeof answer, nullptr, FI_ADDR_UNSPEC, link, 0, &rctx))
    return "fi_trecv for the answer";
  if (r.post([&] { return fi_send(r.ep.get(), &h, sizeof h, nullptr, to_listener, &sctx); }, until,
             done))
    return "could not send the HELLO to the listener";
  bool answered = false;
  std::string err;
  while (!answered && Clock::now() < until) {
    void *ctx = nullptr;
    if (r.reap(&ctx, err) < 0)
      return "handshake: " + err;
    answered = ctx == &rctx;
  }
  if (!answered || answer.magic != lf::kHandshakeMagic || answer.nonce != h.nonce ||
      answer.type != lf::HsAccept || answer.address_len > sizeof answer.address)
    return "no acceptance from the server";
  return {};
}

/// Progresses the endpoint until stdin closes (the test's word to go), so
/// that nothing sent is lost with the endpoint.
int linger(RawEndpoint &r) {
  pollfd in{STDIN_FILENO, POLLIN, 0};
  char drain[64];
  std::string err;
  for (;;) {
    if (poll(&in, 1, 1) > 0 && read(STDIN_FILENO, drain, sizeof drain) <= 0)
      return 0;
    void *c = nullptr;
    r.reap(&c, err);
  }
}

/// The attacker's process. Reports on stdout, one line per step, and keeps
/// its endpoint open until stdin closes (so that nothing it sent is lost
/// with its connection).
int attack(const char *host, uint16_t port) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  RawEndpoint r;
  if (std::string e = r.open(); !e.empty())
    return fail("attacker: " + e);
  const auto until = Clock::now() + 10s;

  // 1. A HELLO like rdmalib's, naming a link id of the attacker's choice,
  //    which the server's answer will carry as its tag.
  constexpr uint32_t kMyLink = 0x5eed;
  lf::HandshakeMessage answer{};
  if (std::string e = hello(r, host, port, kMyLink, answer, until); !e.empty())
    return fail("attacker: " + e);
  const uint32_t own = answer.link;
  const fi_addr_t server = insert(r, answer.address);
  if (server == FI_ADDR_UNSPEC)
    return fail("attacker: fi_av_insert of the server's shared endpoint");
  std::printf("accepted as link %u\n", own);

  // 2. A forged message to every link opened before this one, then the
  //    marker on the attacker's own link.
  std::vector<fi_context2> ctx(own + 1);
  size_t posted = 0, done = 0;
  std::string err;
  for (uint32_t victim = 1; victim <= own; ++victim) {
    const char *what = victim == own ? kMarker : kSpoof;
    const uint64_t tag = lf::kPoolTag | victim;
    ssize_t ret =
        r.post([&] { return fi_tsend(r.ep.get(), what, kLen, nullptr, server, tag, &ctx[victim]); },
               until, done);
    if (ret)
      return fail("attacker: fi_tsend tagged for link " + std::to_string(victim) + ": " +
                  fi_strerror(static_cast<int>(-ret)));
    ++posted;
  }
  while (done < posted && Clock::now() < until) {
    void *c = nullptr;
    if (r.reap(&c, err) < 0)
      return fail("attacker: a send failed: " + err);
    if (c)
      ++done;
  }
  if (done < posted)
    return fail("attacker: the sends did not complete in 10 s");
  std::printf("sent %zu forged messages tagged for links 1..%u, then the marker\n", posted - 1,
              own - 1);

  // 3. Stay until told to go (stdin closes), progressing meanwhile.
  return linger(r);
}

/// The silent peer's process: the handshake's first half, then nothing (no
/// confirmation, no message), progressing its endpoint until stdin closes.
int keep_silent(const char *host, uint16_t port) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  RawEndpoint r;
  if (std::string e = r.open(); !e.empty())
    return fail("silent peer: " + e);
  lf::HandshakeMessage answer{};
  if (std::string e = hello(r, host, port, 0x51e7, answer, Clock::now() + 10s); !e.empty())
    return fail("silent peer: " + e);
  std::printf("accepted as link %u; confirming nothing\n", answer.link);
  return linger(r);
}

// ---- the server: rdmalib only ------------------------------------------------

/// The attacker's process: its stdout read line by line, its stdin held
/// open until it may go. Killed and reaped on every way out of the test.
class AttackerProcess {
public:
  AttackerProcess() = default;
  AttackerProcess(const AttackerProcess &) = delete;
  AttackerProcess &operator=(const AttackerProcess &) = delete;
  ~AttackerProcess() { stop(); }

  /// Runs this program with `mode` (--attack, --silent) HOST PORT. Empty on
  /// success.
  std::string start(const char *mode, const std::string &host, uint16_t port) {
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) || pipe2(from, O_CLOEXEC))
      return std::string("pipe2: ") + std::strerror(errno);
    const std::string port_text = std::to_string(port);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0)
      return std::string("fork: ") + std::strerror(errno);
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(1);
      dup2(to[0], STDIN_FILENO);
      dup2(from[1], STDOUT_FILENO);
      execl("/proc/self/exe", "rdmalib_shared_endpoint_spoof_test", mode, host.c_str(),
            port_text.c_str(), static_cast<char *>(nullptr));
      _exit(127);
    }
    close(to[0]);
    close(from[1]);
    in_ = to[1];
    out_ = from[0];
    fcntl(out_, F_SETFL, fcntl(out_, F_GETFL) | O_NONBLOCK);
    return {};
  }

  /// Whatever the attacker wrote since the last call, as whole lines.
  std::vector<std::string> lines() {
    char buf[256];
    ssize_t n;
    while (out_ >= 0 && (n = read(out_, buf, sizeof buf)) > 0)
      partial_.append(buf, static_cast<size_t>(n));
    std::vector<std::string> got;
    for (size_t nl; (nl = partial_.find('\n')) != std::string::npos; partial_.erase(0, nl + 1))
      got.push_back(partial_.substr(0, nl));
    return got;
  }

  /// True once the process has ended (its status is then in exit_text()).
  bool ended() {
    if (pid_ <= 0)
      return true;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) != pid_)
      return false;
    pid_ = -1;
    exit_text_ = WIFEXITED(st) ? "exit " + std::to_string(WEXITSTATUS(st))
                               : "signal " + std::to_string(WTERMSIG(st));
    return true;
  }
  const std::string &exit_text() const noexcept { return exit_text_; }

  void stop() noexcept {
    if (in_ >= 0)
      close(in_);
    if (out_ >= 0)
      close(out_);
    in_ = out_ = -1;
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string partial_, exit_text_;
};

/// rdmalib's warnings, kept for the test to read (and still shown).
struct LogCapture {
  std::mutex m;
  std::vector<std::string> warnings;
  LogCapture() {
    rdmalib::log::set_sink(
        [this](rdmalib::log::Level l, std::string_view name, std::string_view text) {
          std::fprintf(stderr, "[%.*s] %.*s\n", static_cast<int>(name.size()), name.data(),
                       static_cast<int>(text.size()), text.data());
          if (l >= rdmalib::log::Level::warn) {
            std::lock_guard<std::mutex> g(m);
            warnings.emplace_back(text);
          }
        });
  }
  ~LogCapture() { rdmalib::log::set_sink({}); }
  bool saw(const char *what) {
    std::lock_guard<std::mutex> g(m);
    for (const std::string &w : warnings)
      if (w.find(what) != std::string::npos)
        return true;
    return false;
  }
};

/// Posts `n` receives of kSlot bytes each over `buf` on `ops`.
constexpr size_t kSlot = 64;
std::string post_receives(rdmalib::Operations &ops, rdmalib::Buffer<char> &buf, size_t n) {
  for (uint64_t i = 0; i < n; ++i)
    if (ops.post_recv(buf.local_bytes(i * kSlot, kSlot), i) != rdmalib::Status::Ok)
      return std::string("post_recv: ") + ops.last_error();
  return {};
}

/// The device both sides open: tcp;ofi_rxm on loopback.
rdmalib::DeviceConfig rxm_device() {
  rdmalib::DeviceConfig d;
  d.name = "spoof";
  d.provider = "tcp;ofi_rxm";
  d.ip_address = "127.0.0.1";
  if (!rdmalib::parse_endpoint_preference("rdm", d.endpoint))
    throw std::runtime_error("rdmalib does not know the endpoint preference \"rdm\"");
  return d;
}

constexpr char kNoSharedEndpoint[] =
    "links over tcp;ofi_rxm do not share an endpoint here (this libfabric lacks FI_SOURCE or "
    "FI_DIRECTED_RECV for it, or RDMALIB_DISABLE_CAPS has shared_endpoint)";

/// What both scenarios start from: a server and a legitimate client's
/// fabric, a listener of the server's, and one link from that client.
struct Scene {
  rdmalib::Fabric server{rxm_device()}, client{rxm_device()};
  std::unique_ptr<rdmalib::Listener> listener;
  rdmalib::Connection client_side, server_side;

  /// Listens and makes the legitimate link: 0 when done, else the exit
  /// code (77 where links do not share an endpoint, `why_needed` saying
  /// what the scenario needs one for).
  int start(const char *why_needed) {
    if (!server.capabilities().shared_endpoint)
      return skip(std::string(kNoSharedEndpoint) + ": " + why_needed);
    std::string e = link();
    return e.empty() ? 0 : fail(e);
  }

private:
  std::string link() {
    listener = std::make_unique<rdmalib::Listener>(server, rdmalib::Address{"127.0.0.1", 0});
    const rdmalib::Address at = listener->address();
    std::string connect_error;
    std::thread t([&] {
      try {
        client_side = rdmalib::Connection::connect(client, at, nullptr, 0, 10000ms);
      } catch (const std::exception &e) {
        connect_error = e.what();
      }
    });
    try {
      server_side = listener->accept(nullptr, 0, 10000ms);
    } catch (...) {
      t.join();
      throw;
    }
    t.join();
    return connect_error.empty() ? "" : "the legitimate client could not connect: " + connect_error;
  }
};

int serve() {
  LogCapture log;
  Scene scene;
  // The victim: a link whose peer is a legitimate rdmalib client.
  if (int rc = scene.start("there is no tag to forge"))
    return rc;
  rdmalib::Fabric &server = scene.server, &client = scene.client;
  rdmalib::Listener &listener = *scene.listener;
  const rdmalib::Address at = listener.address();
  rdmalib::Connection &cconn = scene.client_side, &victim = scene.server_side;
  rdmalib::Buffer<char> vin(server, 8 * kSlot), ain(server, 8 * kSlot);
  rdmalib::Buffer<char> out(client, kSlot);
  victim.attach(vin.region());
  cconn.attach(out.region());
  rdmalib::Operations vops = victim.ops();
  rdmalib::Operations cops = cconn.ops();
  if (std::string e = post_receives(vops, vin, 8); !e.empty())
    return fail("victim link: " + e);

  // The attacker connects like any client; the server takes everyone (a
  // resource manager does: it checks the protocol afterwards).
  AttackerProcess attacker;
  if (std::string e = attacker.start("--attack", at.host_text(), at.port); !e.empty())
    return fail("starting the attacker: " + e);
  rdmalib::Connection aconn = listener.accept(nullptr, 0, 10000ms);
  aconn.attach(ain.region());
  rdmalib::Operations aops = aconn.ops();
  if (std::string e = post_receives(aops, ain, 8); !e.empty())
    return fail("attacker's link: " + e);

  // Until the marker arrived on the attacker's own link (the forged
  // messages were read before it) and the attacker said what it sent.
  std::string sent_line;
  bool marker = false;
  size_t victim_got = 0;
  auto check_victim = [&](const char *expect) -> std::string {
    rdmalib::Completion c[8];
    size_t n = vops.poll(rdmalib::Queue::Recv, c, 8);
    for (size_t i = 0; i < n; ++i) {
      if (c[i].status != rdmalib::Status::Ok)
        return std::string("a receive of the victim link failed: ") +
               rdmalib::to_string(c[i].status);
      const char *got = vin.data() + c[i].context * kSlot;
      if (c[i].length == kLen && std::memcmp(got, kSpoof, kLen) == 0)
        return "a message forged by another process reached the victim link (its sender is not "
               "the link's peer: the source of messages on the shared endpoint is not checked)";
      if (expect && c[i].length == kLen && std::memcmp(got, expect, kLen) == 0)
        ++victim_got;
      else
        return "the victim link received " + std::to_string(c[i].length) + " unexpected bytes";
      if (vops.post_recv(vin.local_bytes(c[i].context * kSlot, kSlot), c[i].context) !=
          rdmalib::Status::Ok)
        return std::string("post_recv: ") + vops.last_error();
    }
    return {};
  };
  const auto until = Clock::now() + 20s;
  while (!(marker && !sent_line.empty())) {
    if (Clock::now() > until)
      return fail(std::string("within 20 s: ") + (marker ? "" : "no marker from the attacker; ") +
                  (sent_line.empty() ? "no report of its sends" : ""));
    if (std::string e = check_victim(nullptr); !e.empty())
      return fail(e);
    rdmalib::Completion c[8];
    size_t n = aops.poll(rdmalib::Queue::Recv, c, 8);
    for (size_t i = 0; i < n; ++i) {
      const char *got = ain.data() + c[i].context * kSlot;
      if (c[i].status == rdmalib::Status::Ok && c[i].length == kLen &&
          std::memcmp(got, kMarker, kLen) == 0)
        marker = true;
      else
        return fail("the attacker's own link received something else than its marker");
    }
    for (const std::string &l : attacker.lines()) {
      std::fprintf(stderr, "shared_endpoint_spoof: attacker: %s\n", l.c_str());
      if (l.rfind("sent ", 0) == 0)
        sent_line = l;
    }
    if (sent_line.empty() && attacker.ended())
      return fail("the attacker ended (" + attacker.exit_text() + ") before it sent anything");
  }
  // Anything already read for the victim is in its inbox by now.
  if (std::string e = check_victim(nullptr); !e.empty())
    return fail(e);
  if (!log.saw("is not that link's peer"))
    return fail("no forged message reached the victim, but none was logged as dropped either");

  // The attacker never confirmed the handshake (HsConfirm), but its marker
  // came from it through the pool: the server may answer it at once (a
  // server that waited for the confirmation here would stall for its post
  // deadline on every such peer).
  {
    const auto t0 = Clock::now();
    const rdmalib::Status st = aops.send(ain.local_bytes(0, kLen), 99);
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    if (st != rdmalib::Status::Ok)
      return fail(std::string("the server's answer to a peer that spoke without confirming: ") +
                  rdmalib::to_string(st) + ": " + aops.last_error());
    if (waited > 1s)
      return fail("the server's answer to a peer that spoke waited " +
                  std::to_string(waited.count()) + " ms for a confirmation");
  }

  // The victim's own peer still gets through.
  std::memcpy(out.data(), kLegit, kLen);
  if (cops.send(out.local_bytes(0, kLen), 1) != rdmalib::Status::Ok)
    return fail(std::string("the client's send: ") + cops.last_error());
  const auto legit_until = Clock::now() + 10s;
  while (victim_got == 0) {
    if (Clock::now() > legit_until)
      return fail("the link's own peer's message did not arrive within 10 s");
    rdmalib::Completion c[8];
    cops.poll(rdmalib::Queue::Send, c, 8);
    if (std::string e = check_victim(kLegit); !e.empty())
      return fail(e);
  }
  std::printf("shared_endpoint_spoof: passed: the attacker (%s) reached no other link; the drop "
              "was logged; the victim's own peer got through\n",
              sent_line.c_str());
  return 0;
}

/// A peer that says HELLO and nothing more: no confirmation, no message
/// (a hostile or broken client). The server sends to it at once, and the
/// post must not wait for the confirmation (nothing in a server may wait
/// for such a peer); another link is served meanwhile; once the accept's
/// deadline has passed, the link is named by Fabric::ready_links and ends
/// with an error that names the missing confirmation, the peer and the
/// time waited, the send posted to it fails instead of going out, and
/// closing it does not wait either.
int serve_unconfirmed() {
  Scene scene;
  if (int rc = scene.start("nothing waits for a confirmation"))
    return rc;
  rdmalib::Fabric &server = scene.server, &client = scene.client;
  rdmalib::Listener &listener = *scene.listener;
  const rdmalib::Address at = listener.address();
  rdmalib::Connection &cconn = scene.client_side, &legit = scene.server_side;
  rdmalib::Buffer<char> lin(server, 8 * kSlot), sin(server, kSlot), out(client, kSlot);
  legit.attach(lin.region());
  cconn.attach(out.region());
  rdmalib::Operations lops = legit.ops(), cops = cconn.ops();
  if (std::string e = post_receives(lops, lin, 8); !e.empty())
    return fail("legitimate link: " + e);
  // One message of the legitimate client, received by the server.
  auto round_trip = [&](const char *when) -> std::string {
    std::memcpy(out.data(), kLegit, kLen);
    if (cops.send(out.local_bytes(0, kLen), 1) != rdmalib::Status::Ok)
      return std::string("the legitimate client's send ") + when + ": " + cops.last_error();
    const auto until = Clock::now() + 10s;
    for (;;) {
      if (Clock::now() > until)
        return std::string("the legitimate client's message ") + when + " did not arrive in 10 s";
      rdmalib::Completion c[8];
      cops.poll(rdmalib::Queue::Send, c, 8);
      if (lops.poll(rdmalib::Queue::Recv, c, 1) == 0)
        continue;
      if (c[0].status != rdmalib::Status::Ok || c[0].length != kLen ||
          std::memcmp(lin.data() + c[0].context * kSlot, kLegit, kLen) != 0)
        return std::string("the legitimate link received something else ") + when + ": " +
               lops.last_error();
      if (lops.post_recv(lin.local_bytes(c[0].context * kSlot, kSlot), c[0].context) !=
          rdmalib::Status::Ok)
        return std::string("post_recv: ") + lops.last_error();
      return {};
    }
  };

  AttackerProcess peer;
  if (std::string e = peer.start("--silent", at.host_text(), at.port); !e.empty())
    return fail("starting the silent peer: " + e);
  // Shorter than the accept's deadline: a post that waited for the
  // confirmation would end on it, as a full queue's timeout.
  rdmalib::ConnectionOptions opts;
  opts.post_deadline = 1000ms;
  constexpr auto kAcceptWait = 2000ms;
  constexpr uint64_t kSilentTag = 7;
  // The accept's deadline counts from here (the peer's HELLO comes within it).
  const auto accepted = Clock::now();
  rdmalib::Connection silent = listener.accept(nullptr, 0, kAcceptWait, opts);
  silent.attach(sin.region());
  silent.set_tag(kSilentTag);
  rdmalib::Operations sops = silent.ops();
  const std::string who = silent.remote_address().to_string();
  for (bool answered = false; !answered;) {
    for (const std::string &l : peer.lines()) {
      std::fprintf(stderr, "shared_endpoint_unconfirmed: silent peer: %s\n", l.c_str());
      answered = answered || l.rfind("accepted", 0) == 0;
    }
    if (!answered && peer.ended())
      return fail("the silent peer ended (" + peer.exit_text() + ") before it was answered");
    if (!answered && Clock::now() - accepted > 10s)
      return fail("the silent peer got no answer in 10 s");
  }

  {
    std::memcpy(sin.data(), kMarker, kLen);
    const auto t0 = Clock::now();
    const rdmalib::Status st = sops.send(sin.local_bytes(0, kLen), 99);
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    if (st != rdmalib::Status::Ok || waited > 500ms)
      return fail("a send to a peer that has not confirmed the handshake returned " +
                  std::string(rdmalib::to_string(st)) + " after " + std::to_string(waited.count()) +
                  " ms (" + sops.last_error() +
                  "): it must be taken at once and held for the confirmation");
  }
  if (std::string e = round_trip("while a peer has not confirmed"); !e.empty())
    return fail(e);

  // Until the link's end is read, looking at the link once ready_links
  // named it (a server that polls only the links it names).
  bool named = false, send_failed = false, ended = false;
  Clock::time_point ended_at{};
  while (!(send_failed && ended)) {
    if (Clock::now() - accepted > kAcceptWait + 5s)
      return fail(std::string("5 s after the accept's deadline: ") +
                  (ended ? "" : "the link did not end; ") +
                  (send_failed ? "" : "the held send did not fail; ") + sops.last_error());
    std::vector<uint64_t> tags;
    server.ready_links(tags);
    named = named || std::find(tags.begin(), tags.end(), kSilentTag) != tags.end();
    if (!named)
      continue;
    rdmalib::Completion c[4];
    for (size_t i = 0, n = sops.poll(rdmalib::Queue::Send, c, 4); i < n; ++i) {
      if (c[i].context != 99 || c[i].status == rdmalib::Status::Ok)
        return fail("the send to the silent peer completed with " +
                    std::string(rdmalib::to_string(c[i].status)) +
                    ": nothing may go to a peer that did not confirm");
      send_failed = true;
    }
    for (size_t i = 0, n = sops.poll(rdmalib::Queue::Recv, c, 4); i < n; ++i) {
      if (c[i].kind != rdmalib::OpKind::PeerClosed)
        return fail("the silent link delivered a completion other than its end");
      ended = true;
      ended_at = Clock::now();
    }
  }
  const std::string why = sops.last_error();
  std::fprintf(
      stderr, "shared_endpoint_unconfirmed: the link ended after %lld ms: %s\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(ended_at - accepted).count()),
      why.c_str());
  if (ended_at - accepted < kAcceptWait - 100ms)
    return fail("the link ended before the accept's deadline: " + why);
  if (why.find("did not confirm the handshake") == std::string::npos ||
      why.find(who) == std::string::npos || why.find(" ms of ") == std::string::npos)
    return fail("the error does not name the missing confirmation, the peer (" + who +
                ") and the time waited: " + why);
  {
    const auto t0 = Clock::now();
    silent.close();
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    if (waited > 500ms)
      return fail("closing the link of a peer that never confirmed took " +
                  std::to_string(waited.count()) + " ms");
  }
  if (std::string e = round_trip("after the silent peer's link ended"); !e.empty())
    return fail(e);
  std::printf("shared_endpoint_unconfirmed: passed: a send to the silent peer was held, not "
              "waited for; its link ended at the accept's deadline (%s); another link was "
              "served throughout\n",
              why.c_str());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 4 && std::strcmp(argv[1], "--attack") == 0)
    return attack(argv[2], static_cast<uint16_t>(std::atoi(argv[3])));
  if (argc == 4 && std::strcmp(argv[1], "--silent") == 0)
    return keep_silent(argv[2], static_cast<uint16_t>(std::atoi(argv[3])));
  const bool unconfirmed = argc == 2 && std::strcmp(argv[1], "--unconfirmed") == 0;
  if (argc != 1 && !unconfirmed) {
    std::fprintf(stderr,
                 "usage: %s [--unconfirmed] (the peers run as %s --attack|--silent HOST PORT)\n",
                 argv[0], argv[0]);
    return 2;
  }
  try {
    return unconfirmed ? serve_unconfirmed() : serve();
  } catch (const std::exception &e) {
    return fail(e.what());
  }
}
