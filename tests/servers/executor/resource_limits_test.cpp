// The executor's memory limit and thread pinning, checked in child processes
// (a limit cannot be lifted once set).
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "executor/resource_limits.hpp"

using rfaas::executor_process::limit_memory;
using rfaas::executor_process::pin_thread;

namespace {
/// Run `body` in a child; its exit code.
template <class F> int in_child(F body) {
  pid_t pid = fork();
  if (pid == 0)
    _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}
} // namespace

TEST(ResourceLimits, MemoryLimitStopsLargeAllocations) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the limit is not applied under AddressSanitizer";
#endif
  int rc = in_child([] {
    std::string why;
    if (!limit_memory(64, why))
      return 1;
    // 128 MiB of private writable memory must be refused...
    void *big = std::malloc(size_t(128) << 20);
    if (big != nullptr)
      return 2;
    // ...while small allocations still work.
    void *small = std::malloc(size_t(1) << 20);
    if (small == nullptr)
      return 3;
    std::memset(small, 1, size_t(1) << 20);
    return 0;
  });
  EXPECT_EQ(rc, 0);
}

TEST(ResourceLimits, ZeroMeansNoLimit) {
  std::string why;
  EXPECT_TRUE(limit_memory(0, why));
}

TEST(ResourceLimits, PinsTheCallingThread) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int cpu = -1;
  for (int c = CPU_SETSIZE - 1; c >= 0; --c)
    if (CPU_ISSET(c, &allowed))
      cpu = c;
  ASSERT_GE(cpu, 0);
  std::thread t([&] {
    std::string why;
    ASSERT_TRUE(pin_thread(cpu, why)) << why;
    cpu_set_t now;
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    EXPECT_EQ(CPU_COUNT(&now), 1);
    EXPECT_TRUE(CPU_ISSET(cpu, &now));
    EXPECT_EQ(sched_getcpu(), cpu);
  });
  t.join();
}

TEST(ResourceLimits, PinningToABadCpuSaysWhy) {
  std::string why;
  EXPECT_FALSE(pin_thread(-1, why));
  EXPECT_NE(why.find("out of range"), std::string::npos) << why;
  EXPECT_FALSE(pin_thread(CPU_SETSIZE + 1, why));
}
