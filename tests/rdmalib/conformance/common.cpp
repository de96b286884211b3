#include "common.hpp"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "providers.hpp"

#ifndef RFAAS_PEER_BINARY
#error "RFAAS_PEER_BINARY must name the peer helper binary (set by tests/rdmalib/CMakeLists.txt)"
#endif

namespace conformance {

using namespace rdmalib;

// ---- parameters -------------------------------------------------------------------

namespace {

ProviderConfig parse_provider_config(const std::string &text) {
  ProviderConfig p;
  p.text = text;
  auto slash = text.rfind('/');
  p.provider = text.substr(0, slash);
  p.endpoint_name = slash == std::string::npos ? "auto" : text.substr(slash + 1);
  if (!parse_endpoint_preference(p.endpoint_name, p.endpoint))
    throw std::invalid_argument("RFAAS_TEST_PROVIDERS: \"" + text + "\": endpoint \"" +
                                p.endpoint_name + "\" is not one of " +
                                endpoint_preference_names());
  for (char c : text)
    p.label += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  // "tcp;ofi_rxm/rdm" -> "tcp_ofi_rxm_rdm"; collapse doubled separators.
  std::string clean;
  for (char c : p.label)
    if (!(c == '_' && !clean.empty() && clean.back() == '_'))
      clean += c;
  p.label = clean;
  return p;
}

} // namespace

const std::vector<ProviderConfig> &provider_configs() {
  static const std::vector<ProviderConfig> configs = [] {
    std::vector<ProviderConfig> out;
    // The environment variable lets one build serve other providers (the VM
    // runs libfabric's verbs providers with the host's build). Provider names
    // may contain ';', so entries are separated by ','.
    const char *env = std::getenv("RFAAS_TEST_PROVIDERS");
    if (env && *env) {
      std::string list(env);
      size_t start = 0;
      while (start <= list.size()) {
        size_t comma = list.find(',', start);
        if (comma == std::string::npos)
          comma = list.size();
        if (comma > start)
          out.push_back(parse_provider_config(list.substr(start, comma - start)));
        start = comma + 1;
      }
      return out;
    }
    for (const char *const *p = kProviderConfigs; *p; ++p)
      out.push_back(parse_provider_config(*p));
    return out;
  }();
  return configs;
}

std::vector<MaskConfig> all_masks() {
  return {
      {"native", ""},
      {"no_remote_cq_data", "remote_cq_data"},
      {"no_atomics", "atomics"},
      {"no_remote_cq_data_atomics", "remote_cq_data,atomics"},
      {"no_wait_fd", "wait_fd"},
      {"all_off", "remote_cq_data,atomics,virtual_addressing,wait_fd,inline"},
  };
}

std::vector<MaskConfig> process_masks() {
  return {
      {"native", ""},
      {"all_off", "remote_cq_data,atomics,virtual_addressing,wait_fd,inline"},
  };
}

std::vector<Param> params(const std::vector<MaskConfig> &masks) {
  std::vector<Param> out;
  for (const auto &p : provider_configs())
    for (const auto &m : masks)
      out.push_back({p, m});
  return out;
}

std::string param_name(const testing::TestParamInfo<Param> &info) {
  return info.param.provider.label + "__" + info.param.mask.label;
}

std::string provider_name(const testing::TestParamInfo<ProviderConfig> &info) {
  return info.param.label;
}

void PrintTo(const Param &p, std::ostream *os) {
  *os << "provider \"" << p.provider.text << "\", mask \"" << p.mask.caps << "\"";
}

void PrintTo(const ProviderConfig &p, std::ostream *os) { *os << "provider \"" << p.text << "\""; }

namespace {

std::string env_or(const char *name, const std::string &fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

} // namespace

bool opaque_addresses() {
  static const bool on = env_or("RFAAS_TEST_OPAQUE_ADDRESSES", "0") == "1";
  return on;
}

const std::string &server_ip() {
  static const std::string ip =
      opaque_addresses() ? std::string() : env_or("RFAAS_TEST_SERVER_IP", "127.0.0.1");
  return ip;
}

const std::string &client_ip() {
  static const std::string ip = env_or("RFAAS_TEST_CLIENT_IP", server_ip());
  return ip;
}

const std::string &server_device() {
  static const std::string dev = env_or("RFAAS_TEST_SERVER_DEVICE", "");
  return dev;
}

const std::string &client_device() {
  static const std::string dev = env_or("RFAAS_TEST_CLIENT_DEVICE", "");
  return dev;
}

DeviceConfig device_for(const ProviderConfig &p, Side side) {
  DeviceConfig d;
  d.name = "conformance-" + p.label;
  d.provider = p.provider;
  d.endpoint = p.endpoint;
  d.ip_address = side == Side::Server ? server_ip() : client_ip();
  d.domain = side == Side::Server ? server_device() : client_device();
  d.port = 0;
  return d;
}

// ---- expectations ----------------------------------------------------------------------

namespace {

struct ExpectationRow {
  const char *provider;
  uint32_t absent;
  uint32_t unchecked;
  const char *why;
};

// What each provider lacks natively (DESIGN §3, measured with libfabric 1.17).
// A capability test that finds a capability off that is neither listed here nor
// masked FAILS instead of skipping. wait_fd and inline depend on the backend's
// choices (fi_cq_sread vs fd, inject sizes), so their native value is not pinned;
// masked, they must be off everywhere.
// Links share one endpoint only where the provider table says so (tcp;ofi_rxm
// on 1.17); connected endpoints never do.
const ExpectationRow kExpectations[] = {
    {"tcp", CapAtomics | CapVirtualAddressing | CapSharedEndpoint, CapWaitFd | CapInline,
     "tcp offers no FI_ATOMIC and registers with offsets"},
    // RxM implements FI_ATOMIC itself (over messages) when asked for it; plain
    // fi_info output does not list it because it is not in the default caps.
    {"tcp;ofi_rxm", CapVirtualAddressing, CapWaitFd | CapInline,
     "tcp;ofi_rxm registers with offsets; its atomics are emulated by RxM"},
    {"sockets", CapVirtualAddressing | CapSharedEndpoint, CapWaitFd | CapInline,
     "sockets registers with offsets"},
    {"shm", CapSharedEndpoint, CapWaitFd | CapInline,
     "shm has everything, with virtual addresses; one dead peer could wedge a shared endpoint"},
    {"verbs", CapSharedEndpoint, CapWaitFd | CapInline, "verbs has everything"},
    // Remote CQ data is off while RxM receives on a shared context, which
    // rdmalib asks for (FI_OFI_RXM_USE_SRX; quirk srq_write_imm_reported_as_recv).
    {"verbs;ofi_rxm", CapSharedEndpoint | CapRemoteCqData, CapWaitFd | CapInline,
     "verbs;ofi_rxm has everything but a shared endpoint (not run here) and remote CQ data "
     "(verbs misreports a write-with-immediate on RxM's shared receive context)"},
};

// Capabilities a backend's provider cannot turn off: a Fabric opened with them
// masked fails, and the test is skipped naming the reason (only when opening
// really fails, so a provider that learns to do it is tested again).
struct UnmaskableRow {
  const char *backend;
  const char *provider;
  uint32_t bits;
  const char *why;
};

const UnmaskableRow kUnmaskable[] = {
    {"libfabric", "verbs", CapVirtualAddressing,
     "libfabric's verbs provider requires FI_MR_VIRT_ADDR: it cannot register memory with "
     "offsets, so virtual_addressing cannot be masked off"},
    {"libfabric", "verbs;ofi_rxm", CapVirtualAddressing,
     "libfabric's verbs provider (under ofi_rxm) requires FI_MR_VIRT_ADDR: it cannot register "
     "memory with offsets, so virtual_addressing cannot be masked off"},
};

/// The reason `mask` cannot be honoured by `provider` on this backend, or empty.
std::string unmaskable_reason(const std::string &provider, CapabilityMask mask) {
  for (const auto &row : kUnmaskable) {
    if (provider == row.provider && std::string(Fabric::backend_name()) == row.backend &&
        (mask.disabled & row.bits) != 0)
      return row.why;
  }
  return "";
}

} // namespace

Expectation expected_for(const std::string &provider) {
  Expectation e;
  if (const char *env = std::getenv("RFAAS_TEST_EXPECT_UNSUPPORTED")) {
    e.known = true;
    e.absent = CapabilityMask::parse(env).disabled;
    e.unchecked = CapWaitFd | CapInline | CapSharedEndpoint;
    e.why = std::string("RFAAS_TEST_EXPECT_UNSUPPORTED=") + env;
    return e;
  }
  for (const auto &row : kExpectations) {
    if (provider == row.provider) {
      e.known = true;
      e.absent = row.absent;
      e.unchecked = row.unchecked;
      e.why = row.why;
    }
  }
  return e;
}

bool expected_off(const Expectation &e, CapabilityMask mask, CapabilityBit bit) {
  return mask.disables(bit) || (e.absent & bit) != 0;
}

bool capability_value(const Capabilities &c, CapabilityBit bit) {
  switch (bit) {
  case CapRemoteCqData:
    return c.remote_cq_data;
  case CapAtomics:
    return c.atomics;
  case CapVirtualAddressing:
    return c.virtual_addressing;
  case CapWaitFd:
    return c.wait_fd;
  case CapInline:
    return c.max_inline > 0;
  case CapSharedEndpoint:
    return c.shared_endpoint;
  }
  return false;
}

const char *capability_name(CapabilityBit bit) {
  switch (bit) {
  case CapRemoteCqData:
    return "remote_cq_data";
  case CapAtomics:
    return "atomics";
  case CapVirtualAddressing:
    return "virtual_addressing";
  case CapWaitFd:
    return "wait_fd";
  case CapInline:
    return "inline";
  case CapSharedEndpoint:
    return "shared_endpoint";
  }
  return "?";
}

const char *kind_name(ErrorKind k) {
  switch (k) {
  case ErrorKind::Config:
    return "Config";
  case ErrorKind::NotFound:
    return "NotFound";
  case ErrorKind::Unsupported:
    return "Unsupported";
  case ErrorKind::Timeout:
    return "Timeout";
  case ErrorKind::Refused:
    return "Refused";
  case ErrorKind::Closed:
    return "Closed";
  case ErrorKind::Backend:
    return "Backend";
  }
  return "?";
}

const char *op_name(OpKind k) {
  switch (k) {
  case OpKind::Send:
    return "Send";
  case OpKind::Recv:
    return "Recv";
  case OpKind::Write:
    return "Write";
  case OpKind::WriteImm:
    return "WriteImm";
  case OpKind::Read:
    return "Read";
  case OpKind::FetchAdd:
    return "FetchAdd";
  case OpKind::CompareSwap:
    return "CompareSwap";
  case OpKind::RemoteWriteImm:
    return "RemoteWriteImm";
  case OpKind::PeerClosed:
    return "PeerClosed";
  }
  return "?";
}

// ---- two-thread driving -------------------------------------------------------------

void Event::post() {
  std::lock_guard<std::mutex> g(m_);
  ++count_;
  cv_.notify_all();
}

bool Event::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> g(m_);
  if (!cv_.wait_for(g, timeout, [&] { return count_ > 0; }))
    return false;
  --count_;
  return true;
}

namespace {

void guarded(const char *side, const std::function<void()> &fn) {
  try {
    fn();
  } catch (const Error &e) {
    ADD_FAILURE() << side << " side threw rdmalib::Error (kind " << kind_name(e.kind())
                  << ", backend code " << e.backend_code() << "): " << e.what();
  } catch (const std::exception &e) {
    ADD_FAILURE() << side << " side threw: " << e.what();
  }
}

} // namespace

void run_both(const std::function<void()> &server, const std::function<void()> &client) {
  auto fut = std::async(std::launch::async, [&] { guarded("server", server); });
  guarded("client", client);
  // Every step inside has a 10 s deadline; this bound only catches a backend
  // call that ignores its deadline, which must not hang the whole suite.
  if (fut.wait_for(std::chrono::seconds(50)) != std::future_status::ready) {
    std::fprintf(stderr, "conformance: the server thread is stuck for 50 s past the client; "
                         "a backend call ignored its deadline. Aborting.\n");
    std::fflush(stderr);
    std::_Exit(98);
  }
  fut.get();
}

std::optional<Completion> wait_one(Operations ops, Queue q, const std::string &what,
                                   int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const char *qn = q == Queue::Send ? "send" : "recv";
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      ADD_FAILURE() << what << ": no completion on the " << qn << " queue within " << timeout_ms
                    << " ms (last_error: " << ops.last_error() << ")";
      return std::nullopt;
    }
    Completion c;
    WaitResult r = ops.wait(q, &c, 1, static_cast<int>(left.count()));
    if (r.count == 1)
      return c;
    if (r.count > 1) {
      ADD_FAILURE() << what << ": wait(max=1) reported " << r.count << " completions";
      return c;
    }
    if (r.status == Status::Timeout || r.status == Status::Ok)
      continue; // the deadline check above ends this
    ADD_FAILURE() << what << ": wait on the " << qn << " queue returned " << to_string(r.status)
                  << " (last_error: " << ops.last_error() << ")";
    return std::nullopt;
  }
}

