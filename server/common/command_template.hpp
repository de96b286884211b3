// The `command` sandbox kind's argv template (executor.command): the
// operator writes how a container runtime (Apptainer, Sarus, Docker,
// podman...) starts the executor, with placeholders that the zygote fills per
// allocation (server/executor/container_pool.hpp lists them and what they
// stand for).
//
// An element equal to "{executor_args}" becomes the executor's arguments
// (several elements). An element holding "{host_path}" is repeated once per
// host path the fabric needs, one holding "{code_dir}" once per directory of
// the executor's code (none: the element is dropped). Every other
// "{name}" found in `scalars` is replaced inside the element; a "{...}" that
// is not a known placeholder is left as written (a runtime's own syntax).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace rfaas::server {

struct CommandValues {
  /// "{executor}" -> "/usr/lib/rfaas/executor", "{cores}" -> "2,3", ...
  std::map<std::string, std::string> scalars;
  std::vector<std::string> executor_args;
  std::vector<std::string> host_paths;
  std::vector<std::string> code_dirs;
};

/// The argv for one start. Never fails.
std::vector<std::string> expand_command_template(const std::vector<std::string> &tmpl,
                                                 const CommandValues &values);

} // namespace rfaas::server
