// rfaas::function_name: how an invocation names a function of the shipped
// library.
//
// The wire does not carry names: an invocation carries a 32-bit hash of the
// name (FNV-1a), which the executor matches against the hashes of the
// library's exported functions (docs/protocol.md). Every call of
// executor::execute("echo", ...) therefore hashes the name, a loop over its
// characters in which each step waits for the previous multiplication: about
// 20 ns for a 13-character name, on the critical path of a call that takes
// a microsecond or two on shared memory. A function_name made once carries
// its hash to every call:
//
//   static constexpr rfaas::function_name echo("echo"); // hashed at compile time
//   for (...)
//     ex.execute(echo, in, out);
//
// Like std::string_view, a function_name does not own the characters of the
// name: they must outlive it (the name is only read to log an unknown
// function).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rfaas {

/// A function's name and its hash, computed once (the file's opening comment says why).
class function_name {
public:
  /// The name, hashed now. Implicit, so that every call also takes a
  /// string literal, a std::string or a std::string_view.
  constexpr function_name(std::string_view name) noexcept : name_(name), hash_(hash(name)) {}
  /// From a NUL-terminated name; the characters must outlive the function_name.
  constexpr function_name(const char *name) noexcept : function_name(std::string_view(name)) {}
  /// From a std::string, which must outlive the function_name.
  function_name(const std::string &name) noexcept : function_name(std::string_view(name)) {}

  /// The name as given.
  constexpr std::string_view name() const noexcept { return name_; }
  /// What the wire carries: hash(name()).
  constexpr uint32_t hash() const noexcept { return hash_; }

  /// The 32-bit FNV-1a of `name`: the protocol's name of a function.
  static constexpr uint32_t hash(std::string_view name) noexcept {
    uint32_t h = 2166136261u;
    for (char c : name) {
      h ^= static_cast<uint8_t>(c);
      h *= 16777619u;
    }
    return h;
  }

private:
  std::string_view name_;
  uint32_t hash_;
};

} // namespace rfaas
