// The main() of a fuzz target in the regular (g++) build: feeds every file of
// the given directories (and every given file) to LLVMFuzzerTestOneInput once,
// so that the seed corpus and every crash found so far are replayed by ctest in
// the normal and the sanitizer suites. libFuzzer provides its own main().
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_support.hpp"

namespace fs = std::filesystem;

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s DIR|FILE...\n"
                 "  runs the fuzz target once on every file (a directory: each regular "
                 "file in it)\n",
                 argv[0]);
    return 2;
  }
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    fs::path p(argv[i]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto &entry : fs::directory_iterator(p))
        if (entry.is_regular_file() && entry.path().filename().string()[0] != '.')
          inputs.push_back(entry.path());
    } else if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "%s: %s is neither a file nor a directory\n", argv[0], argv[i]);
      return 2;
    }
  }
  // A replay of nothing would pass without testing anything.
  if (inputs.empty()) {
    std::fprintf(stderr, "%s: no input files found in the given directories\n", argv[0]);
    return 1;
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path &p : inputs) {
    std::ifstream in(p, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], p.c_str());
      return 1;
    }
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
    // Name the input first: if it crashes, the log says which one.
    std::fprintf(stderr, "replay %s (%zu bytes)\n", p.c_str(), bytes.size());
    // A copy of exactly `size` bytes, so ASan sees reads past the end.
    std::vector<uint8_t> exact(bytes);
    static const uint8_t none = 0; // libFuzzer never passes a null pointer either
    LLVMFuzzerTestOneInput(exact.empty() ? &none : exact.data(), exact.size());
  }
  std::printf("replayed %zu input(s) without a failure\n", inputs.size());
  return 0;
}
