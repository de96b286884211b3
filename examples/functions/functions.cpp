// Example rFaaS functions.
//
// Every function has the signature
//   extern "C" uint32_t name(void *in, uint32_t size, void *out);
// `in` holds `size` bytes of input, `out` is the client's result slot (its
// capacity is agreed at allocation time, not passed in), and the return value
// is the number of bytes written to `out`. Functions run on the executor's
// worker threads: they must be thread-safe and must not keep pointers to `in`
// or `out` after returning. Multi-byte values are in the host's byte order
// (client and executor run on the same architecture).
//
// The library is built with hidden visibility; RFAAS_FUNCTION exports a
// function so that the executor lists it.
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>

#define RFAAS_FUNCTION extern "C" __attribute__((visibility("default")))

namespace {
/// How many copies of its input `expand` writes.
constexpr uint32_t kExpandFactor = 4;
/// Largest matrix `matmul` accepts (n x n doubles).
constexpr uint32_t kMaxMatrix = 512;
} // namespace

/// Output = input.
RFAAS_FUNCTION uint32_t echo(void *in, uint32_t size, void *out) {
  std::memcpy(out, in, size);
  return size;
}

/// No output at all: the cheapest possible invocation.
RFAAS_FUNCTION uint32_t noop(void *, uint32_t, void *) { return 0; }

/// Input: uint64 values (size / 8 of them; trailing bytes ignored).
/// Output: one uint64, the sum of their squares modulo 2^64.
RFAAS_FUNCTION uint32_t sum_squares(void *in, uint32_t size, void *out) {
  const auto *bytes = static_cast<const unsigned char *>(in);
  uint64_t sum = 0;
  for (uint32_t i = 0; i + sizeof(uint64_t) <= size; i += sizeof(uint64_t)) {
    uint64_t v;
    std::memcpy(&v, bytes + i, sizeof v);
    sum += v * v;
  }
  std::memcpy(out, &sum, sizeof sum);
  return sizeof sum;
}

/// Input: uint32 n, then A and B, each n x n doubles in row-major order.
/// Output: C = A * B, n x n doubles. Returns 0 (no output) on malformed input
/// or n > 512.
RFAAS_FUNCTION uint32_t matmul(void *in, uint32_t size, void *out) {
  const auto *bytes = static_cast<const unsigned char *>(in);
  uint32_t n;
  if (size < sizeof n)
    return 0;
  std::memcpy(&n, bytes, sizeof n);
  if (n == 0 || n > kMaxMatrix)
    return 0;
  const uint64_t elems = static_cast<uint64_t>(n) * n;
  if (size != sizeof n + 2 * elems * sizeof(double))
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

/// Output = the input repeated 4 times (output larger than input). Inputs
/// above 1 GiB produce no output (their expansion would not fit 32 bits).
RFAAS_FUNCTION uint32_t expand(void *in, uint32_t size, void *out) {
  if (size > UINT32_MAX / kExpandFactor)
    return 0;
  auto *o = static_cast<unsigned char *>(out);
  for (uint32_t r = 0; r < kExpandFactor; ++r)
    std::memcpy(o + static_cast<uint64_t>(r) * size, in, size);
  return size * kExpandFactor;
}

/// Input: uint32 milliseconds (capped at 60 s). Sleeps that long, no output.
/// For tests of timeouts, asynchronous calls and warm (non-hot) workers.
RFAAS_FUNCTION uint32_t sleep_ms(void *in, uint32_t size, void *) {
  uint32_t ms = 0;
  if (size >= sizeof ms)
    std::memcpy(&ms, in, sizeof ms);
  if (ms > 60000)
    ms = 60000;
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  return 0;
}

/// Claims a 4 GiB - 1 output without writing anything: the executor must
/// answer OutputTooLarge. For fault tests.
RFAAS_FUNCTION uint32_t bad_output_size(void *, uint32_t, void *) { return UINT32_MAX; }

/// Dies of SIGSEGV by storing into the never-mapped first page, a real fault
/// like a buggy function would have. For fault tests: the executor must turn it into a
/// FunctionCrashed result, never hang.
RFAAS_FUNCTION uint32_t crash(void *, uint32_t, void *) {
  // Address 8 rather than 0: UBSan reports a null store and exits instead of
  // faulting, and the sanitizer build must see the same SIGSEGV as users do.
  // The pointer is volatile so the compiler cannot fold the store into a trap.
  volatile int *volatile target = reinterpret_cast<volatile int *>(std::uintptr_t{8});
  *target = 42;
  // Only reached if page 0 were mapped.
  std::raise(SIGSEGV);
  return 0;
}
