// Test library for the function-ABI checks: it follows the ABI (it includes
// <rfaas/function.hpp>, so it exports the version marker) but exports no
// function, so there is nothing to invoke and the executor refuses it.
#include <rfaas/function.hpp>

namespace {
// Not exported: the library is built with hidden visibility.
__attribute__((used)) uint32_t helper(uint32_t x) { return x * 2; }
} // namespace
