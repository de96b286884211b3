// The zygote's pool bookkeeping (server/executor/executor_pool.hpp): the
// back-off of its refill while members keep failing, and the start deadline
// that lets a stuck member go. Times are given, not slept on; the stuck member
// is a real child process, which must be ended.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>

#include "executor/executor_pool.hpp"

namespace {

using rfaas::executor_process::ExecutorPool;
using Clock = ExecutorPool::Clock;
using std::chrono::milliseconds;

TEST(ExecutorPool, FirstLossRefillsAtOnceThenBacksOffDoublingUpToTheMaximum) {
  ExecutorPool pool(1);
  const auto t0 = Clock::now();
  EXPECT_EQ(pool.failed(t0), 1u);
  EXPECT_EQ(pool.backoff(), milliseconds(0));
  EXPECT_TRUE(pool.wants_member(t0));

  auto t = t0;
  milliseconds expected = ExecutorPool::kBackoffStep;
  for (unsigned n = 2; n < 12; ++n) {
    t += milliseconds(1);
    EXPECT_EQ(pool.failed(t), n);
    EXPECT_EQ(pool.backoff(), expected) << "loss " << n;
    // Not before the back-off is over, then at once.
    EXPECT_FALSE(pool.wants_member(t + expected - milliseconds(1))) << "loss " << n;
    EXPECT_TRUE(pool.wants_member(t + expected)) << "loss " << n;
    EXPECT_LE(pool.timeout_ms(t, 60000), expected.count() + 1);
    expected = std::min<milliseconds>(expected * 2, ExecutorPool::kBackoffMax);
  }
  EXPECT_EQ(pool.backoff(), ExecutorPool::kBackoffMax);
}

TEST(ExecutorPool, AnAllocationTakenEndsTheBurst) {
  ExecutorPool pool(1);
  const auto t0 = Clock::now();
  pool.failed(t0);
  pool.failed(t0);
  pool.failed(t0);
  EXPECT_EQ(pool.succeeded(), 3u);
  EXPECT_EQ(pool.failures(), 0u);
  EXPECT_EQ(pool.failed(t0 + milliseconds(1)), 1u);
  EXPECT_EQ(pool.backoff(), milliseconds(0));
}

TEST(ExecutorPool, ALossLongAfterThePreviousStartsANewBurst) {
  ExecutorPool pool(1);
  const auto t0 = Clock::now();
  pool.failed(t0);
  EXPECT_EQ(pool.failed(t0 + milliseconds(10)), 2u);
  EXPECT_EQ(pool.failed(t0 + milliseconds(10) + ExecutorPool::kBurstGap), 1u);
  EXPECT_EQ(pool.backoff(), milliseconds(0));
}

TEST(ExecutorPool, AMemberThatNeverReportsInIsLetGoAtTheStartDeadline) {
  const milliseconds deadline(200);
  ExecutorPool pool(1, deadline);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Stuck: never reports in.
    for (;;)
      pause();
  }
  close(sv[1]);
  // Whatever fails below, the child does not outlive the test.
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reaper{child};
  pool.add(child, sv[0]);
  const auto t0 = Clock::now();
  EXPECT_FALSE(pool.wants_member(t0)); // full, its member still starting
  EXPECT_LE(pool.timeout_ms(t0, 60000), deadline.count() + 1);
  EXPECT_TRUE(pool.discard_late(t0).empty());
  auto late = pool.discard_late(t0 + deadline + milliseconds(1));
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0], child);
  EXPECT_TRUE(pool.discard_late(t0 + deadline * 2).empty()); // once
  // Let go with SIGTERM (it was still starting): it ends within 5 s, long
  // before the pool would kill it. Reaped as let go.
  pid_t ended = 0;
  for (int i = 0; i < 500 && ended == 0; ++i) {
    ended = waitpid(child, nullptr, WNOHANG);
    if (ended == 0)
      usleep(10000);
  }
  ASSERT_EQ(ended, child) << "the stuck member was not ended";
  reaper.pid = -1;
  EXPECT_EQ(pool.reaped(child), ExecutorPool::Reaped::Dropped);
  EXPECT_TRUE(pool.wants_member(t0 + deadline * 2));
}

TEST(ExecutorPool, NoStartDeadlineNoDiscard) {
  ExecutorPool pool(1);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  close(sv[1]);
  // A pid that is never signalled: discard_late must not look at it.
  pool.add(getpid(), sv[0]);
  EXPECT_TRUE(pool.discard_late(Clock::now() + std::chrono::hours(1)).empty());
}

} // namespace
