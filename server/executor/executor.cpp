// run_executor(): the executor process's setup (signal handlers, memory limit,
// fabric, the allocation request from the launch spec), the start of its
// worker threads, and the main thread's loop: accounting to the manager,
// termination, and the exit code.
#include "executor/executor.hpp"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <rdmalib/rdmalib.hpp>
#include <spdlog/spdlog.h>

#include "executor/crash_guard.hpp"
#include "executor/process.hpp"
#include "executor/resource_limits.hpp"
#include "executor/seccomp_filter.hpp"

namespace rfaas::executor_process {

volatile sig_atomic_t g_terminate = 0;

namespace {
/// Set once the main thread's loop runs, which ends the process within about
/// 500 ms of SIGTERM. Before that, SIGTERM only sets g_terminate: the setup's
/// connections watch it (ConnectionOptions::cancel) and give up at their next
/// look, between two provider calls, within about 100 ms; the loop then ends
/// the process. Ending the process from the handler could end it inside a
/// provider call that holds a lock in another process's shared memory (shm
/// takes the receiver's region lock to deliver a message): the manager's
/// listener, mid-handshake, would then spin for ever, and every client that
/// connects after it (docs/BACKEND-BUGS.md, "a killed peer can hang
/// progress").
volatile sig_atomic_t g_serving = 0;

void on_term(int) {
  g_terminate = 1;
  if (!g_serving) {
    static const char line[] = "executor: SIGTERM during setup; ending\n";
    ssize_t ignored = ::write(2, line, sizeof line - 1);
    (void)ignored;
  }
}

bool is_on_term(const struct sigaction &sa) {
  return !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == on_term;
}

sigset_t termination_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

/// Freeze every worker that runs the client's function; true when none is
/// left in the network library (WorkerGate).
bool all_out_of_network(Shared &shared) noexcept {
  bool out = true;
  for (uint32_t i = 0; i < shared.request.cores; ++i)
    out = shared.gates[i].freeze() && out;
  return out;
}

/// The provider's handler for SIGTERM, when one went in front of on_term
/// (libfabric's shm installs it at the process's first endpoint, on
/// whichever thread opens it): let it unlink the process's shared-memory
/// regions before an exit that closes no endpoint. It hands the signal back to
/// on_term when done. Only the calling thread takes the signal (raise()).
void run_provider_termination_cleanup() noexcept {
  struct sigaction cur;
  if (sigaction(SIGTERM, nullptr, &cur) != 0 || is_on_term(cur) || cur.sa_handler == SIG_DFL ||
      cur.sa_handler == SIG_IGN)
    return;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  raise(SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}
} // namespace

void hold_termination_signals() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    sigset_t set = termination_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    // A blocked signal is taken here, never by a handler: whatever a
    // provider installed in front of on_term since does not run.
    try {
      std::thread([set] {
        for (;;) {
          siginfo_t si;
          if (sigwaitinfo(&set, &si) > 0)
            on_term(si.si_signo);
        }
      }).detach();
    } catch (const std::exception &) {
      // No thread: take the signals through on_term as before, exposed to a
      // provider's handler in front of it.
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    }
  });
}

rdmalib::ConnectionOptions accounting_link_options() {
  rdmalib::ConnectionOptions opts;
  opts.refused_retries = kRefusedRetries;
  // The main thread polls it between its other duties (SIGTERM among them).
  opts.check_peer_before_poll = true;
  opts.cancel = &g_terminate;
  return opts;
}

rdmalib::ConnectionOptions worker_link_options(uint32_t input_slots) {
  rdmalib::ConnectionOptions opts;
  // One receive per input slot plus room for control messages (Shutdown,
  // CodeHeader) and the sends of results and control answers.
  opts.send_depth = input_slots + 8;
  opts.recv_depth = input_slots + 8;
  opts.refused_retries = kRefusedRetries;
  opts.cancel = &g_terminate;
  return opts;
}

