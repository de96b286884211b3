// Shared by every fuzz target (tests/fuzz/fuzz_*.cpp): the entry point's
// declaration, the check that turns a broken property into a crash, and the one
// include of the wire protocol, so that moving protocol.hpp changes one line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "protocol/protocol.hpp"
#include "protocol/rm_messages.hpp"

namespace proto = rfaas::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/// A property every input must keep. A failure aborts, which libFuzzer reports
/// as a crash (and saves the input) and the replay test reports as a failure.
#define FUZZ_CHECK(cond)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::fprintf(stderr, "%s:%d: fuzz property violated: %s\n", __FILE__, __LINE__, #cond);      \
      std::abort();                                                                                \
    }                                                                                              \
  } while (0)
