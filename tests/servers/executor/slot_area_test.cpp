// The slot area: every slot ends at a page boundary followed by a
// guard page, so a function that writes past its capacity faults at the first
// byte too many (caught by the crash guard) instead of reaching other memory.
// No network: the guards are protected without a registration.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <vector>

#include "executor/crash_guard.hpp"
#include "executor/slot_area.hpp"

using rfaas::executor_process::CrashGuard;
using rfaas::executor_process::SlotArea;

namespace {

constexpr uint32_t kHeader = 32;

// AddressSanitizer checks a memset's whole range before writing: one that
// reaches beyond the guard page into memory it has poisoned is reported (and
// aborts) before the first store faults. Only overflows that end inside the
// guard run through memset there; the byte loop covers every size.
#if defined(__SANITIZE_ADDRESS__)
constexpr uint32_t kMemsetLimit = 4096;
#else
constexpr uint32_t kMemsetLimit = UINT32_MAX;
#endif

// Writes out_capacity + *in bytes, byte by byte, from the start of `out`.
uint32_t write_past(const void *in, uint32_t, void *out, uint32_t capacity) {
  uint32_t extra;
  std::memcpy(&extra, in, sizeof extra);
  volatile unsigned char *o = static_cast<unsigned char *>(out);
  for (uint64_t i = 0; i < uint64_t(capacity) + extra; ++i)
    o[i] = 0x5a;
  return capacity;
}
// The same with one memset (glibc picks the store order).
uint32_t memset_past(const void *in, uint32_t, void *out, uint32_t capacity) {
  uint32_t extra;
  std::memcpy(&extra, in, sizeof extra);
  std::memset(out, 0x5a, uint64_t(capacity) + extra);
  return capacity;
}
// Writes before the start of `out`.
uint32_t write_before(const void *in, uint32_t, void *out, uint32_t) {
  uint32_t back;
  std::memcpy(&back, in, sizeof back);
  volatile unsigned char *o = static_cast<unsigned char *>(out);
  for (uint64_t i = 1; i <= back; ++i)
    *(o - i) = 0x5a;
  return 0;
}
uint32_t fill(const void *, uint32_t, void *out, uint32_t capacity) {
  std::memset(out, 0x77, capacity);
  return capacity;
}
uint32_t segv_elsewhere(const void *, uint32_t, void *, uint32_t) {
  volatile int *volatile p = reinterpret_cast<volatile int *>(std::uintptr_t{8});
  *p = 1;
  return 0;
}

class SlotAreaTest : public ::testing::Test {
protected:
  void SetUp() override {
    CrashGuard::install();
    CrashGuard::prepare_thread();
  }
};

} // namespace

TEST_F(SlotAreaTest, OutputEndsWhereAGuardPageBegins) {
  const size_t page = SlotArea::page_size();
  for (uint32_t slot_size : {kHeader, kHeader + 8u, 1000u, uint32_t(page), uint32_t(page) + 8,
                             uint32_t(3 * page + 24)}) {
    SCOPED_TRACE(slot_size);
    SlotArea area(3, slot_size, kHeader);
    area.protect_guards();
    EXPECT_EQ(area.capacity(), slot_size - kHeader);
    for (uint32_t s = 0; s < 3; ++s) {
      auto end = reinterpret_cast<std::uintptr_t>(area.output(s)) + area.capacity();
      EXPECT_EQ(end % page, 0u);
      EXPECT_EQ(area.output(s), area.slot(s) + kHeader);
      // Result slots are 8-byte multiples (the client rounds them): outputs
      // are 8-byte aligned.
      if (slot_size % 8 == 0) {
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(area.output(s)) % 8, 0u);
      }
    }
  }
}

TEST_F(SlotAreaTest, WritingTheWholeCapacityIsFine) {
  SlotArea area(2, 1000, kHeader);
  area.protect_guards();
  uint32_t r = 0;
  for (uint32_t s = 0; s < 2; ++s) {
    ASSERT_EQ(CrashGuard::run(fill, nullptr, 0, area.output(s), area.capacity(), r), 0);
    EXPECT_EQ(r, area.capacity());
    std::memset(area.slot(s), 1, kHeader); // the header is writable too
  }
}

