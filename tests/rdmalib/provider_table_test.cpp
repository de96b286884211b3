// The libfabric backend's provider table: quirks resolve by release, every
// name and alias leads to one row, the variables it sets are bounded to the
// releases they were measured on.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include "libfabric/provider_table.hpp"

using namespace rdmalib::lf;

namespace {

const ProviderPolicy &row(const char *name) {
  const ProviderPolicy *p = find_provider(name);
  EXPECT_NE(p, nullptr) << name;
  return *p;
}

bool any(const Quirks &q) {
  return q.prefers_blocking_wait || q.cq_sread_ignores_timeout || q.atomic_operands_by_value ||
         q.cm_data_header_byte || q.in_process_peer_must_be_alive ||
         q.dead_peer_can_hang_progress || q.truncation_hangs_receiver ||
         q.connreq_names_vanished_peer || q.receiver_keeps_senders_mapped ||
         q.closed_names_stay_local || q.absent_region_enters_av ||
         q.send_to_absent_name_never_completes || q.contexts_survive_fork ||
         q.endpoint_open_is_slow || q.srq_write_imm_reported_as_recv;
}

TEST(ProviderTable, VersionRanges) {
  EXPECT_FALSE(Versions{}.contains(fi_release(1, 17))) << "an empty column applies to nothing";
  const Versions open = since(1, 9);
  EXPECT_FALSE(open.contains(fi_release(1, 8)));
  EXPECT_TRUE(open.contains(fi_release(1, 9)));
  EXPECT_TRUE(open.contains(fi_release(2, 3)));
  const Versions closed = releases(1, 9, 1, 20);
  EXPECT_TRUE(closed.contains(fi_release(1, 20)));
  EXPECT_FALSE(closed.contains(fi_release(1, 21)));
  EXPECT_FALSE(closed.contains(fi_release(2, 0)));
}

TEST(ProviderTable, QuirksResolveByProviderAndRelease) {
  const uint32_t v117 = fi_release(1, 17);
  Quirks shm = resolve_quirks(row("shm"), v117);
  EXPECT_TRUE(shm.truncation_hangs_receiver);
  EXPECT_TRUE(shm.cq_sread_ignores_timeout);
  EXPECT_TRUE(shm.in_process_peer_must_be_alive);
  EXPECT_TRUE(shm.dead_peer_can_hang_progress);
  EXPECT_TRUE(shm.connreq_names_vanished_peer);
  EXPECT_TRUE(shm.receiver_keeps_senders_mapped);
  EXPECT_TRUE(shm.closed_names_stay_local);
  EXPECT_TRUE(shm.absent_region_enters_av);
  EXPECT_TRUE(shm.send_to_absent_name_never_completes);
  EXPECT_TRUE(shm.endpoint_open_is_slow);
  EXPECT_FALSE(shm.prefers_blocking_wait);
  EXPECT_FALSE(shm.atomic_operands_by_value);

  Quirks verbs = resolve_quirks(row("verbs"), v117);
  EXPECT_TRUE(verbs.atomic_operands_by_value);
  EXPECT_TRUE(verbs.cm_data_header_byte);
  EXPECT_TRUE(verbs.contexts_survive_fork);
  EXPECT_FALSE(verbs.truncation_hangs_receiver);
  EXPECT_TRUE(resolve_quirks(row("verbs;ofi_rxm"), v117).contexts_survive_fork);
  EXPECT_FALSE(resolve_quirks(row("verbs;ofi_rxm"), v117).atomic_operands_by_value);
  EXPECT_TRUE(resolve_quirks(row("verbs;ofi_rxm"), v117).srq_write_imm_reported_as_recv);
  EXPECT_FALSE(resolve_quirks(row("tcp;ofi_rxm"), v117).srq_write_imm_reported_as_recv);

  EXPECT_TRUE(resolve_quirks(row("sockets"), v117).prefers_blocking_wait);
  EXPECT_FALSE(any(resolve_quirks(row("tcp"), v117)));
  EXPECT_FALSE(any(resolve_quirks(row("tcp;ofi_rxm"), v117)));
  // Links share one endpoint only where that was run, never where one dead
  // peer can wedge the endpoint.
  EXPECT_TRUE(resolve_quirks(row("tcp;ofi_rxm"), v117).links_share_endpoint);
  EXPECT_FALSE(resolve_quirks(row("tcp;ofi_rxm"), fi_release(1, 16)).links_share_endpoint);
  EXPECT_FALSE(shm.links_share_endpoint);
  EXPECT_FALSE(verbs.links_share_endpoint);
  // Before the oldest release rdmalib accepts, nothing is assumed.
  EXPECT_FALSE(any(resolve_quirks(row("shm"), fi_release(1, 8))));
}

TEST(ProviderTable, NamesAndAliasesAreUnique) {
  std::set<std::string> seen;
  for (const ProviderPolicy &p : provider_table()) {
    EXPECT_TRUE(seen.insert(p.name).second) << p.name << " twice";
    EXPECT_EQ(find_provider(p.name), &p);
    for (const char *a : p.aliases) {
      EXPECT_TRUE(seen.insert(a).second) << "alias " << a << " twice";
      EXPECT_EQ(find_provider(a), &p) << a;
    }
  }
  EXPECT_EQ(find_provider("no-such-provider"), nullptr);
  EXPECT_EQ(&row("rxm"), &row("tcp;ofi_rxm"));
}

TEST(ProviderTable, RxmSharedReceiveContextFollowsTheVariable) {
  const char *was = std::getenv("FI_OFI_RXM_USE_SRX");
  const std::string saved = was ? was : "";
  for (const char *on : {"1", "yes", "TRUE", "On"}) {
    setenv("FI_OFI_RXM_USE_SRX", on, 1);
    EXPECT_TRUE(rxm_shared_receive_context()) << on;
  }
  for (const char *off : {"0", "no", "false", ""}) {
    setenv("FI_OFI_RXM_USE_SRX", off, 1);
    EXPECT_FALSE(rxm_shared_receive_context()) << off;
  }
  unsetenv("FI_OFI_RXM_USE_SRX");
  EXPECT_FALSE(rxm_shared_receive_context());
  if (was)
    setenv("FI_OFI_RXM_USE_SRX", saved.c_str(), 1);
}

TEST(ProviderTable, EnvironmentDefaultsAreBoundedAndExplained) {
  size_t n = 0;
  for (const ProviderPolicy &p : provider_table())
    for (const EnvDefault &e : p.env) {
      ++n;
      EXPECT_NE(std::string(e.name), "") << p.name;
      EXPECT_NE(e.versions.first, 0u) << e.name << " applies to no release";
      EXPECT_NE(e.versions.last, kOpenEnded)
          << e.name << ": a default is only changed for the releases it was measured on";
      EXPECT_GT(std::string(e.why).size(), 20u) << e.name << " needs its measurement";
    }
  EXPECT_GE(n, 2u);
}

} // namespace

// Quirks::absent_region_enters_av: what may enter an shm address vector.
TEST(ProviderTable, ShmRegionUsableOnlyForAnInitialisedRegion) {
  const std::string name = "rdmalib-unit-region-" + std::to_string(getpid());
  const std::string path = "/dev/shm/" + name;
  const std::string raw = "fi_shm://" + name;
  auto usable = [&] { return shm_region_usable(raw.c_str(), raw.size() + 1); };
  ::unlink(path.c_str());
  EXPECT_FALSE(usable()) << "absent";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  EXPECT_FALSE(usable()) << "empty";
  ASSERT_EQ(::ftruncate(fd, 1 << 16), 0);
  EXPECT_FALSE(usable()) << "no process named in the header";
  const int pid = getpid();
  ASSERT_EQ(::pwrite(fd, &pid, sizeof pid, 4), static_cast<ssize_t>(sizeof pid));
  EXPECT_TRUE(usable());
  ::close(fd);
  const std::string sub = "fi_shm://../shm/" + name;
  EXPECT_FALSE(shm_region_usable(sub.c_str(), sub.size() + 1)) << "not a plain file name";
  ::unlink(path.c_str());
  EXPECT_FALSE(usable()) << "removed";
}
