// Test library for the function-ABI checks: a function library written for
// the original rFaaS, `uint32_t f(void *in, uint32_t size, void *out)` with no
// capacity and no <rfaas/function.hpp>, hence no version marker. The executor
// must refuse it rather than call it with four arguments.
#include <cstdint>
#include <cstring>

extern "C" __attribute__((visibility("default"))) uint32_t echo(void *in, uint32_t size,
                                                                void *out) {
  std::memcpy(out, in, size);
  return size;
}
