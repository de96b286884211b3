#include "executor/crash_guard.hpp"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

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

const char *strsignal_short(int sig) { return sig == SIGBUS ? "SIGBUS" : "SIGSEGV"; }

// CrashGuard::RemoteWriteArea: [begin, end) and the exit code, read by the
// handler (lock-free atomics only). An entry is free while its end is 0.
struct RemoteArea {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<int> exit_code{0};
  std::atomic<uint32_t> faults{0};
  std::atomic<uintptr_t> last_fault{0};
};
constexpr int kRemoteAreas = 64;
RemoteArea g_remote[kRemoteAreas];
std::mutex g_remote_mutex;

// Async-signal-safe formatting for the one line the handler writes.
char *put_text(char *p, const char *text) {
  while (*text)
    *p++ = *text++;
  return p;
}
char *put_number(char *p, uintptr_t v, unsigned base) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  if (base == 16)
    p = put_text(p, "0x");
  while (n)
    *p++ = digits[--n];
  return p;
}

/// A fatal signal outside a guarded call at an address that peers write
/// into (CrashGuard::RemoteWriteArea): open the guard page and return, so
/// that the provider's copy completes; true when it did. When the page
/// cannot be opened, report it and end the process.
bool absorb_remote_write(int sig, const siginfo_t *info) {
  if (sig != SIGSEGV || !info)
    return false;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (RemoteArea &a : g_remote) {
    const uintptr_t begin = a.begin.load(std::memory_order_acquire);
    const uintptr_t end = a.end.load(std::memory_order_acquire);
    if (end == 0 || addr < begin || addr >= end)
      continue;
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    void *at = reinterpret_cast<void *>(addr & ~(page - 1));
    if (::mprotect(at, page, PROT_READ | PROT_WRITE) == 0) {
      a.last_fault.store(addr - begin, std::memory_order_relaxed);
      a.faults.fetch_add(1, std::memory_order_release);
      return true;
    }
    char line[320];
    char *p = put_text(line, "executor: killed by a fault in the network provider: a remote write "
                             "of the client aimed outside its input slots (");
    p = put_text(p, strsignal_short(sig));
    p = put_text(p, " at byte ");
    p = put_number(p, addr - begin, 10);
    p = put_text(p, " of the input slots' registered region, ");
    p = put_number(p, addr, 16);
    p = put_text(p, ", a guard page that could not be opened); the allocation ends\n");
    ssize_t ignored = ::write(2, line, static_cast<size_t>(p - line));
    (void)ignored;
    ::_exit(a.exit_code.load(std::memory_order_relaxed));
  }
  return false;
}

void on_fatal(int sig, siginfo_t *info, void *) {
  if (t_active) {
    t_active = 0;
    t_fault = info ? info->si_addr : nullptr;
    siglongjmp(t_jump, sig);
  }
  if (absorb_remote_write(sig, info))
    return;
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

CrashGuard::RemoteWriteArea::RemoteWriteArea(const void *begin, size_t length,
                                             int exit_code) noexcept {
  if (!begin || length == 0)
    return;
  std::lock_guard<std::mutex> g(g_remote_mutex);
  for (int i = 0; i < kRemoteAreas; ++i) {
    RemoteArea &a = g_remote[i];
    if (a.end.load(std::memory_order_relaxed) != 0)
      continue;
    const auto b = reinterpret_cast<uintptr_t>(begin);
    a.exit_code.store(exit_code, std::memory_order_relaxed);
    a.faults.store(0, std::memory_order_relaxed);
    a.last_fault.store(0, std::memory_order_relaxed);
    a.begin.store(b, std::memory_order_relaxed);
    a.end.store(b + length, std::memory_order_release);
    index_ = i;
    return;
  }
}

CrashGuard::RemoteWriteArea::~RemoteWriteArea() { release(); }

uint32_t CrashGuard::RemoteWriteArea::faults() const noexcept {
  return index_ < 0 ? 0 : g_remote[index_].faults.load(std::memory_order_acquire);
}

size_t CrashGuard::RemoteWriteArea::last_fault_offset() const noexcept {
  return index_ < 0 ? 0 : g_remote[index_].last_fault.load(std::memory_order_relaxed);
}

CrashGuard::RemoteWriteArea::RemoteWriteArea(RemoteWriteArea &&o) noexcept : index_(o.index_) {
  o.index_ = -1;
}

CrashGuard::RemoteWriteArea &CrashGuard::RemoteWriteArea::operator=(RemoteWriteArea &&o) noexcept {
  if (this != &o) {
    release();
    index_ = o.index_;
    o.index_ = -1;
  }
  return *this;
}

void CrashGuard::RemoteWriteArea::release() noexcept {
  if (index_ < 0)
    return;
  std::lock_guard<std::mutex> g(g_remote_mutex);
  g_remote[index_].end.store(0, std::memory_order_release);
  index_ = -1;
}

} // namespace rfaas::executor_process
