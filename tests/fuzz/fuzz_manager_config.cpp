// Fuzz target: the executor manager's configuration reader
// (rfaas::manager::ManagerConfig::parse and parse_core_list,
// server/executor_manager/config.cpp).
//
// Bad input must end in ConfigError; any other exception escapes and is
// reported as a crash. What parses must respect the limits the rest of the
// manager trusts without checking again.
#include <set>
#include <string>

#include "executor_manager/config.hpp"
#include "fuzz_support.hpp"

namespace {

// The readers under test, called in one place.
rfaas::manager::ManagerConfig read_config(const std::string &text) {
  return rfaas::manager::ManagerConfig::parse(text, "fuzz.json", "/etc/rfaas");
}
std::vector<int> read_core_list(const std::string &text) {
  return rfaas::manager::parse_core_list(text, "fuzz");
}

void check_cores(const std::vector<int> &cores) {
  std::set<int> seen;
  for (int c : cores) {
    FUZZ_CHECK(c >= 0 && c <= 4095);
    FUZZ_CHECK(seen.insert(c).second);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  try {
    rfaas::manager::ManagerConfig c = read_config(text);
    FUZZ_CHECK(!c.cores.empty() && c.cores.size() <= proto::kMaxWorkers);
    check_cores(c.cores);
    FUZZ_CHECK(c.default_memory_mib <= c.memory_mib);
    FUZZ_CHECK(c.max_input_slots >= 1 && c.max_input_slots <= proto::kMaxSlots);
    FUZZ_CHECK(c.max_slot_size > proto::kSlotPrefix && c.max_slot_size <= proto::kMaxSlotSize);
    FUZZ_CHECK(c.max_library_size >= 1 && c.max_library_size <= proto::kMaxLibrarySize);
    FUZZ_CHECK(c.max_allocations >= 1);
  } catch (const rfaas::manager::ConfigError &) {
  }
  // The same bytes as a CPU list ("0-3,6"), as the command line and
  // resources.cores accept it.
  try {
    check_cores(read_core_list(text));
  } catch (const rfaas::manager::ConfigError &) {
  }
  return 0;
}
