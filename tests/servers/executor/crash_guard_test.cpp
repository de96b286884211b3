// The crash guard turns fatal signals in a function into a return value, on
// any thread, repeatedly, and costs nothing on the normal path.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "executor/crash_guard.hpp"

using rfaas::executor_process::CrashGuard;

namespace {

uint32_t echo(const void *in, uint32_t size, void *out, uint32_t) {
  std::memcpy(out, in, size);
  return size;
}
// Stores into the unmapped first page but not to address 0: under UBSan a null
// store is reported and exits instead of raising SIGSEGV.
volatile int *unmapped_address() {
  volatile int *volatile p = reinterpret_cast<volatile int *>(std::uintptr_t{8});
  return p;
}
uint32_t segv(const void *, uint32_t, void *, uint32_t) {
  *unmapped_address() = 1;
  return 0;
}
// A real integer-division trap; UBSan would report it and exit first.
__attribute__((no_sanitize("undefined"))) uint32_t divide(const void *in, uint32_t, void *,
                                                          uint32_t) {
  volatile int zero = *static_cast<const int *>(in);
  volatile int one = 1;
  return static_cast<uint32_t>(one / zero);
}
uint32_t aborts(const void *, uint32_t, void *, uint32_t) { std::abort(); }
uint32_t raises_bus(const void *, uint32_t, void *, uint32_t) {
  std::raise(SIGBUS);
  return 0;
}
uint32_t raises_ill(const void *, uint32_t, void *, uint32_t) {
  std::raise(SIGILL);
  return 0;
}
// Recursion far deeper than the 8 MiB stack (the limit is volatile so the
// compiler cannot see it is never reached): only an alternate signal stack
// lets the handler run.
volatile uint32_t g_depth_limit = 1u << 30;
uint32_t overflow(const void *in, uint32_t size, void *out, uint32_t cap) {
  volatile char pad[4096];
  pad[0] = static_cast<char>(size);
  if (size >= g_depth_limit)
    return 0;
  return overflow(in, size + 1, out, cap) + pad[0];
}

class CrashGuardTest : public ::testing::Test {
protected:
  void SetUp() override {
    CrashGuard::install();
    CrashGuard::prepare_thread();
  }
};

} // namespace

TEST_F(CrashGuardTest, NormalCallReturnsItsResult) {
  char in[4] = {1, 2, 3, 4}, out[4] = {};
  uint32_t r = 0;
  EXPECT_EQ(CrashGuard::run(echo, in, 4, out, 4, r), 0);
  EXPECT_EQ(r, 4u);
  EXPECT_EQ(std::memcmp(in, out, 4), 0);
}

TEST_F(CrashGuardTest, CatchesEachFatalSignal) {
  uint32_t r = 0;
  int zero = 0;
  EXPECT_EQ(CrashGuard::run(segv, nullptr, 0, nullptr, 0, r), SIGSEGV);
  EXPECT_EQ(CrashGuard::run(divide, &zero, 4, nullptr, 0, r), SIGFPE);
  EXPECT_EQ(CrashGuard::run(aborts, nullptr, 0, nullptr, 0, r), SIGABRT);
  EXPECT_EQ(CrashGuard::run(raises_bus, nullptr, 0, nullptr, 0, r), SIGBUS);
  EXPECT_EQ(CrashGuard::run(raises_ill, nullptr, 0, nullptr, 0, r), SIGILL);
}

TEST_F(CrashGuardTest, CatchesStackOverflow) {
  uint32_t r = 0;
  EXPECT_EQ(CrashGuard::run(overflow, nullptr, 0, nullptr, 0, r), SIGSEGV);
}

TEST_F(CrashGuardTest, RepeatedCrashesAndCallsKeepWorking) {
  char in[4] = {9, 9, 9, 9}, out[4] = {};
  for (int i = 0; i < 100; ++i) {
    uint32_t r = 0;
    ASSERT_EQ(CrashGuard::run(segv, nullptr, 0, nullptr, 0, r), SIGSEGV);
    ASSERT_EQ(CrashGuard::run(echo, in, 4, out, 4, r), 0);
    ASSERT_EQ(r, 4u);
  }
}

