// Test library for function_library_test: two exported functions whose names
// have the same 32-bit FNV-1a hash, which the executor must refuse to load.
#include <cstdint>

extern "C" __attribute__((visibility("default"))) uint32_t costarring(void *, uint32_t, void *) {
  return 1;
}
extern "C" __attribute__((visibility("default"))) uint32_t liquid(void *, uint32_t, void *) {
  return 2;
}
