// The libfabric backend's shared pidfds (Quirks::dead_peer_can_hang_progress):
// links to one process share one descriptor, which says when the process
// ended, and the descriptor goes with its last holder.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libfabric/backend.hpp"

namespace lf = rdmalib::lf;

namespace {

bool open_fd(int fd) { return fcntl(fd, F_GETFD) != -1; }

TEST(SharedPidfd, LinksToOneProcessShareItUntilTheLastLetsGo) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  const int a = lf::acquire_pidfd(static_cast<uint32_t>(child));
  if (a < 0) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    GTEST_SKIP() << "pidfd_open is not available on this kernel";
  }
  const int b = lf::acquire_pidfd(static_cast<uint32_t>(child));
  EXPECT_EQ(a, b) << "a second link to the same process opened a second descriptor";
  EXPECT_FALSE(lf::pidfd_exited(a));

  kill(child, SIGKILL);
  // A zombie has ended too: nobody reaped it yet.
  for (int i = 0; i < 2000 && !lf::pidfd_exited(a); ++i)
    usleep(1000);
  EXPECT_TRUE(lf::pidfd_exited(a));
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(lf::pidfd_exited(a));

  lf::release_pidfd(a);
  EXPECT_TRUE(open_fd(b)) << "released while a link still held it";
  lf::release_pidfd(b);
  EXPECT_FALSE(open_fd(b)) << "the last holder's release left it open";
}

TEST(SharedPidfd, AnEndedProcessIsNotHandedOutAgain) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0)
    _exit(0);
  // Not reaped yet: the pidfd opens, and says the process ended.
  usleep(10000);
  const int a = lf::acquire_pidfd(static_cast<uint32_t>(child));
  if (a < 0) {
    waitpid(child, nullptr, 0);
    GTEST_SKIP() << "pidfd_open is not available on this kernel";
  }
  EXPECT_TRUE(lf::pidfd_exited(a));
  // A later link to that pid (a new process by then, or none) does not get
  // the ended process's descriptor.
  const int b = lf::acquire_pidfd(static_cast<uint32_t>(child));
  EXPECT_NE(a, b);
  waitpid(child, nullptr, 0);
  lf::release_pidfd(a);
  if (b >= 0)
    lf::release_pidfd(b);
}

} // namespace
