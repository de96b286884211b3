#include "executor/slot_area.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace rfaas::executor_process {

size_t SlotArea::page_size() noexcept {
  static const size_t page = [] {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t(4096);
  }();
  return page;
}

SlotArea::SlotArea(uint32_t slots, uint32_t slot_size, uint32_t header_size) {
  if (slot_size < header_size)
    throw std::invalid_argument("slot area: a slot of " + std::to_string(slot_size) +
                                " bytes cannot hold its " + std::to_string(header_size) +
                                "-byte header");
  const size_t page = page_size();
  const size_t span = (size_t(slot_size) + page - 1) / page * page;
  slots_ = slots;
  header_ = header_size;
  capacity_ = slot_size - header_size;
  stride_ = span + page;
  pad_ = span - slot_size;
  length_ = page + size_t(slots) * stride_;
  void *p = mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error("slot area: mmap of " + std::to_string(length_) +
                             " bytes: " + std::strerror(errno));
  base_ = static_cast<char *>(p);
  first_ = base_ + page;
}

SlotArea::~SlotArea() { release(); }

SlotArea::SlotArea(SlotArea &&o) noexcept
    : base_(std::exchange(o.base_, nullptr)), length_(std::exchange(o.length_, 0)),
      first_(std::exchange(o.first_, nullptr)), stride_(o.stride_), pad_(o.pad_),
      slots_(std::exchange(o.slots_, 0)), header_(o.header_), capacity_(o.capacity_) {}

SlotArea &SlotArea::operator=(SlotArea &&o) noexcept {
  if (this != &o) {
    release();
    base_ = std::exchange(o.base_, nullptr);
    length_ = std::exchange(o.length_, 0);
    first_ = std::exchange(o.first_, nullptr);
    stride_ = o.stride_;
    pad_ = o.pad_;
    slots_ = std::exchange(o.slots_, 0);
    header_ = o.header_;
    capacity_ = o.capacity_;
  }
  return *this;
}

void SlotArea::release() noexcept {
  if (base_)
    munmap(base_, length_);
  base_ = first_ = nullptr;
  length_ = 0;
  slots_ = 0;
}

void SlotArea::protect_guards() {
  if (!base_)
    throw std::logic_error("slot area: nothing to protect");
  const size_t page = page_size();
  auto protect = [&](char *guard) {
    if (mprotect(guard, page, PROT_NONE) != 0)
      throw std::runtime_error(std::string("slot area: mprotect of a guard page: ") +
                               std::strerror(errno));
  };
  protect(base_);
  for (uint32_t s = 0; s < slots_; ++s)
    protect(first_ + size_t(s) * stride_ + (stride_ - page));
}

bool SlotArea::guard_hit(uint32_t s, const void *addr) const noexcept {
  if (!base_ || s >= slots_ || addr == nullptr)
    return false;
  const char *a = static_cast<const char *>(addr);
  const char *low = first_ + size_t(s) * stride_ - page_size(); // the guard before
  const char *high = first_ + size_t(s + 1) * stride_;          // end of the guard after
  return a >= low && a < high;
}

} // namespace rfaas::executor_process