bool Shared::seal(Clock::time_point deadline, std::string &error) {
  {
    std::unique_lock<std::mutex> g(m);
    if (!cv.wait_until(g, deadline, [&] { return links_pending == 0 || stop.load(); })) {
      error = "the links were not up in time to seal the sandbox";
      return false;
    }
  }
  SeccompOptions o;
  o.allow_inet_stream = fabric.capabilities().sockets_after_setup;
  const auto t0 = Clock::now();
  const bool compiled_ahead = filter_ahead && filter_ahead->fits(o);
  if (!install_seccomp(o, error, filter_ahead))
    return false;
  spdlog::debug("executor {:x}: seccomp filter installed in {} us ({}){}", spec.allocation_id,
                std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count(),
                compiled_ahead ? "compiled ahead" : "compiled now",
                o.allow_inet_stream ? " (TCP sockets stay allowed: the fabric opens them late)"
                                    : "");
  return true;
}

namespace {
/// Worker 0 published the library's outcome: every worker is past set-up.
bool library_loaded(Shared &s) {
  std::lock_guard<std::mutex> g(s.m);
  return s.library_done;
}
} // namespace

int run_executor(const server::LaunchSpec &spec, rdmalib::Fabric *opened,
                 const SeccompProgram *filter, AccountingLink *pooled_link) noexcept {
  const Clock::time_point start = Clock::now();
  try {
    hold_termination_signals();
    std::string why;
    if (!limit_memory(spec.memory_mib, why))
      spdlog::warn("executor {:x}: {}", spec.allocation_id, why);
    CrashGuard::install();

    spdlog::debug("executor {:x}: {} core(s), {} MiB, provider {}, manager {}:{}",
                  spec.allocation_id, spec.cores.size(), spec.memory_mib, spec.device.provider,
                  spec.manager_host, spec.manager_port);
    std::unique_ptr<rdmalib::Fabric> own;
    if (!opened)
      own = std::make_unique<rdmalib::Fabric>(spec.device);
    rdmalib::Fabric &fabric = opened ? *opened : *own;
    spdlog::debug(
        "executor {:x}: fabric open after {} ms", spec.allocation_id,
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
    Shared shared(spec, fabric);
    shared.filter_ahead = filter;
    proto::WireResult r =
        proto::decode(spec.request.data(), spec.request.size(), shared.request, shared.results);
    if (!r)
      throw std::runtime_error("allocation request: " + proto::describe(r));
    if (shared.request.cores != spec.cores.size())
      throw std::runtime_error("launch spec: core count does not match the request");
    shared.counters.reset(new WorkerCounters[shared.request.cores]);
    shared.gates.reset(new WorkerGate[shared.request.cores]);
    shared.links_pending = shared.request.cores + 1;

    // The workers' links to the client are on the critical path of the cold
    // start, the accounting link is not. Set up side by side, the two
    // compete for the fabric's endpoint and for a core, and the manager has
    // to accept the accounting link while it answers the client: that
    // delayed the workers' links by milliseconds on a loaded host. So the
    // accounting link connects once the library is loaded and the main loop
    // next wakes up (within 100 ms: past the first invocation), or at the end
    // of a shorter allocation; accounting is sent once a second, so nothing
    // is lost by the wait. Where the seccomp filter goes in, it connects at
    // once, beside the workers' links: the filter refuses the sockets that
    // connecting may need and must be in before the library loads, and
    // there a later start would put the link's set-up on the critical path
    // instead (docs/runtime.md, "Cold start"). A pooled executor connected
    // its link while it waited, and the manager bound it to this allocation
    // before the executor was woken: it only waits for the record, at once.
    std::vector<std::unique_ptr<Worker>> workers;
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < shared.request.cores; ++i) {
      workers.emplace_back(new Worker(shared, i));
      threads.emplace_back([w = workers.back().get()] { w->run(); });
    }
    if (pooled_link && !opened)
      pooled_link = nullptr; // not on the fabric the allocation uses
    AccountingLink own_link(shared);
    AccountingLink &link = pooled_link ? *pooled_link : own_link;
    if (pooled_link)
      pooled_link->adopt(shared);
    // Terminated already: nothing is owed to the manager yet.
    bool manager_gone = g_terminate != 0;
    bool linked = false;
    auto connect_link = [&] {
      bool up = false;
      try {
        if (!pooled_link)
          link.connect();
        // Up: the seccomp filter may go in (Shared::seal) while the record
        // is still on its way.
        up = true;
        // This endpoint may be the process's first on some providers: keep
        // the crash guard in front of whatever handler the network installed.
        CrashGuard::install();
        shared.link_settled();
        link.await_record();
        linked = true;
      } catch (const std::exception &e) {
        // Serving the client matters more than accounting: keep going.
        if (!g_terminate)
          spdlog::error("executor {:x}: no accounting link to the manager: {}", spec.allocation_id,
                        e.what());
        manager_gone = true;
      }
      if (!up)
        shared.link_settled();
    };
    if ((spec.seccomp || pooled_link) && !manager_gone)
      connect_link();
    else
      shared.link_settled();
    auto last_flush = Clock::now();
    Clock::time_point terminate_at{};
    bool said_waiting = false;
    g_serving = 1;
    for (;;) {
      {
        std::unique_lock<std::mutex> g(shared.m);
        shared.cv.wait_for(g, milliseconds(100),
                           [&] { return shared.finished == shared.request.cores; });
        if (shared.finished == shared.request.cores)
          break;
      }
      if (!linked && !manager_gone && !g_terminate && library_loaded(shared))
        connect_link();
      if (g_terminate && terminate_at == Clock::time_point{}) {
        shared.end_all();
        terminate_at = Clock::now();
      }
      // A worker stuck inside a long function cannot see the stop request:
      // report what we have and end without it rather than wait for SIGKILL,
      // but only once no worker is inside the network library (WorkerGate:
      // a worker still saying goodbye to its client on a loaded host holds
      // the client's locks for moments). Those finish on their own.
      const bool grace_over =
          terminate_at != Clock::time_point{} && Clock::now() - terminate_at > milliseconds(500);
      const bool may_end = grace_over && all_out_of_network(shared);
      if (grace_over && !may_end && !said_waiting) {
        said_waiting = true;
        spdlog::info("executor {:x}: a worker is still in the network library 500 ms after "
                     "SIGTERM; ending once it is out, not inside it",
                     spec.allocation_id);
      }
      if (may_end) {
        if (linked && !manager_gone)
          link.flush(start);
        spdlog::warn("executor {:x}: terminated while a function was running", spec.allocation_id);
        std::fflush(nullptr);
        // No endpoint is closed on this way out: the provider's own cleanup
        // removes their shared-memory regions, as it would have at SIGTERM.
        run_provider_termination_cleanup();
        _exit(ExitTerminated);
      }
      if (linked && !manager_gone && link.manager_left()) {
        manager_gone = true;
        shared.end_all();
      }
      if (linked && !manager_gone && Clock::now() - last_flush > std::chrono::seconds(1)) {
        if (!link.flush(start))
          manager_gone = true;
        last_flush = Clock::now();
      }
    }
    for (auto &t : threads)
      t.join();
    // An allocation that ended before its accounting link was made still
    // reports (not one that was terminated: its manager may be gone).
    if (!linked && !manager_gone && !g_terminate)
      connect_link();
    int sig = shared.crash_signal.load();
    const bool remote_write = shared.remote_write.load();
    if (linked && !manager_gone) {
      link.flush(start);
      link.say_goodbye(sig            ? proto::ErrorCode::FunctionCrashed
                       : remote_write ? proto::ErrorCode::BadRequest
                                      : proto::ErrorCode::Ok);
    }
    if (remote_write)
      return ExitRemoteWriteFault;
    if (sig) {
      spdlog::error("executor {:x}: a function crashed with signal {} ({}); executor ends",
                    spec.allocation_id, sig, strsignal(sig));
      return ExitFunctionCrashed;
    }
    if (g_terminate)
      return ExitTerminated;
    if (shared.client_lost.load())
      return ExitClientLost;
    return shared.setup_failed.load() ? ExitSetupFailed : ExitOk;
  } catch (const std::exception &e) {
    spdlog::error("executor {:x}: {}", spec.allocation_id, e.what());
    return ExitSetupFailed;
  }
}

} // namespace rfaas::executor_process
