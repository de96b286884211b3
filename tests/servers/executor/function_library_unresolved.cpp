// Test library for function_library_test: it calls a function that nothing
// defines, so dlopen(RTLD_NOW) must fail and report the missing symbol.
#include <rfaas/function.hpp>

extern "C" uint32_t rfaas_test_symbol_that_does_not_exist(uint32_t);

RFAAS_FUNCTION(uses_missing) { return rfaas_test_symbol_that_does_not_exist(in_size); }
