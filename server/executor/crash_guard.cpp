#include "executor/crash_guard.hpp"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

namespace rfaas::executor_process {

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

// Per-thread guard state. Thread-locals of the executable use the
// initial-exec TLS model: reading them in a signal handler is safe.
thread_local sigjmp_buf t_jump;
thread_local volatile sig_atomic_t t_active = 0;
thread_local void *t_altstack = nullptr;
thread_local const void *t_fault = nullptr;

// The handler each signal had before ours: network libraries install their
// own (libfabric's shm provider unlinks the process's shared-memory regions
// and re-raises). A crash outside a guarded call still reaches it; a crash
// inside one must not, or the executor would lose its regions while it still
// answers the client and the manager. Zero-initialised: SIG_DFL, "none".
struct sigaction g_previous[NSIG];
volatile sig_atomic_t g_forwarded = 0;
std::mutex g_install_mutex;

void die_with(int sig) {
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  raise(sig);
}

void on_fatal(int sig, siginfo_t *info, void *) {
  if (t_active) {
    t_active = 0;
    t_fault = info ? info->si_addr : nullptr;
    siglongjmp(t_jump, sig);
  }
  // Not inside a guarded call: give the previous handler its turn once (it
  // may re-raise, which lands here again), then die with the signal as if no
  // handler existed.
  if (!g_forwarded && g_previous[sig].sa_handler != SIG_DFL) {
    g_forwarded = 1;
    sigaction(sig, &g_previous[sig], nullptr);
    raise(sig);
    return;
  }
  die_with(sig);
}

bool is_ours(const struct sigaction &sa) {
  return (sa.sa_flags & SA_SIGINFO) && sa.sa_sigaction == on_fatal;
}

[[noreturn]] void throw_sigaction_error(int sig) {
  throw std::runtime_error(std::string("crash guard: sigaction(") + strsignal(sig) +
                           "): " + std::strerror(errno));
}

} // namespace

int CrashGuard::install() {
  std::lock_guard<std::mutex> g(g_install_mutex);
  int displaced = 0;
  for (int sig : kSignals) {
    struct sigaction cur;
    if (sigaction(sig, nullptr, &cur) != 0)
      throw_sigaction_error(sig);
    if (is_ours(cur))
      continue;
    if (cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN) {
      g_previous[sig] = cur;
      ++displaced;
    }
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal;
    sigemptyset(&sa.sa_mask);
    // SA_NODEFER: the signal is not blocked while the handler runs, so
    // leaving it with siglongjmp (without a saved mask) leaves the thread's
    // mask as it was.
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    if (sigaction(sig, &sa, nullptr) != 0)
      throw_sigaction_error(sig);
  }
  return displaced;
}

void CrashGuard::prepare_thread() {
  if (t_altstack)
    return;
  // Large enough for the handler even with a deep libc frame on top.
  size_t size = 64 * 1024;
  if (size < static_cast<size_t>(SIGSTKSZ))
    size = SIGSTKSZ;
  // Keep a stack someone else installed if the handler fits in it (it only
  // records the signal and jumps back): AddressSanitizer gives every thread
  // one and unmaps it at thread exit, and replacing it made ASan unmap ours.
  const size_t enough = 16 * 1024;
  stack_t cur;
  if (sigaltstack(nullptr, &cur) == 0 && !(cur.ss_flags & SS_DISABLE) && cur.ss_size >= enough) {
    t_altstack = cur.ss_sp;
    return;
  }
  void *mem = std::malloc(size);
  if (!mem)
    throw std::runtime_error("crash guard: cannot allocate the alternate signal stack");
  stack_t st;
  st.ss_sp = mem;
  st.ss_size = size;
  st.ss_flags = 0;
  if (sigaltstack(&st, nullptr) != 0) {
    std::free(mem);
    throw std::runtime_error(std::string("crash guard: sigaltstack: ") + std::strerror(errno));
  }
  // Lives as long as the thread; a worker thread ends with its process.
  t_altstack = mem;
}

int CrashGuard::run(GuardedFunction f, const void *in, uint32_t size, void *out, uint32_t capacity,
                    uint32_t &result) noexcept {
  int sig = sigsetjmp(t_jump, 0);
  if (sig != 0)
    return sig;
  t_active = 1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  uint32_t r = f(in, size, out, capacity);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_active = 0;
  result = r;
  return 0;
}

const void *CrashGuard::fault_address() noexcept { return t_fault; }

} // namespace rfaas::executor_process
