// The loop thread: requests from many threads reach the registry one at a
// time through the readerwriterqueue; nothing is double-booked.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "resource_manager/loop.hpp"

#include <sqlite3.h>
#include <unistd.h>

using namespace rfaas::rm;

namespace {

struct LoopFixture : ::testing::Test {
  std::atomic<uint64_t> now{1'000'000};
  Store store{":memory:"};
  Registry reg{store, [this] { return now.load(); }, RegistryOptions{}};
  Loop loop{reg, std::chrono::milliseconds(5)};
  void SetUp() override { loop.start(); }
};

} // namespace

TEST_F(LoopFixture, SixteenThreadsRaceForTheLastCores) {
  NodeSecret s = generate_secret();
  ASSERT_TRUE(
      loop.call([&](Registry &r) { return r.register_node("n", "h:1", 16, 1 << 20, s); }).ok());
  ASSERT_TRUE(loop.call([](Registry &r) {
                    return r.grant({"big", 12, 0, 0, 1, kAnonymousOwner, ""});
                  })
                  .ok());

  constexpr int kThreads = 16;
  std::atomic<int> go{0};
  std::vector<Result<Grant>> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      go.fetch_add(1);
      while (go.load() < kThreads) {
      }
      results[i] = loop.call([i](Registry &r) {
        return r.grant({"client-" + std::to_string(i), 1, 0, 0, 1, kAnonymousOwner, ""});
      });
    });
  for (auto &t : threads)
    t.join();

  std::set<uint32_t> cores;
  int granted = 0;
  for (const auto &r : results) {
    if (!r.ok()) {
      EXPECT_EQ(r.outcome, Outcome::Unavailable) << r.message;
      continue;
    }
    ++granted;
    for (uint32_t c : r.value.lease.parts.at(0).cores)
      EXPECT_TRUE(cores.insert(c).second) << "core " << c << " granted twice";
  }
  EXPECT_EQ(granted, 4);
  for (uint32_t c : cores)
    EXPECT_GE(c, 12u); // the first lease holds 0..11
  EXPECT_EQ(loop.call([](Registry &r) { return r.counters().refused; }), 12u);
}

TEST_F(LoopFixture, ChurnFromSixteenThreadsNeverDoubleBooks) {
  for (const char *n : {"a", "b", "c"}) {
    NodeSecret s = generate_secret();
    ASSERT_TRUE(
        loop.call([&](Registry &r) { return r.register_node(n, "h:1", 8, 1 << 20, s); }).ok());
  }
  std::atomic<bool> violation{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      std::vector<std::pair<uint64_t, LeaseSecret>> mine;
      for (int i = 0; i < 100; ++i) {
        uint32_t cores = 1 + static_cast<uint32_t>((t + i) % 5);
        auto g = loop.call([&](Registry &r) {
          return r.grant({"c" + std::to_string(t), cores, 0, 0, 2, kAnonymousOwner, ""});
        });
        if (g.ok())
          mine.emplace_back(g.value.lease.id, g.value.secret);
        if (mine.size() > 2 || (!g.ok() && !mine.empty())) {
          auto [id, secret] = mine.front();
          mine.erase(mine.begin());
          loop.call([&, id = id, secret = secret](Registry &r) {
            return r.release(id, "c" + std::to_string(t), secret);
          });
        }
        // Checked on the loop thread: every held core belongs to one lease,
        // and the nodes' counts agree with the leases'.
        bool ok = loop.call([](Registry &r) {
          std::set<std::pair<std::string, uint32_t>> held;
          uint32_t lease_cores = 0;
          for (const Lease &l : r.active_leases())
            for (const LeasePart &p : l.parts)
              for (uint32_t c : p.cores) {
                ++lease_cores;
                if (!held.insert({p.node, c}).second)
                  return false;
              }
          uint32_t node_cores = 0;
          for (const NodeView &v : r.nodes())
            node_cores += v.used_cores;
          return node_cores == lease_cores;
        });
        if (!ok)
          violation = true;
      }
    });
  for (auto &t : threads)
    t.join();
  EXPECT_FALSE(violation.load());
  EXPECT_GT(loop.tasks_run(), 16u * 100u);
}