bool expect_completion(Operations ops, Queue q, OpKind kind, uint64_t context,
                       const std::string &what) {
  auto c = wait_one(ops, q, what);
  if (!c)
    return false;
  bool ok = true;
  if (c->status != Status::Ok) {
    ADD_FAILURE() << what << ": completion status " << to_string(c->status)
                  << " (last_error: " << ops.last_error() << ")";
    ok = false;
  }
  if (c->kind != kind) {
    ADD_FAILURE() << what << ": completion kind " << op_name(c->kind) << ", expected "
                  << op_name(kind);
    ok = false;
  }
  if (c->context != context) {
    ADD_FAILURE() << what << ": completion context " << c->context << ", expected " << context;
    ok = false;
  }
  return ok;
}

void expect_quiet(Operations ops, Queue q, int ms, const std::string &what) {
  Completion c;
  WaitResult r = ops.wait(q, &c, 1, ms);
  EXPECT_EQ(r.count, 0u) << what << ": unexpected completion kind " << op_name(c.kind)
                         << " context " << c.context << " status " << to_string(c.status);
}

Link make_link(Fabric &server_fabric, Fabric &client_fabric, const ConnectionOptions &options) {
  Link k;
  k.listener = std::make_unique<Listener>(server_fabric, Address{server_ip(), 0});
  auto request = pattern_vector(48, 11);
  auto reply = pattern_vector(40, 12);
  Address where = k.listener->address();
  run_both(
      [&] {
        k.server = k.listener->accept(reply.data(), reply.size(), kDeadline, options);
        EXPECT_EQ(k.server.peer_private_data(), request) << "client private data at the server";
      },
      [&] {
        k.client = Connection::connect(client_fabric, where, request.data(), request.size(),
                                       kDeadline, options);
        EXPECT_EQ(k.client.peer_private_data(), reply) << "server private data at the client";
      });
  if (!k.server.is_open() || !k.client.is_open())
    ADD_FAILURE() << "link to " << where.to_string() << " not established";
  return k;
}

