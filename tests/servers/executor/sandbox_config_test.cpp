// The sandbox configuration the manager hands its zygote survives the trip
// (lists in order, values with spaces), and the command kind's argv template
// expands as docs/security.md says.
#include <gtest/gtest.h>

#include "common/command_template.hpp"
#include "common/sandbox_config.hpp"

using rfaas::server::CommandValues;
using rfaas::server::expand_command_template;
using rfaas::server::SandboxConfig;
using rfaas::server::SandboxKind;

TEST(SandboxConfig, OciAndCommandRoundTrip) {
  SandboxConfig c;
  c.kind = SandboxKind::Oci;
  c.oci_image = "localhost/rfaas:1";
  c.oci_podman = {"podman", "--runtime", "runc"};
  c.oci_run_options = {"--ulimit", "nproc=1000:1000", "--label=a b"};
  c.oci_pool = 3;
  c.oci_host_code = false;
  c.oci_executor = "/opt/rfaas/bin/executor";
  c.command = {"apptainer", "exec", " leading space", ""};
  SandboxConfig d = SandboxConfig::parse(c.serialize());
  EXPECT_EQ(d.kind, SandboxKind::Oci);
  EXPECT_EQ(d.oci_image, c.oci_image);
  EXPECT_EQ(d.oci_podman, c.oci_podman);
  EXPECT_EQ(d.oci_run_options, c.oci_run_options);
  EXPECT_EQ(d.oci_pool, 3u);
  EXPECT_FALSE(d.oci_host_code);
  EXPECT_EQ(d.oci_executor, c.oci_executor);
  EXPECT_EQ(d.command, c.command);
  EXPECT_EQ(rfaas::server::parse_sandbox_kind("command"), SandboxKind::Command);
  EXPECT_THROW(rfaas::server::parse_sandbox_kind("docker"), std::invalid_argument);
}

TEST(CommandTemplate, ExpandsPlaceholders) {
  CommandValues v;
  v.scalars = {{"{executor}", "/x/executor"}, {"{cores}", "2,3"}, {"{memory_mib}", "256"}};
  v.executor_args = {"--spare-fd", "3"};
  v.host_paths = {"/dev/shm", "/dev/infiniband"};
  v.code_dirs = {"/opt/rfaas"};
  auto argv =
      expand_command_template({"sarus", "run", "--cpuset-cpus={cores}",
                               "--mount=type=bind,source={host_path},destination={host_path}",
                               "--bind={code_dir}:{code_dir}:ro", "--memory={memory_mib}m", "img",
                               "{executor}", "{executor_args}", "{not_ours}"},
                              v);
  std::vector<std::string> want = {"sarus",
                                   "run",
                                   "--cpuset-cpus=2,3",
                                   "--mount=type=bind,source=/dev/shm,destination=/dev/shm",
                                   "--mount=type=bind,source=/dev/infiniband,destination=/dev/"
                                   "infiniband",
                                   "--bind=/opt/rfaas:/opt/rfaas:ro",
                                   "--memory=256m",
                                   "img",
                                   "/x/executor",
                                   "--spare-fd",
                                   "3",
                                   "{not_ours}"};
  EXPECT_EQ(argv, want);
  // No path the fabric needs: the element is dropped, not left with its
  // placeholder.
  v.host_paths.clear();
  EXPECT_EQ(expand_command_template({"a", "-v={host_path}"}, v), std::vector<std::string>{"a"});
}
