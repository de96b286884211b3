// googletest main of the conformance suite, plus a watchdog: every step inside
// a test has a 10 s deadline, so a test still running after kTestLimit means a
// backend call ignored its deadline. The watchdog then names the test and ends
// the process, instead of leaving ctest to kill an anonymous hang much later.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace {

constexpr std::chrono::seconds kTestLimit{60};

class Watchdog : public testing::EmptyTestEventListener {
public:
  Watchdog() : thread_([this] { run(); }) {}
  ~Watchdog() override {
    {
      std::lock_guard<std::mutex> g(m_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void OnTestStart(const testing::TestInfo &info) override {
    std::lock_guard<std::mutex> g(m_);
    name_ = std::string(info.test_suite_name()) + "." + info.name();
    deadline_ = std::chrono::steady_clock::now() + kTestLimit;
    armed_ = true;
    cv_.notify_all();
  }
  void OnTestEnd(const testing::TestInfo &) override {
    std::lock_guard<std::mutex> g(m_);
    armed_ = false;
    cv_.notify_all();
  }

private:
  void run() {
    std::unique_lock<std::mutex> g(m_);
    while (!quit_) {
      if (!armed_) {
        cv_.wait(g);
        continue;
      }
      if (cv_.wait_until(g, deadline_) == std::cv_status::timeout && armed_ &&
          std::chrono::steady_clock::now() >= deadline_) {
        std::fprintf(stderr,
                     "\nconformance watchdog: %s still running after %lld s although every "
                     "step has a 10 s deadline; a backend call ignored its deadline (hang). "
                     "Aborting the test process.\n",
                     name_.c_str(), static_cast<long long>(kTestLimit.count()));
        std::fflush(stderr);
        std::_Exit(99);
      }
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  bool armed_ = false, quit_ = false;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

} // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  // Owned by googletest once appended.
  testing::UnitTest::GetInstance()->listeners().Append(new Watchdog);
  return RUN_ALL_TESTS();
}
