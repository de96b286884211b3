// Example rFaaS functions (function ABI v2, <rfaas/function.hpp>).
//
// RFAAS_FUNCTION(name) declares `uint32_t name(const void *in, uint32_t
// in_size, void *out, uint32_t out_capacity)` with C linkage, exported:
// `in` holds `in_size` bytes of input, `out` has room for `out_capacity`
// bytes (the allocation's max_output_size, rounded up to 8), and the return
// value is the number of bytes written to `out`. Functions run on the
// executor's worker threads: they must be thread-safe and must not keep
// pointers to `in` or `out` after returning. Multi-byte values are in the
// host's byte order (client and executor run on the same architecture).
// RFAAS_FUNCTION_IN_PLACE(name) declares the same signature for a function
// that is called with `out == in`: it writes its output over its input, and
// `out_capacity` is the allocation's max_input_size, rounded up to 8.
//
// The library is built with hidden visibility: only RFAAS_FUNCTIONs are
// exported, so the executor's table holds exactly them.
#include <rfaas/function.hpp>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>

namespace {
/// How many copies of its input `expand` writes.
constexpr uint32_t kExpandFactor = 4;
/// Largest matrix `matmul` accepts (n x n doubles).
constexpr uint32_t kMaxMatrix = 512;
} // namespace

/// Output = input; no output when the input does not fit out_capacity.
RFAAS_FUNCTION(echo) {
  if (in_size > out_capacity)
    return 0;
  std::memcpy(out, in, in_size);
  return in_size;
}

/// Output = input, in place: the input already is the output, so nothing is
/// copied on the executor. No output when the input does not fit out_capacity.
RFAAS_FUNCTION_IN_PLACE(echo_in_place) { return in_size <= out_capacity ? in_size : 0; }

/// Every input byte inverted (~b), written over the input.
RFAAS_FUNCTION_IN_PLACE(invert_in_place) {
  if (in_size > out_capacity)
    return 0;
  unsigned char *b = static_cast<unsigned char *>(out);
  for (uint32_t i = 0; i < in_size; ++i)
    b[i] = static_cast<unsigned char>(~b[i]);
  return in_size;
}

/// No output at all: the cheapest possible invocation.
RFAAS_FUNCTION(noop) { return 0; }

/// Input: uint64 values (size / 8 of them; trailing bytes ignored).
/// Output: one uint64, the sum of their squares modulo 2^64.
RFAAS_FUNCTION(sum_squares) {
  if (out_capacity < sizeof(uint64_t))
    return 0;
  const auto *bytes = static_cast<const unsigned char *>(in);
  uint64_t sum = 0;
  for (uint32_t i = 0; i + sizeof(uint64_t) <= in_size; i += sizeof(uint64_t)) {
    uint64_t v;
    std::memcpy(&v, bytes + i, sizeof v);
    sum += v * v;
  }
  std::memcpy(out, &sum, sizeof sum);
  return sizeof sum;
}

/// Input: uint32 n, then A and B, each n x n doubles in row-major order.
/// Output: C = A * B, n x n doubles. Returns 0 (no output) on malformed input,
/// n > 512, or when C does not fit out_capacity.
RFAAS_FUNCTION(matmul) {
  const auto *bytes = static_cast<const unsigned char *>(in);
  uint32_t n;
  if (in_size < sizeof n)
    return 0;
  std::memcpy(&n, bytes, sizeof n);
  if (n == 0 || n > kMaxMatrix)
    return 0;
  const uint64_t elems = static_cast<uint64_t>(n) * n;
  if (in_size != sizeof n + 2 * elems * sizeof(double) || elems * sizeof(double) > out_capacity)
    return 0;
  const unsigned char *a = bytes + sizeof n;
  const unsigned char *b = a + elems * sizeof(double);
  auto *c = static_cast<unsigned char *>(out);
  // Inputs start at offset 4 of the payload, so they may be misaligned for
  // doubles: read them with memcpy (compiles to plain loads on x86/arm64).
  auto get = [](const unsigned char *m, uint64_t i) {
    double v;
    std::memcpy(&v, m + i * sizeof(double), sizeof v);
    return v;
  };
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (uint32_t k = 0; k < n; ++k)
        acc += get(a, static_cast<uint64_t>(i) * n + k) * get(b, static_cast<uint64_t>(k) * n + j);
      std::memcpy(c + (static_cast<uint64_t>(i) * n + j) * sizeof(double), &acc, sizeof acc);
    }
  }
  return static_cast<uint32_t>(elems * sizeof(double));
}

