// Writing rFaaS functions: the function ABI, version 2.
//
// A function library is a shared object that includes this header and
// declares each function with RFAAS_FUNCTION:
//
//   #include <rfaas/function.hpp>
//   #include <cstring>
//
//   RFAAS_FUNCTION(echo) {
//     if (in_size > out_capacity)
//       return 0;
//     std::memcpy(out, in, in_size);
//     return in_size;
//   }
//
// The function receives `in_size` bytes of input at `in`, may write up to
// `out_capacity` bytes at `out`, and returns how many it wrote. `out` is
// 8-byte aligned; `in` has no alignment guarantee (read multi-byte values
// with memcpy). Returning more than `out_capacity` answers the client with
// output_too_large. Writing past `out + out_capacity` faults in a guard page:
// the client gets function_crashed (SIGSEGV) and the worker keeps serving.
// Functions run on the executor's worker threads, possibly several at once:
// they must be thread-safe and must not keep `in` or `out` after returning.
//
// A function that transforms its input can work in place instead, declared
// with RFAAS_FUNCTION_IN_PLACE:
//
//   RFAAS_FUNCTION_IN_PLACE(scale) {
//     // in == out: in_size bytes of input, room for out_capacity bytes
//     double *v = static_cast<double *>(out);
//     for (uint32_t i = 0; i < in_size / sizeof(double); ++i)
//       v[i] *= 2;
//     return in_size;
//   }
//
// Its input then sits in the memory its output is sent back from: `out` is
// `in`, 8-byte aligned, and `out_capacity` is the room of the input slot (the
// client's largest input). Nothing is copied on the executor: the result goes
// to the client straight from the bytes the client wrote, which matters once
// payloads reach hundreds of kilobytes (a copy of 1 MiB takes about as long as
// sending it). The same guard pages follow the slot, and a result larger than
// the client's output buffer is answered with output_too_large.
//
// Including this header in a library also defines the exported symbol
// rfaas_function_abi_version, which the executor checks when it loads the
// library: a library without it (built for the original rFaaS signature
// `uint32_t f(void *in, uint32_t size, void *out)`, which gave no capacity), or
// with another version, is refused at allocation with library_invalid and a
// message that says so. The header is plain C as well as C++.
#ifndef RFAAS_FUNCTION_HPP
#define RFAAS_FUNCTION_HPP

#include <stdint.h>

/// The function ABI this header describes; the executor accepts only this one.
#define RFAAS_FUNCTION_ABI_VERSION 2u
/// Name of the exported `const uint32_t` holding the library's ABI version.
#define RFAAS_FUNCTION_ABI_SYMBOL_NAME "rfaas_function_abi_version"

#ifdef __cplusplus
/// C linkage for what the executor looks up by name, in a C++ library.
#define RFAAS_EXTERN_C extern "C"
#else
/// C linkage for what the executor looks up by name (already so in C).
#define RFAAS_EXTERN_C
#endif

/// Exported from the library even when it is built with -fvisibility=hidden.
#define RFAAS_EXPORT __attribute__((visibility("default")))

/// The signature of every rFaaS function.
typedef uint32_t (*rfaas_function_t)(const void *in, uint32_t in_size, void *out,
                                     uint32_t out_capacity);

/// Declare (and, followed by a body, define) the rFaaS function `name` with C
/// linkage, exported, with the parameters `in`, `in_size`, `out` and
/// `out_capacity` (unused ones draw no warning). The executor lists the
/// library's exported C-linkage functions and invokes them by name.
#define RFAAS_FUNCTION(name)                                                                       \
  RFAAS_EXTERN_C RFAAS_EXPORT uint32_t name(                                                       \
      const void *in __attribute__((unused)), uint32_t in_size __attribute__((unused)),            \
      void *out __attribute__((unused)), uint32_t out_capacity __attribute__((unused)))

/// Name prefix of the exported marker that RFAAS_FUNCTION_IN_PLACE(name) adds
/// beside the function: `rfaas_in_place_<name>`.
#define RFAAS_FUNCTION_IN_PLACE_PREFIX "rfaas_in_place_"

/// Like RFAAS_FUNCTION, for a function that writes its output over its input:
/// the executor calls it with `out == in` (see the top of this file). The
/// marker object tells the executor so when it loads the library.
#define RFAAS_FUNCTION_IN_PLACE(name)                                                              \
  RFAAS_EXTERN_C RFAAS_EXPORT __attribute__((used)) const uint32_t rfaas_in_place_##name = 1;      \
  RFAAS_FUNCTION(name)

// The version marker. Weak, so that every translation unit of a library may
// include this header and the linker keeps one copy. The executor defines
// RFAAS_FUNCTION_NO_ABI_SYMBOL: it only reads the marker of the libraries it
// loads.
#ifndef RFAAS_FUNCTION_NO_ABI_SYMBOL
/// The library's function ABI version, which the executor reads at load.
RFAAS_EXTERN_C RFAAS_EXPORT __attribute__((weak, used)) const uint32_t rfaas_function_abi_version =
    RFAAS_FUNCTION_ABI_VERSION;
#endif

#endif // RFAAS_FUNCTION_HPP