void attach_if_needed(Connection &c, const MemoryRegion &r) {
  if (c.fabric().capabilities().endpoint_bound_memory)
    c.attach(r);
}

// ---- fixtures -----------------------------------------------------------------------

void FabricPair::open_fabrics(const ProviderConfig &p, const std::string &mask_caps) {
  mask_ = CapabilityMask::parse(mask_caps);
  try {
    server_fabric_ = std::make_unique<Fabric>(device_for(p, Side::Server), mask_);
    client_fabric_ = std::make_unique<Fabric>(device_for(p, Side::Client), mask_);
  } catch (const Error &e) {
    std::string why = unmaskable_reason(p.provider, mask_);
    if (!why.empty())
      GTEST_SKIP() << "mask \"" << mask_caps << "\" on " << Fabric::backend_name() << " \""
                   << p.text << "\": " << why << " (" << kind_name(e.kind()) << ": " << e.what()
                   << ")";
    FAIL() << "cannot open provider configuration \"" << p.text << "\" with mask \"" << mask_caps
           << "\" (every configuration in RFAAS_TEST_PROVIDERS must be available here): "
           << kind_name(e.kind()) << ": " << e.what();
  }
  expect_ = expected_for(server_fabric_->provider());
  if (!expect_.known)
    FAIL() << "no capability expectations for provider \"" << server_fabric_->provider()
           << "\": add it to kExpectations in tests/rdmalib/conformance/common.cpp, or set "
              "RFAAS_TEST_EXPECT_UNSUPPORTED to the capabilities it lacks";
  testing::Test::RecordProperty("capabilities", caps().describe());
}

