// Stale shared-memory regions: only unmapped files named like regions, owned
// by this user and old enough, are removed. Runs in a private directory on
// tmpfs, so regions of other tests running at the same time are never at risk.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "common/reclaim.hpp"

namespace {

class ReclaimTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = "/dev/shm/rdmalib-reclaim-test-" + std::to_string(getpid());
    if (mkdir(dir_.c_str(), 0700) != 0)
      GTEST_SKIP() << "cannot create " << dir_ << " (no /dev/shm here?)";
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    if (std::system(cmd.c_str()) != 0)
      ADD_FAILURE() << "could not remove " << dir_;
  }
  std::string make(const std::string &name, size_t size = 4096) {
    std::string path = dir_ + "/" + name;
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0) << path;
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    close(fd);
    return path;
  }
  bool exists(const std::string &path) { return access(path.c_str(), F_OK) == 0; }
  std::string dir_;
};

} // namespace

TEST_F(ReclaimTest, RemovesOnlyUnmappedRegions) {
  std::string stale_listener = make("rdmalib-127.0.0.1-4000", 8192);
  std::string stale_endpoint = make("4194305:0:7");
  std::string mapped = make("rdmalib-127.0.0.1-4001");
  std::string other = make("not-a-region");
  std::string almost = make("12:34");

  int fd = open(mapped.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void *p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(p, MAP_FAILED);

  rdmalib::Fabric::ReclaimReport r =
      rdmalib::detail::reclaim_unmapped_regions(dir_, std::chrono::seconds(0));
  EXPECT_FALSE(exists(stale_listener));
  EXPECT_FALSE(exists(stale_endpoint));
  EXPECT_TRUE(exists(mapped)) << "a region some process maps was removed";
  EXPECT_TRUE(exists(other));
  EXPECT_TRUE(exists(almost));
  ASSERT_EQ(r.names.size(), 2u);
  EXPECT_NE(std::find(r.names.begin(), r.names.end(), stale_listener), r.names.end());
  EXPECT_EQ(r.bytes, 8192u + 4096u);

  // Once nothing maps it any more, it goes too.
  munmap(p, 4096);
  r = rdmalib::detail::reclaim_unmapped_regions(dir_, std::chrono::seconds(0));
  EXPECT_FALSE(exists(mapped));
  EXPECT_EQ(r.names.size(), 1u);
}

TEST_F(ReclaimTest, YoungFilesAreLeftAlone) {
  // A region between its creation and its mmap is not mapped yet.
  std::string young = make("rdmalib-127.0.0.1-4002");
  rdmalib::Fabric::ReclaimReport r =
      rdmalib::detail::reclaim_unmapped_regions(dir_, std::chrono::seconds(30));
  EXPECT_TRUE(exists(young));
  EXPECT_TRUE(r.names.empty());
}

TEST_F(ReclaimTest, MissingDirectoryIsNotAnError) {
  rdmalib::Fabric::ReclaimReport r =
      rdmalib::detail::reclaim_unmapped_regions(dir_ + "/nope", std::chrono::seconds(0));
  EXPECT_TRUE(r.names.empty());
  EXPECT_EQ(r.bytes, 0u);
}
