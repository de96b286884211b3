// Fuzz target: the executor's ELF reader (check_elf_image and
// list_exported_functions, server/executor/elf_symbols.cpp), which reads the
// function library a client sent before anything loads it.
//
// Malformed images must yield false with a sentence, never a crash or a read
// outside the image (the input is exactly `size` bytes, so ASan sees any).
// Names listed are sorted, unique and non-empty.
#include <algorithm>
#include <string>
#include <vector>

#include "executor/elf_symbols.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string error;
  bool image_ok = rfaas::executor_process::check_elf_image(data, size, error);
  FUZZ_CHECK(image_ok || !error.empty());
  std::vector<std::string> names;
  error.clear();
  bool listed = rfaas::executor_process::list_exported_functions(data, size, names, error);
  if (!listed) {
    FUZZ_CHECK(!error.empty());
    return 0;
  }
  FUZZ_CHECK(std::is_sorted(names.begin(), names.end()));
  FUZZ_CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
  for (const std::string &n : names)
    FUZZ_CHECK(!n.empty() && n != "_init" && n != "_fini");
  return 0;
}
