// A shared library of rFaaS functions, loaded from memory.
//
// The executor receives the library's bytes over the network and must not
// write them to disk (no temporary file to leak, nothing for other users to
// swap): the bytes go into an anonymous memfd_create() file, which is opened
// with dlopen("/proc/self/fd/N"). The exported functions are listed from the
// ELF dynamic symbol table once, at load, into a table indexed three ways: by
// name, by position, and by the 32-bit name hash that invocations carry
// (protocol::function_hash); two names with the same hash make the load fail.
//
// Functions follow the function ABI of <rfaas/function.hpp> (version 2):
//   extern "C" uint32_t name(const void *in, uint32_t in_size, void *out,
//                            uint32_t out_capacity);
// returning the number of bytes written to `out`. A function declared with
// RFAAS_FUNCTION_IN_PLACE exports the marker rfaas_in_place_<name> beside it
// and is called with out == in. load() refuses a library
// built for another ABI: the exported rfaas_function_abi_version is missing
// or differs, it exports no C-linkage function, or one of its functions has
// an rFaaS signature but a C++-mangled name (a forgotten extern "C", which the
// client would only discover as unknown_function).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// The executor reads the ABI marker of the libraries it loads; it must not
// define one itself.
#ifndef RFAAS_FUNCTION_NO_ABI_SYMBOL
#define RFAAS_FUNCTION_NO_ABI_SYMBOL
#endif
#include <rfaas/function.hpp>

namespace rfaas::executor_process {

using Function = rfaas_function_t;

/// Loading or resolution failed; what() names the library (and the function)
/// and includes the loader's dlerror() text or the system error.
class LibraryError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// One exported function.
struct FunctionEntry {
  std::string name;
  /// protocol::function_hash(name).
  uint32_t hash = 0;
  Function function = nullptr;
  /// Declared with RFAAS_FUNCTION_IN_PLACE: called with out == in.
  bool in_place = false;
};

/// A loaded library. Move-only; the destructor dlclose()s the handle and closes
/// the memfd, after which every Function taken from it is invalid.
///
/// Thread-safety: load() and destruction by one thread; the const lookups are
/// safe from any number of threads once loaded (the table never changes).
class FunctionLibrary {
public:
  FunctionLibrary() noexcept = default;
  ~FunctionLibrary();
  FunctionLibrary(FunctionLibrary &&o) noexcept;
  FunctionLibrary &operator=(FunctionLibrary &&o) noexcept;
  FunctionLibrary(const FunctionLibrary &) = delete;
  FunctionLibrary &operator=(const FunctionLibrary &) = delete;

  /// Load `size` bytes of a shared object from memory. `name` is only used in
  /// messages and as the memfd's name. Throws LibraryError when memfd_create or
  /// the copy fails, when dlopen refuses the image (dlerror text included), when
  /// its exported functions cannot be listed, when two share a name hash, or
  /// when the library does not follow the function ABI (see the top of this
  /// file); those messages start with the problem and its fix and end with
  /// the library's name, so that a truncated copy still says what matters.
  /// The bytes are copied; the caller may free them afterwards.
  static FunctionLibrary load(const void *bytes, size_t size, const std::string &name);

  bool loaded() const noexcept { return handle_ != nullptr; }
  const std::string &name() const noexcept { return name_; }

  /// The exported C-linkage functions, sorted by name; an entry's position is
  /// its index. C++-mangled names are not functions of the library.
  const std::vector<FunctionEntry> &functions() const noexcept { return table_; }
  size_t size() const noexcept { return table_.size(); }

  /// The function at `index` of functions(), or nullptr when out of range.
  Function at(size_t index) const noexcept {
    return index < table_.size() ? table_[index].function : nullptr;
  }
  /// The exported function called `name`, or nullptr.
  Function find(std::string_view name) const noexcept;
  /// The exported function whose name hash is `hash`, or nullptr. This is the
  /// invocation path: a binary search, no allocation.
  Function find_hash(uint32_t hash) const noexcept;
  /// The entry whose name hash is `hash`, or nullptr (for messages).
  const FunctionEntry *entry_hash(uint32_t hash) const noexcept;
  /// Position of `name` in functions(), or -1.
  long index_of(std::string_view name) const noexcept;

  /// Look `name` up with dlsym (also finds symbols that are not in the table).
  /// Throws LibraryError with dlerror()'s text when it is missing.
  Function resolve(const std::string &name) const;

  /// The memfd holding the image (-1 when not loaded); for tests and logs.
  int memfd() const noexcept { return memfd_; }

private:
  void release() noexcept;

  void *handle_ = nullptr;
  int memfd_ = -1;
  std::string name_;
  std::vector<FunctionEntry> table_;
  /// (hash, index into table_), sorted by hash.
  std::vector<std::pair<uint32_t, uint32_t>> by_hash_;
};

} // namespace rfaas::executor_process
