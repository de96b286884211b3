// A Python object's memory through the buffer protocol, held for as long as
// an invocation may read or write it.
//
// Holding the Py_buffer keeps the exporter alive and, for NumPy arrays and
// bytearrays, forbids resizing them, so the pointer given to librfaas stays
// valid while the GIL is released. Nothing is copied on the Python side.
// Create and destroy a buffer_view with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <utility>

namespace rfaas::python {

class buffer_view {
public:
  buffer_view() noexcept = default;
  /// Takes `obj`'s memory, which must be C-contiguous (and writable when
  /// `writable`); throws the exporter's BufferError otherwise, prefixed with
  /// `what` ("input", "output") so the user knows which argument it was.
  buffer_view(pybind11::handle obj, bool writable, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      pybind11::error_already_set e;
      throw pybind11::type_error(std::string(what) + " must be a C-contiguous" +
                                 (writable ? " writable" : "") +
                                 " object with the buffer protocol (bytes, bytearray, "
                                 "memoryview, numpy.ndarray): " +
                                 e.what());
    }
    held_ = true;
  }
  buffer_view(buffer_view &&o) noexcept : view_(o.view_), held_(std::exchange(o.held_, false)) {}
  buffer_view &operator=(buffer_view &&o) noexcept {
    if (this != &o) {
      release();
      view_ = o.view_;
      held_ = std::exchange(o.held_, false);
    }
    return *this;
  }
  buffer_view(const buffer_view &) = delete;
  buffer_view &operator=(const buffer_view &) = delete;
  ~buffer_view() { release(); }

  void *data() const noexcept { return held_ ? view_.buf : nullptr; }
  size_t size() const noexcept { return held_ ? static_cast<size_t>(view_.len) : 0; }
  explicit operator bool() const noexcept { return held_; }

  /// Gives the memory back to its exporter (GIL held).
  void release() noexcept {
    if (held_) {
      PyBuffer_Release(&view_);
      held_ = false;
    }
  }

private:
  Py_buffer view_{};
  bool held_ = false;
};

} // namespace rfaas::python
