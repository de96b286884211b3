// Test library for the function-ABI checks: the header is included (so the
// version marker is there) but the function was declared without
// RFAAS_FUNCTION or extern "C": its name is C++-mangled (_Z4echoPvjS_), no
// client could invoke it as "echo", and the executor must say why.
#include <rfaas/function.hpp>

#include <cstring>

__attribute__((visibility("default"))) uint32_t echo(void *in, uint32_t size, void *out) {
  std::memcpy(out, in, size);
  return size;
}