TEST_F(CrashGuardTest, WorksOnOtherThreads) {
  int sig = 0;
  std::thread t([&] {
    CrashGuard::prepare_thread();
    uint32_t r = 0;
    sig = CrashGuard::run(segv, nullptr, 0, nullptr, 0, r);
  });
  t.join();
  EXPECT_EQ(sig, SIGSEGV);
}

// A handler some library installed after the guard (libfabric's shm provider
// does so when it opens its first endpoint, to unlink its shared-memory files
// and re-raise).
volatile sig_atomic_t g_foreign_calls = 0;
void counting_handler(int) { g_foreign_calls = g_foreign_calls + 1; }
void announcing_handler(int sig) {
  static const char msg[] = "foreign handler ran\n";
  if (write(2, msg, sizeof msg - 1) < 0) {
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

TEST_F(CrashGuardTest, GuardedCrashDoesNotReachALaterLibraryHandler) {
  struct sigaction foreign;
  std::memset(&foreign, 0, sizeof foreign);
  foreign.sa_handler = counting_handler;
  sigemptyset(&foreign.sa_mask);
  ASSERT_EQ(sigaction(SIGBUS, &foreign, nullptr), 0);
  // Installing again puts the guard back in front, and says so.
  EXPECT_EQ(CrashGuard::install(), 1);
  EXPECT_EQ(CrashGuard::install(), 0);
  g_foreign_calls = 0;
  uint32_t r = 0;
  EXPECT_EQ(CrashGuard::run(raises_bus, nullptr, 0, nullptr, 0, r), SIGBUS);
  EXPECT_EQ(g_foreign_calls, 0) << "the library's handler ran for a crash the guard caught";
}

// Under AddressSanitizer its own SEGV handler was there first: the guard
// forwards an unguarded crash to it, and it reports and exits non-zero.
bool died_of_segv(int status) {
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV)
    return true;
#if defined(__SANITIZE_ADDRESS__)
  return WIFEXITED(status) && WEXITSTATUS(status) != 0;
#else
  return false;
#endif
}

TEST(CrashGuardDeath, SignalOutsideAGuardedCallStillKills) {
  CrashGuard::install();
  EXPECT_EXIT({ *unmapped_address() = 1; }, died_of_segv, "");
}

TEST(CrashGuardDeath, SignalOutsideAGuardedCallReachesTheLibraryHandler) {
  EXPECT_EXIT(
      {
        std::signal(SIGBUS, announcing_handler);
        CrashGuard::install();
        std::raise(SIGBUS);
      },
      ::testing::KilledBySignal(SIGBUS), "foreign handler ran");
}

// A fault outside a guarded call inside memory peers write into (a network
// provider carrying out a remote write into a guard page) is absorbed: the
// page is opened, the write completes, and the owner sees the fault and
// where it was. A library handler the guard went in front of (one exits with
// 1) does not run.
TEST(CrashGuardDeath, FaultInARemoteWriteAreaIsAbsorbedAndCounted) {
  EXPECT_EXIT(
      {
        std::signal(SIGSEGV, announcing_handler);
        CrashGuard::install();
        const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        void *p =
            mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
          std::_Exit(90);
        char *base = static_cast<char *>(p);
        mprotect(base + page, page, PROT_NONE); // the guard between two slots
        CrashGuard::RemoteWriteArea area(base, 3 * page, 6);
        if (!area.watched() || area.faults() != 0)
          std::_Exit(91);
        *reinterpret_cast<volatile char *>(base + page + 16) = 7;
        if (area.faults() != 1 || area.last_fault_offset() != page + 16 || base[page + 16] != 7)
          std::_Exit(92);
        std::_Exit(42);
      },
      ::testing::ExitedWithCode(42), "");
}

// Once the area is gone, the same fault is an ordinary crash again.
TEST(CrashGuardDeath, FaultOutsideRemoteWriteAreasStillKills) {
  CrashGuard::install();
  EXPECT_EXIT(
      {
        const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        void *p = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        { CrashGuard::RemoteWriteArea area(p, page, 6); }
        *static_cast<volatile char *>(p) = 1;
      },
      died_of_segv, "");
}