/// Output = the input repeated 4 times (output larger than input). When that
/// does not fit out_capacity, writes nothing and returns the size it needed:
/// the executor answers output_too_large with that size.
RFAAS_FUNCTION(expand) {
  const uint64_t needed = static_cast<uint64_t>(in_size) * kExpandFactor;
  if (needed > out_capacity)
    return needed > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(needed);
  auto *o = static_cast<unsigned char *>(out);
  for (uint32_t r = 0; r < kExpandFactor; ++r)
    std::memcpy(o + static_cast<uint64_t>(r) * in_size, in, in_size);
  return static_cast<uint32_t>(needed);
}

/// Input: uint32 milliseconds (capped at 60 s). Sleeps that long, no output.
/// For tests of timeouts, asynchronous calls and warm (non-hot) workers.
RFAAS_FUNCTION(sleep_ms) {
  uint32_t ms = 0;
  if (in_size >= sizeof ms)
    std::memcpy(&ms, in, sizeof ms);
  if (ms > 60000)
    ms = 60000;
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  return 0;
}

/// Input: uint32 milliseconds, then any bytes. Sleeps that long (capped at
/// 60 s), then echoes the bytes after the first four: a result that arrives
/// late, for tests of abandoned invocations.
RFAAS_FUNCTION(sleep_echo) {
  uint32_t ms = 0;
  if (in_size < sizeof ms)
    return 0;
  std::memcpy(&ms, in, sizeof ms);
  if (ms > 60000)
    ms = 60000;
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  const uint32_t n = in_size - static_cast<uint32_t>(sizeof ms);
  if (n > out_capacity)
    return 0;
  std::memcpy(out, static_cast<const char *>(in) + sizeof ms, n);
  return n;
}

/// Claims a 4 GiB - 1 output without writing anything: the executor must
/// answer OutputTooLarge. For fault tests.
RFAAS_FUNCTION(bad_output_size) { return UINT32_MAX; }

/// Dies of SIGSEGV by storing into the never-mapped first page, a real fault
/// like a buggy function would have. For fault tests: the executor must turn it into a
/// FunctionCrashed result, never hang.
RFAAS_FUNCTION(crash) {
  // Address 8 rather than 0: UBSan reports a null store and exits instead of
  // faulting, and the sanitizer build must see the same SIGSEGV as users do.
  // The pointer is volatile so the compiler cannot fold the store into a trap.
  volatile int *volatile target = reinterpret_cast<volatile int *>(std::uintptr_t{8});
  *target = 42;
  // Only reached if page 0 were mapped.
  std::raise(SIGSEGV);
  return 0;
}

/// Input: uint32 extra (default 1), uint32 how (default 0). Writes
/// out_capacity + extra bytes from the start of `out`, running `extra` bytes
/// past its capacity as a buggy function would: byte by byte (how 0) or with
/// one memset (how 1, which glibc may do in any order of wide stores). For
/// fault tests: the executor must answer function_crashed (the write faults
/// in the guard page after the output area), never let it reach its own
/// memory, and go on serving.
RFAAS_FUNCTION(overflow) {
  uint32_t args[2] = {1, 0};
  std::memcpy(args, in, in_size < sizeof args ? in_size : sizeof args);
  const uint64_t end = static_cast<uint64_t>(out_capacity) + args[0];
  if (args[1] == 1) {
    std::memset(out, 0xab, end);
  } else {
    // volatile: the compiler must not reason the stores away.
    volatile unsigned char *o = static_cast<unsigned char *>(out);
    for (uint64_t i = 0; i < end; ++i)
      o[i] = static_cast<unsigned char>(i);
  }
  return out_capacity;
}

/// `overflow` as an in-place function: it runs past the capacity of its input
/// slot, which a guard page follows like every result slot.
RFAAS_FUNCTION_IN_PLACE(overflow_in_place) { return overflow(in, in_size, out, out_capacity); }