TEST_F(SlotAreaTest, WritesPastTheCapacityFaultAtTheFirstByteTooMany) {
  for (uint32_t slot_size : {1000u, 4096u + kHeader, 64u * 1024 + kHeader}) {
    SlotArea area(3, slot_size, kHeader);
    area.protect_guards();
    for (auto *f : {write_past, memset_past}) {
      for (uint32_t extra : {1u, 4096u, 1u << 20}) {
        if (f == memset_past && extra > kMemsetLimit)
          continue;
        for (uint32_t s = 0; s < 3; ++s) {
          SCOPED_TRACE(::testing::Message()
                       << "slot size " << slot_size << " extra " << extra << " slot " << s
                       << (f == memset_past ? " memset" : " loop"));
          // The neighbours' contents must survive.
          for (uint32_t o = 0; o < 3; ++o)
            std::memset(area.slot(o), static_cast<int>(o + 1), slot_size);
          uint32_t r = 0;
          ASSERT_EQ(CrashGuard::run(f, &extra, 4, area.output(s), area.capacity(), r), SIGSEGV);
          const void *at = CrashGuard::fault_address();
          EXPECT_TRUE(area.guard_hit(s, at)) << at;
          if (f == write_past) {
            EXPECT_EQ(at, area.output(s) + area.capacity());
          }
          for (uint32_t o = 0; o < 3; ++o) {
            if (o == s)
              continue;
            std::vector<char> want(slot_size, static_cast<char>(o + 1));
            EXPECT_EQ(std::memcmp(area.slot(o), want.data(), slot_size), 0) << "slot " << o;
          }
          // The thread goes on calling functions.
          ASSERT_EQ(CrashGuard::run(fill, nullptr, 0, area.output(s), area.capacity(), r), 0);
        }
      }
    }
  }
}

TEST_F(SlotAreaTest, WritesBeforeTheStartFaultInTheGuardBefore) {
  SlotArea area(2, 1000, kHeader);
  area.protect_guards();
  uint32_t back = 8192, r = 0;
  for (uint32_t s = 0; s < 2; ++s) {
    ASSERT_EQ(CrashGuard::run(write_before, &back, 4, area.output(s), area.capacity(), r), SIGSEGV);
    EXPECT_TRUE(area.guard_hit(s, CrashGuard::fault_address()));
  }
}

TEST_F(SlotAreaTest, OtherCrashesAreNotGuardHits) {
  SlotArea area(2, 1000, kHeader);
  area.protect_guards();
  uint32_t r = 0;
  ASSERT_EQ(CrashGuard::run(segv_elsewhere, nullptr, 0, area.output(0), area.capacity(), r),
            SIGSEGV);
  EXPECT_FALSE(area.guard_hit(0, CrashGuard::fault_address()));
  // A fault in slot 1's guard is not slot 0's.
  uint32_t extra = 1;
  ASSERT_EQ(CrashGuard::run(write_past, &extra, 4, area.output(1), area.capacity(), r), SIGSEGV);
  EXPECT_FALSE(area.guard_hit(0, CrashGuard::fault_address()));
  EXPECT_TRUE(area.guard_hit(1, CrashGuard::fault_address()));
  EXPECT_FALSE(area.guard_hit(0, nullptr));
  EXPECT_FALSE(area.guard_hit(2, area.output(1)));
}

TEST(SlotArea, RefusesASlotSmallerThanItsHeader) {
  EXPECT_THROW(SlotArea(1, kHeader - 1, kHeader), std::invalid_argument);
}

TEST(SlotArea, MovesOwnership) {
  SlotArea a(1, 100, kHeader);
  char *out = a.output(0);
  SlotArea b(std::move(a));
  EXPECT_EQ(a.slots(), 0u);
  EXPECT_EQ(b.output(0), out);
  SlotArea c;
  c = std::move(b);
  EXPECT_EQ(c.output(0), out);
  std::memset(c.output(0), 0, c.capacity());
}