// ---- processes ------------------------------------------------------------------------

ChildProcess::ChildProcess(const std::vector<std::string> &argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  std::vector<char *> args;
  for (const auto &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) {
    int err = errno;
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(err));
  }
  if (pid_ == 0) {
    // Only async-signal-safe calls until execv: the parent has threads.
    // Die with the thread that forked us (tests fork from the main thread), so
    // a crashed test never leaves an orphan holding a port.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(126);
    dup2(fds[1], STDOUT_FILENO);
    // Hold none of the parent's sockets: a peer must not keep our endpoints alive.
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
      for (int fd = 3; fd < 4096; ++fd)
        close(fd);
    execv(args[0], args.data());
    static const char msg[] = "conformance: execv of the peer binary failed\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    _exit(127);
  }
  close(fds[1]);
  out_fd_ = fds[0];
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    int st;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  if (out_fd_ >= 0)
    close(out_fd_);
}

std::optional<std::string> ChildProcess::read_line(const std::string &prefix,
                                                   std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    auto nl = buffer_.find('\n');
    while (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (line.rfind(prefix, 0) == 0)
        return line.substr(prefix.size());
      std::fprintf(stderr, "[peer %d stdout] %s\n", int(pid_), line.c_str());
      nl = buffer_.find('\n');
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      return std::nullopt;
    pollfd p{out_fd_, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return std::nullopt;
    char chunk[4096];
    ssize_t n = read(out_fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return std::nullopt; // EOF: the peer exited
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

bool ChildProcess::running() {
  if (reaped_)
    return false;
  int st;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    status_ = st;
    return false;
  }
  return true;
}

void ChildProcess::kill(int sig) {
  if (!reaped_)
    ::kill(pid_, sig);
}

std::optional<int> ChildProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (reaped_)
    return status_;
  // A pidfd becomes readable when the child exits: wait on it rather than poll
  // waitpid in a loop.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  auto deadline = Clock::now() + timeout;
  while (running()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      break;
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      poll(&p, 1, static_cast<int>(left.count()));
    } else {
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(5)));
    }
  }
  if (pidfd >= 0)
    close(pidfd);
  if (reaped_)
    return status_;
  return std::nullopt;
}

std::string ChildProcess::describe_status(std::optional<int> status) {
  if (!status)
    return "still running";
  if (WIFEXITED(*status))
    return "exited with " + std::to_string(WEXITSTATUS(*status));
  if (WIFSIGNALED(*status))
    return "killed by signal " + std::to_string(WTERMSIG(*status));
  return "stopped";
}

std::string peer_binary() { return RFAAS_PEER_BINARY; }

std::vector<std::pair<uintptr_t, size_t>> shm_mappings(const std::string &name) {
  std::vector<std::pair<uintptr_t, size_t>> out;
  std::ifstream maps("/proc/self/maps");
  const std::string dir = " /dev/shm/";
  std::string line;
  while (std::getline(maps, line)) {
    size_t at = line.find(dir);
    if (at == std::string::npos ||
        (!name.empty() && line.compare(at + dir.size(), std::string::npos, name) != 0))
      continue;
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && hi > lo)
      out.emplace_back(lo, hi - lo);
  }
  return out;
}

} // namespace conformance
