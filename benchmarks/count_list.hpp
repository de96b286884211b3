// Comma-separated lists of counts on the benchmarks' command lines
// (--clients 1,4,16, --threads 1,4).
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "cli.hpp"

namespace rfaas::bench {

/// Parses "1,4,16" into counts in 1..256; empty items are skipped. A bad item
/// or an empty list is a UsageError naming `option` (e.g. "--clients").
inline std::vector<int> parse_count_list(const std::string &option, const std::string &list) {
  std::vector<int> out;
  size_t pos = 0;
  for (;;) {
    size_t comma = list.find(',', pos);
    std::string tok =
        list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!tok.empty()) {
      size_t used = 0;
      int n = 0;
      try {
        n = std::stoi(tok, &used);
      } catch (const std::exception &) {
        used = 0;
      }
      if (used != tok.size() || n < 1 || n > 256)
        throw rfaas::cli::UsageError(option + ": \"" + tok + "\" is not a count in 1..256");
      out.push_back(n);
    }
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  if (out.empty())
    throw rfaas::cli::UsageError(option + " needs at least one count");
  return out;
}

} // namespace rfaas::bench
