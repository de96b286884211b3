// The `log.level` values the daemons' configuration files accept: spdlog's
// level names, spelled exactly (no "warning" alias, unlike --log-level), so
// that a configuration file means the same thing on every release.
#pragma once

#include <string>
#include <string_view>

namespace rfaas::server {

/// For error messages: the accepted names.
constexpr const char *kLogLevelNames = "trace, debug, info, warn, error, critical, off";

/// True, with `out` set, when `text` is one of kLogLevelNames.
inline bool parse_log_level_name(std::string_view text, std::string &out) {
  for (const char *l : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    if (text == l) {
      out = l;
      return true;
    }
  }
  return false;
}

} // namespace rfaas::server
