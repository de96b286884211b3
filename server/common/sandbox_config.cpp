#include "common/sandbox_config.hpp"

#include <sstream>

namespace rfaas::server {

const char *to_string(SandboxKind k) noexcept {
  switch (k) {
  case SandboxKind::Process:
    return "process";
  case SandboxKind::Namespaces:
    return "namespaces";
  case SandboxKind::Oci:
    return "oci";
  case SandboxKind::Command:
    return "command";
  }
  return "?";
}

SandboxKind parse_sandbox_kind(const std::string &text) {
  if (text == "process")
    return SandboxKind::Process;
  if (text == "namespaces")
    return SandboxKind::Namespaces;
  if (text == "oci")
    return SandboxKind::Oci;
  if (text == "command")
    return SandboxKind::Command;
  throw std::invalid_argument("unknown sandbox kind \"" + text +
                              "\" (expected \"namespaces\", \"oci\", \"command\" or "
                              "\"process\")");
}

std::string SandboxConfig::serialize() const {
  std::ostringstream o;
  o << "kind " << to_string(kind) << "\nuid " << uid << "\ngid " << gid << "\ncgroup_parent "
    << cgroup_parent << "\nmax_processes " << max_processes << "\nmax_open_files " << max_open_files
    << "\ntmp_mib " << tmp_mib << "\nseccomp " << (seccomp ? 1 : 0) << "\n";
  if (!oci_image.empty())
    o << "oci_image " << oci_image << "\n";
  for (const auto &a : oci_images)
    o << "oci_allowed_image " << a << "\n";
  for (const auto &a : oci_podman)
    o << "oci_podman " << a << "\n";
  for (const auto &a : oci_run_options)
    o << "oci_run_option " << a << "\n";
  o << "oci_pool " << oci_pool << "\noci_host_code " << (oci_host_code ? 1 : 0) << "\n";
  if (!oci_executor.empty())
    o << "oci_executor " << oci_executor << "\n";
  for (const auto &a : command)
    o << "command " << a << "\n";
  return o.str();
}

SandboxConfig SandboxConfig::parse(const std::string &text) {
  SandboxConfig c;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty())
      continue;
    // The value is the rest after one space, kept exactly (an argv element
    // may hold spaces).
    const size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
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
    else if (key == "oci_image")
      c.oci_image = value;
    else if (key == "oci_allowed_image")
      c.oci_images.push_back(value);
    else if (key == "oci_podman")
      c.oci_podman.push_back(value);
    else if (key == "oci_run_option")
      c.oci_run_options.push_back(value);
    else if (key == "oci_pool")
      c.oci_pool = static_cast<uint32_t>(number());
    else if (key == "oci_host_code")
      c.oci_host_code = number() != 0;
    else if (key == "oci_executor")
      c.oci_executor = value;
    else if (key == "command")
      c.command.push_back(value);
    else
      throw std::invalid_argument("sandbox: unknown line \"" + line + "\"");
  }
  return c;
}

} // namespace rfaas::server
