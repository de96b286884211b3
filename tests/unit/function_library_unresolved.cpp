// Test library for function_library_test: it calls a function that nothing
// defines, so dlopen(RTLD_NOW) must fail and report the missing symbol.
#include <cstdint>

extern "C" uint32_t rfaas_test_symbol_that_does_not_exist(uint32_t);

extern "C" __attribute__((visibility("default"))) uint32_t uses_missing(void *, uint32_t size,
                                                                        void *) {
  return rfaas_test_symbol_that_does_not_exist(size);
}
