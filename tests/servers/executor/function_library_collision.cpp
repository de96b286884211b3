// Test library for function_library_test: two exported functions whose names
// have the same 32-bit FNV-1a hash, which the executor must refuse to load.
#include <rfaas/function.hpp>

RFAAS_FUNCTION(costarring) { return 1; }
RFAAS_FUNCTION(liquid) { return 2; }
