// Slots that a function writes into, each followed by a guard page: a
// worker's result slots, and its input slots (where in-place functions write
// their output over their input).
//
// A function gets a pointer into a slot and the slot's capacity, but it is
// untrusted code: it may write more. The slots therefore live in their own
// mapping, not on the heap, and each is placed so that its last byte is the
// last byte of a page and the next page is PROT_NONE. The first byte past
// the capacity, out[capacity], is the first byte of that guard page: any write
// that runs past the end faults at once (SIGSEGV, which the crash guard turns
// into a function_crashed result) before it can reach anything else. A guard
// page also precedes the first slot, so a write that runs backwards off the
// start of slot 0 faults too.
//
//   | guard | pad | header | output ... | guard | pad | header | output ... | guard |
//           ^ page         ^ out         ^ out + capacity (page aligned)
//
// Slot s starts stride() bytes after slot s-1, so a peer that writes into the
// slots over the network addresses slot s at offset(0) + s * stride().
// The owner registers the whole mapping (base(), length()) once and only then
// calls protect_guards(): verbs cannot register PROT_NONE pages, and the
// registration keeps them pinned (one page per slot). Posts only ever read a
// header and an output, never a guard.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rfaas::executor_process {

class SlotArea {
public:
  SlotArea() noexcept = default;
  /// Map `slots` slots of `slot_size` bytes each, the first `header_size`
  /// bytes of which are the header (of a result or an invocation) and the
  /// rest the function's output (so capacity() == slot_size - header_size). Throws
  /// std::runtime_error (with the system's error text) when mmap or mprotect
  /// fails, or std::invalid_argument when slot_size < header_size.
  SlotArea(uint32_t slots, uint32_t slot_size, uint32_t header_size);
  ~SlotArea();
  SlotArea(SlotArea &&o) noexcept;
  SlotArea &operator=(SlotArea &&o) noexcept;
  SlotArea(const SlotArea &) = delete;
  SlotArea &operator=(const SlotArea &) = delete;

  /// Make the guard pages PROT_NONE (until then they are accessible): after
  /// the mapping is registered. Throws std::runtime_error when mprotect fails.
  void protect_guards();

  /// The mapping, to register; offset(s) is slot(s) within it.
  char *base() const noexcept { return base_; }
  size_t length() const noexcept { return length_; }
  size_t offset(uint32_t s) const noexcept { return static_cast<size_t>(slot(s) - base_); }

  uint32_t slots() const noexcept { return slots_; }
  /// Bytes from the start of one slot to the start of the next.
  size_t stride() const noexcept { return stride_; }
  /// Bytes the function may write at output(s).
  uint32_t capacity() const noexcept { return capacity_; }
  /// Start of slot `s`: its result header.
  char *slot(uint32_t s) const noexcept { return first_ + size_t(s) * stride_ + pad_; }
  /// Where the function writes its output; output(s) + capacity() is the
  /// first byte of a guard page.
  char *output(uint32_t s) const noexcept { return slot(s) + header_; }
  /// Whether a fault at `addr` is slot `s`'s function running off its slot:
  /// `addr` lies in the guard page before or after the slot (the pages in
  /// between are accessible, so a fault there can only be a guard hit of an
  /// access that straddles the boundary).
  bool guard_hit(uint32_t s, const void *addr) const noexcept;

  /// The page size the layout uses.
  static size_t page_size() noexcept;

private:
  void release() noexcept;

  char *base_ = nullptr;  // the mapping, starting with the leading guard page
  size_t length_ = 0;     // of the mapping
  char *first_ = nullptr; // first page of slot 0
  size_t stride_ = 0;     // from one slot's first page to the next one's
  size_t pad_ = 0;        // from a slot's first page to its header
  uint32_t slots_ = 0, header_ = 0, capacity_ = 0;
};

} // namespace rfaas::executor_process
