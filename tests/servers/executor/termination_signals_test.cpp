// An executor keeps its shared-memory regions when it is terminated while it
// connects: SIGTERM reaches only its own flag, never the handler libfabric's
// shm provider puts in front at the process's first endpoint (which unlinks
// every region of the process and lets it run on; a peer's listener then read
// a null mapping for the executor's pending connection request).
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <string>
#include <thread>

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdmalib/fabric.hpp>
#include <rdmalib/listener.hpp>

#include "executor/executor.hpp"
#include "executor/process.hpp"

namespace {

enum ChildResult {
  Held = 0,
  NoShm = 10,
  NoRegion = 11,
  ProviderHandlerAbsent = 12,
  FlagNotSet = 13,
  RegionUnlinked = 14,
};

/// In a child of its own: the mask and the signal thread outlive the test.
[[noreturn]] void terminated_while_endpoint_open() {
  rfaas::executor_process::hold_termination_signals();
  rdmalib::DeviceConfig device;
  device.name = "lo-shm";
  device.provider = "shm";
  device.ip_address = "127.0.0.1";
  device.endpoint = rdmalib::EndpointPreference::ReliableDatagram;
  std::string region;
  try {
    rdmalib::Fabric fabric(device);
    rdmalib::Listener listener(fabric, rdmalib::Address("127.0.0.1", 0));
    region = "/dev/shm/rdmalib-127.0.0.1-" + std::to_string(listener.address().port);
    if (::access(region.c_str(), F_OK) != 0)
      _exit(NoRegion);
    // The premise: the provider's handler went in front of the executor's.
    struct sigaction cur;
    if (sigaction(SIGTERM, nullptr, &cur) != 0 || !(cur.sa_flags & SA_SIGINFO))
      _exit(ProviderHandlerAbsent);
    ::kill(::getpid(), SIGTERM);
    for (int i = 0; i < 2000 && !rfaas::executor_process::g_terminate; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!rfaas::executor_process::g_terminate)
      _exit(FlagNotSet);
    if (::access(region.c_str(), F_OK) != 0)
      _exit(RegionUnlinked);
  } catch (const std::exception &) {
    _exit(region.empty() ? NoShm : NoRegion);
  }
  // The listener is closed by now: its region went with its endpoint.
  _exit(Held);
}

TEST(TerminationSignals, SigtermWhileAnShmEndpointIsOpenKeepsItsRegion) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0)
    terminated_while_endpoint_open();
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  switch (WEXITSTATUS(status)) {
  case NoShm:
    GTEST_SKIP() << "libfabric's shm provider cannot open here";
  case ProviderHandlerAbsent:
    GTEST_SKIP()
        << "the shm provider installed no SIGTERM handler of its own (not libfabric 1.17?)";
  case NoRegion:
    FAIL() << "the listener's region was not found in /dev/shm";
  case FlagNotSet:
    FAIL() << "SIGTERM did not set the executor's termination flag within 2 s";
  case RegionUnlinked:
    FAIL() << "SIGTERM unlinked the process's shared-memory region (shm's handler ran)";
  default:
    EXPECT_EQ(WEXITSTATUS(status), Held);
  }
}

} // namespace

// The main thread ends an executor whose worker outlives the termination
// grace only when no worker is inside the network library (WorkerGate): a
// process that ends inside a shm delivery leaves the receiver's region
// locked, and the client spun for ever in its own fi_cq_read.
TEST(WorkerGate, OnlyAWorkerInsideItsFunctionCanBeFrozen) {
  using rfaas::executor_process::WorkerGate;
  WorkerGate g;
  EXPECT_FALSE(g.freeze()) << "a worker in the network library was frozen";
  g.enter_function();
  g.leave_function();
  EXPECT_FALSE(g.freeze()) << "a worker back from its function was frozen";
  g.enter_function();
  EXPECT_TRUE(g.freeze());
  EXPECT_TRUE(g.freeze()) << "freezing twice";
  WorkerGate done;
  done.state.store(WorkerGate::Done);
  EXPECT_TRUE(done.freeze());
}

TEST(WorkerGate, AFrozenWorkerNeverReturnsFromItsFunction) {
#ifndef SYS_pause
  GTEST_SKIP() << "this architecture has no pause system call to recognise the parked worker by";
#else
  using rfaas::executor_process::WorkerGate;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    WorkerGate g;
    g.enter_function();
    if (!g.freeze())
      _exit(2);
    g.leave_function(); // must never return
    _exit(1);
  }
  // Parked: the child sits in pause(), the number /proc shows first.
  bool parked = false;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!parked && std::chrono::steady_clock::now() < deadline) {
    if (waitpid(child, &status, WNOHANG) == child)
      break;
    std::ifstream in("/proc/" + std::to_string(child) + "/syscall");
    long nr = -1;
    parked = (in >> nr) && nr == SYS_pause;
    if (!parked)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!parked && waitpid(child, &status, WNOHANG) == child) {
    ADD_FAILURE() << "the frozen worker returned from its function (exit "
                  << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << ")";
    return;
  }
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  EXPECT_TRUE(parked) << "the frozen worker did not park within 10 s";
#endif
}
