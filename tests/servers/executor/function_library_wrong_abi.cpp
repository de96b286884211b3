// Test library for the function-ABI checks: a library whose version marker
// says 1 (as if built against another rFaaS), which the executor refuses.
#define RFAAS_FUNCTION_NO_ABI_SYMBOL
#include <rfaas/function.hpp>

extern "C" RFAAS_EXPORT const uint32_t rfaas_function_abi_version = 1;

RFAAS_FUNCTION(echo) { return 0; }