TEST_F(LoopFixture, TicksExpireLeasesOnTheLoop) {
  NodeSecret s = generate_secret();
  ASSERT_TRUE(loop.call([&](Registry &r) { return r.register_node("n", "h:1", 2, 2048, s); }).ok());
  auto g = loop.call([](Registry &r) {
    return r.grant({"x", 2, 0, 1000, 1, kAnonymousOwner, ""});
  });
  ASSERT_TRUE(g.ok());
  now += 1000;
  // The loop ticks every 5 ms; wait (bounded) for it to notice.
  for (int i = 0; i < 400; ++i) {
    if (loop.call([](Registry &r) { return r.active_count(); }) == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(loop.call([](Registry &r) { return r.counters().expired; }), 1u);
}

TEST_F(LoopFixture, ExceptionsReachTheCallerAndStopRefusesNewWork) {
  EXPECT_THROW(loop.call([](Registry &) -> int { throw std::runtime_error("boom"); }),
               std::runtime_error);
  EXPECT_EQ(loop.call([](Registry &) { return 7; }), 7);
  loop.stop();
  EXPECT_THROW(loop.call([](Registry &) { return 1; }), LoopStopped);
}

namespace {

/// A fabric side whose pass holds the loop until released (bounded), as a
/// peer that stalls the loop would.
struct StallingDriver final : LoopDriver {
  std::atomic<bool> stall{false};
  std::atomic<bool> stalled{false};
  bool poll(Registry &) override {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (stall.load() && std::chrono::steady_clock::now() < until) {
      stalled = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
  void deliver(const std::vector<LeaseEnded> &, Registry &) override {}
  // Looked at every millisecond, as a fabric without wait descriptors.
  int prepare_wait(std::vector<int> &) override { return 1; }
  void stop(Registry &) override {}
};

/// A fabric side with nothing to wake the loop: only a task can.
struct SilentDriver : LoopDriver {
  std::atomic<int> sleeps{0};
  bool poll(Registry &) override { return false; }
  void deliver(const std::vector<LeaseEnded> &, Registry &) override {}
  int prepare_wait(std::vector<int> &) override {
    ++sleeps;
    return -1;
  }
  void stop(Registry &) override {}
};

} // namespace

// An idle loop sleeps until its next periodic check (a minute here); a task
// submitted meanwhile wakes it (its eventfd), so the call is answered
// instead of failing with LoopBusy after the call timeout.
TEST(LoopWake, ATaskWakesASleepingLoop) {
  Store store{":memory:"};
  Registry reg{store, [] { return uint64_t{1'000'000}; }, RegistryOptions{}};
  Loop loop{reg, std::chrono::minutes(1)};
  SilentDriver driver;
  loop.attach(&driver);
  loop.set_call_timeout(std::chrono::seconds(20));
  loop.start();
  for (int i = 0; i < 20; ++i) {
    const int asleep = driver.sleeps.load();
    EXPECT_NO_THROW(loop.call([](Registry &) { return 1; }));
    // The pass after the task ends in a sleep again before the next call.
    while (driver.sleeps.load() == asleep)
      std::this_thread::yield();
  }
  loop.stop();
}

// A REST handler's wait on the loop is bounded: past the call timeout the
// request fails with LoopBusy (503) and its task is withdrawn, never run.
TEST(LoopCallTimeout, AStalledLoopAnswersBusyAndTheTaskNeverRuns) {
  Store store{":memory:"};
  Registry reg{store, [] { return uint64_t{1'000'000}; }, RegistryOptions{}};
  Loop loop{reg, std::chrono::milliseconds(5)};
  StallingDriver driver;
  loop.attach(&driver);
  loop.set_call_timeout(std::chrono::milliseconds(100));
  loop.start();
  EXPECT_EQ(loop.call([](Registry &) { return 1; }), 1);
  driver.stall = true;
  while (!driver.stalled.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<bool> ran{false};
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(loop.call([&](Registry &) {
    ran = true;
    return 2;
  }),
               LoopBusy);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, std::chrono::milliseconds(100));
  EXPECT_LT(waited, std::chrono::seconds(2));
  driver.stall = false;
  // The loop takes work again; the withdrawn task did not run.
  EXPECT_EQ(loop.call([](Registry &) { return 3; }), 3);
  EXPECT_FALSE(ran.load());
  loop.stop();
}

namespace {

/// A fabric side that stores one accounting report in its first pass, as
/// FabricServer does (a batch per pass), and then has nothing to do.
struct ReportingDriver final : SilentDriver {
  bool reported = false;
  bool poll(Registry &r) override {
    r.store().begin_batch();
    if (!reported) {
      reported = true;
      r.store().put_accounting(AccountingRecord{7, "n1", "alice", 10, 1, 2, 3, 64, true, 0, ""});
    }
    r.store().commit_batch();
    return false;
  }
};

} // namespace

// An accounting report may wait for its commit, also while the loop
// sleeps, but no longer than Store::kDeferAtMostMs: the sleep ends at its
// deadline (the periodic check is a minute away here), and another
// connection (what a crash would leave) then sees it.
TEST(LoopWake, WaitingWritesAreCommittedAtTheirDeadlineWhileTheLoopSleeps) {
  char dir[] = "/tmp/rfaas-rm-loop-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/rm.sqlite";
  {
    Store store{path};
    Registry reg{store, [] { return uint64_t{1'000'000}; }, RegistryOptions{}};
    Loop loop{reg, std::chrono::minutes(1)};
    ReportingDriver driver;
    loop.attach(&driver);
    loop.start();
    while (driver.sleeps.load() == 0)
      std::this_thread::yield();
    auto committed = [&] {
      sqlite3 *raw = nullptr;
      int n = -1;
      if (sqlite3_open(path.c_str(), &raw) == SQLITE_OK) {
        sqlite3_stmt *st = nullptr;
        if (sqlite3_prepare_v2(raw, "SELECT count(*) FROM accounting", -1, &st, nullptr) ==
                SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
          n = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
      }
      sqlite3_close(raw);
      return n;
    };
    // Bounded far above the deadline (a loaded machine), far below the tick.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (committed() != 1 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(committed(), 1) << "the loop slept past the commit's deadline";
    loop.stop();
  }
  std::filesystem::remove_all(dir);
}

namespace {

/// A fabric side as a client that leases back to back makes it: a pass
/// finds work every few passes, so the busy-poll window never closes.
struct BusyDriver final : SilentDriver {
  std::atomic<uint64_t> passes{0};
  std::atomic<int> work_left{-1}; // passes that still find work; -1: for ever
  bool poll(Registry &) override {
    if (++passes % 4 != 0)
      return false;
    if (work_left.load() < 0)
      return true;
    if (work_left.load() == 0)
      return false;
    --work_left;
    return true;
  }
};

} // namespace

// fabric.busy_poll_us: while a client keeps the window open (the widest
// the configuration allows), the REST API's tasks still run between passes
// and the periodic check still falls due; neither waits for the window to
// close, which it never does here.
TEST(LoopBusyPoll, TasksAndTicksRunWhileTheWindowStaysOpen) {
  std::atomic<uint64_t> now{1'000'000};
  Store store{":memory:"};
  Registry reg{store, [&] { return now.load(); }, RegistryOptions{}};
  Loop loop{reg, std::chrono::milliseconds(5)};
  BusyDriver driver;
  loop.attach(&driver);
  loop.set_busy_poll(std::chrono::milliseconds(10));
  // A task that waits past this fails the call with LoopBusy.
  loop.set_call_timeout(std::chrono::seconds(5));
  loop.start();
  NodeSecret s = generate_secret();
  ASSERT_TRUE(loop.call([&](Registry &r) { return r.register_node("n", "h:1", 2, 2048, s); }).ok());
  ASSERT_TRUE(loop.call([](Registry &r) {
                    return r.grant({"x", 1, 0, 1000, 1, kAnonymousOwner, ""});
                  })
                  .ok());
  auto slowest = std::chrono::steady_clock::duration::zero();
  for (int i = 0; i < 200; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(loop.call([i](Registry &) { return i; }), i);
    slowest = std::max(slowest, std::chrono::steady_clock::now() - t0);
  }
  // Milliseconds on a loaded host; the window would hold a task for ever.
  EXPECT_LT(slowest, std::chrono::milliseconds(500));
  now += 1000;
  bool expired = false;
  for (int i = 0; i < 400 && !expired; ++i) {
    expired = loop.call([](Registry &r) { return r.counters().expired; }) == 1;
    if (!expired)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(expired) << "no periodic check ran while the window stayed open";
  // Once the work stops the window closes and the loop sleeps.
  driver.work_left = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (driver.sleeps.load() == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GT(driver.sleeps.load(), 0) << "the loop never slept after the work stopped";
  loop.stop();
}
