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
  const void *data = nullptr;
  size_t size = 0;

  const_buffer() noexcept = default;
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
  void *data = nullptr;
  size_t size = 0;

  mutable_buffer() noexcept = default;
  mutable_buffer(void *d, size_t n) noexcept : data(d), size(n) {}
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
