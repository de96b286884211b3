// Views of caller memory passed to invocations (C++17 has no std::span).
//
// They never own anything: the memory must stay valid until the invocation
// that uses it has completed (execute() returned, or the future of async()
// became ready).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace rfaas {

/// Read-only bytes: an invocation's input.
struct const_buffer {
  /// First byte.
  const void *data = nullptr;
  /// Length in bytes.
  size_t size = 0;

  const_buffer() noexcept = default;
  /// `n` bytes at `d`, not copied: they must stay valid for the call.
  const_buffer(const void *d, size_t n) noexcept : data(d), size(n) {}
  /// Any contiguous container of trivially copyable elements (std::vector with
  /// any allocator, std::array, std::string).
  template <class C, class = decltype(std::declval<const C &>().data()),
            class = decltype(std::declval<const C &>().size())>
  const_buffer(const C &c) noexcept : data(c.data()), size(c.size() * sizeof(*c.data())) {
    static_assert(std::is_trivially_copyable<std::remove_pointer_t<decltype(c.data())>>::value,
                  "buffers hold trivially copyable elements");
  }
};

/// Writable bytes: where an invocation's output is copied.
struct mutable_buffer {
  /// First byte.
  void *data = nullptr;
  /// Capacity in bytes: a longer result is an error (output_too_large), not a
  /// truncation.
  size_t size = 0;

  mutable_buffer() noexcept = default;
  /// `n` bytes at `d`, not copied: they must stay valid until the result arrives.
  mutable_buffer(void *d, size_t n) noexcept : data(d), size(n) {}
  /// The elements of a contiguous container (std::vector, std::array, ...): its size()
  /// times the element size.
  template <class C, class = decltype(std::declval<C &>().data()),
            class = decltype(std::declval<C &>().size()),
            class = std::enable_if_t<
                !std::is_const<std::remove_pointer_t<decltype(std::declval<C &>().data())>>::value>>
  mutable_buffer(C &c) noexcept : data(c.data()), size(c.size() * sizeof(*c.data())) {
    static_assert(std::is_trivially_copyable<std::remove_pointer_t<decltype(c.data())>>::value,
                  "buffers hold trivially copyable elements");
  }
};

} // namespace rfaas
