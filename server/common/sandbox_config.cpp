#include "common/sandbox_config.hpp"

#include <sstream>

namespace rfaas::server {

const char *to_string(SandboxKind k) noexcept {
  switch (k) {
  case SandboxKind::Process:
    return "process";
  case SandboxKind::Namespaces:
    return "namespaces";
  }
  return "?";
}

SandboxKind parse_sandbox_kind(const std::string &text) {
  if (text == "process")
    return SandboxKind::Process;
  if (text == "namespaces")
    return SandboxKind::Namespaces;
  throw std::invalid_argument("unknown sandbox kind \"" + text +
                              "\" (expected \"namespaces\" or \"process\")");
}

std::string SandboxConfig::serialize() const {
  std::ostringstream o;
  o << "kind " << to_string(kind) << "\nuid " << uid << "\ngid " << gid << "\ncgroup_parent "
    << cgroup_parent << "\nmax_processes " << max_processes << "\nmax_open_files " << max_open_files
    << "\ntmp_mib " << tmp_mib << "\nseccomp " << (seccomp ? 1 : 0) << "\n";
  return o.str();
}

SandboxConfig SandboxConfig::parse(const std::string &text) {
  SandboxConfig c;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty())
      continue;
    std::istringstream l(line);
    std::string key, value;
    l >> key;
    std::getline(l >> std::ws, value);
    auto number = [&]() -> uint64_t {
      size_t used = 0;
      unsigned long long v = 0;
      try {
        v = std::stoull(value, &used);
      } catch (const std::exception &) {
        used = 0;
      }
      if (used == 0 || used != value.size())
        throw std::invalid_argument("sandbox: \"" + line + "\" needs a number");
      return v;
    };
    if (key == "kind")
      c.kind = parse_sandbox_kind(value);
    else if (key == "uid")
      c.uid = static_cast<uid_t>(number());
    else if (key == "gid")
      c.gid = static_cast<gid_t>(number());
    else if (key == "cgroup_parent")
      c.cgroup_parent = value;
    else if (key == "max_processes")
      c.max_processes = static_cast<uint32_t>(number());
    else if (key == "max_open_files")
      c.max_open_files = static_cast<uint32_t>(number());
    else if (key == "tmp_mib")
      c.tmp_mib = static_cast<uint32_t>(number());
    else if (key == "seccomp")
      c.seccomp = number() != 0;
    else
      throw std::invalid_argument("sandbox: unknown line \"" + line + "\"");
  }
  return c;
}

} // namespace rfaas::server
