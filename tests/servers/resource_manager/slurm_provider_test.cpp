// The slurm node provider's parts that need no SLURM: reading SLURM's
// answers (node lists, sbatch --parsable, squeue), running a command under a
// deadline, the nodes.slurm configuration, and the pilots table. The
// provider itself runs against a real SLURM in tests/slurm/provider_test.sh.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "resource_manager/config.hpp"
#include "resource_manager/slurm_cli.hpp"
#include "resource_manager/store.hpp"

using namespace rfaas::rm;
namespace sl = rfaas::rm::slurm;

TEST(SlurmCli, ExpandsHostLists) {
  using V = std::vector<std::string>;
  EXPECT_EQ(*sl::expand_hostlist("n1"), V({"n1"}));
  EXPECT_EQ(*sl::expand_hostlist("rf16800n[1-3]"), V({"rf16800n1", "rf16800n2", "rf16800n3"}));
  EXPECT_EQ(*sl::expand_hostlist("node[07-09,12],gpu01"),
            V({"node07", "node08", "node09", "node12", "gpu01"}));
  EXPECT_EQ(*sl::expand_hostlist("a[1-2]-ib"), V({"a1-ib", "a2-ib"}));
  EXPECT_TRUE(sl::expand_hostlist("(null)")->empty());
  EXPECT_TRUE(sl::expand_hostlist("")->empty());
  for (const char *bad : {"n[1-", "n[3-1]", "n[a-b]", "n]1[", "n[1-2][3-4]", "a,,b", "n[[1]]"})
    EXPECT_FALSE(sl::expand_hostlist(bad)) << bad;
}

TEST(SlurmCli, ReadsJobIdsAndSqueue) {
  EXPECT_EQ(sl::parse_job_id("1234\n"), 1234u);
  EXPECT_EQ(sl::parse_job_id("77;cluster2\n"), 77u);
  EXPECT_FALSE(sl::parse_job_id("sbatch: error: Batch job submission failed"));
  EXPECT_FALSE(sl::parse_job_id("0"));
  EXPECT_FALSE(sl::parse_job_id(""));

  auto jobs = sl::parse_squeue("12|RUNNING|n[1-2]|rfaas-pilot-3|None\n"
                               "13|PENDING|(null)|rfaas-pilot-4|Resources\n"
                               "14|CANCELLED|n1|rfaas-pilot-5|reason|with a bar\n"
                               "12.0|RUNNING|n1|step|None\n"
                               "JOBID|STATE|NODELIST|NAME|REASON\n");
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[12].state, "RUNNING");
  EXPECT_EQ(jobs[12].nodelist, "n[1-2]");
  EXPECT_EQ(jobs[12].name, "rfaas-pilot-3");
  EXPECT_EQ(jobs[13].reason, "Resources");
  EXPECT_EQ(jobs[14].reason, "reason|with a bar");
  EXPECT_TRUE(sl::is_terminal("CANCELLED"));
  EXPECT_TRUE(sl::is_terminal("NODE_FAIL"));
  EXPECT_TRUE(sl::is_terminal("TIMEOUT"));
  EXPECT_FALSE(sl::is_terminal("PENDING"));
  EXPECT_TRUE(sl::is_running("RUNNING"));
  EXPECT_FALSE(sl::is_running("CONFIGURING"));
}

TEST(SlurmCli, RunsCommandsUnderADeadline) {
  using namespace std::chrono_literals;
  sl::CommandResult ok = sl::run({"sh", "-c", "echo out; echo err >&2"}, 5s);
  EXPECT_TRUE(ok.ok);
  EXPECT_EQ(ok.out, "out\n");
  EXPECT_EQ(ok.err, "err\n");

  sl::CommandResult bad = sl::run({"sh", "-c", "echo 'sbatch: error: no' >&2; exit 3"}, 5s);
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.status, 3);
  EXPECT_EQ(bad.describe("sbatch"), "sbatch: exit status 3: sbatch: error: no");

  // A hung command (and the child it started, in its process group) is
  // killed at the deadline; the call returns soon after it.
  auto t0 = std::chrono::steady_clock::now();
  sl::CommandResult hung = sl::run({"sh", "-c", "sleep 30 & sleep 30"}, 200ms);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(hung.timed_out);
  EXPECT_FALSE(hung.ok);
  EXPECT_LT(took, 5s);
  EXPECT_NE(hung.describe("squeue").find("no answer within its deadline"), std::string::npos);

  sl::CommandResult missing = sl::run({"/nonexistent/sbatch"}, 5s);
  EXPECT_FALSE(missing.ok);
  EXPECT_EQ(missing.status, -1);
  EXPECT_NE(missing.err.find("cannot run /nonexistent/sbatch"), std::string::npos);
}

namespace {

const char *kHead = R"({"http": {"token": "0123456789abcdef0123"},
  "fabric": {"device_database": "d.json", "device": "lo"}, )";

std::string error_of(const std::string &nodes, bool fabric = true) {
  std::string text =
      fabric ? std::string(kHead) : R"({"http": {"token": "0123456789abcdef0123"}, )";
  text += R"("nodes": )" + nodes + "}";
  try {
    ResourceManagerConfig::parse(text, "rm.json", "/etc/rfaas");
  } catch (const ConfigError &e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(SlurmProviderConfig, ReadsTheBlockAndNamesMistakes) {
  const std::string good = R"({"provider": "slurm", "slurm": {"work_dir": "pilots",
    "rfaas_slurm": "/opt/rfaas/bin/rfaas-slurm", "min_nodes": 1, "max_nodes": 4,
    "nodes_per_job": 2, "partition": "compute", "sbatch": ["--exclusive"],
    "pilot_options": ["--provider", "verbs"]}})";
  EXPECT_EQ(error_of(good), "");
  ResourceManagerConfig c = ResourceManagerConfig::parse(
      std::string(kHead) + R"("nodes": )" + good + "}", "rm.json", "/etc/rfaas");
  EXPECT_EQ(c.node_provider, NodeProviderKind::Slurm);
  EXPECT_EQ(c.slurm.work_dir, "/etc/rfaas/pilots");
  EXPECT_EQ(c.slurm.max_nodes, 4u);
  EXPECT_EQ(c.slurm.sbatch, std::vector<std::string>{"--exclusive"});
  EXPECT_EQ(c.slurm.pilot_options.size(), 2u);

  EXPECT_EQ(error_of(R"({"provider": "static"})"), "");
  EXPECT_NE(error_of(R"({"provider": "k8s"})").find("static, slurm"), std::string::npos);
  EXPECT_NE(error_of(R"({"provider": "slurm"})").find("nodes.slurm"), std::string::npos);
  EXPECT_NE(error_of(R"({"slurm": {}})").find("nodes.provider is \"static\""), std::string::npos);
  EXPECT_NE(error_of(R"({"provider": "slurm", "slurm": {}})", false).find("\"fabric\" block"),
            std::string::npos);
  const std::string base =
      R"({"provider": "slurm", "slurm": {"work_dir": "p", "rfaas_slurm": "r", )";
  EXPECT_NE(error_of(base + R"("min_nodes": 3, "max_nodes": 2}})").find("min_nodes <= max_nodes"),
            std::string::npos);
  EXPECT_NE(error_of(base + R"("nodes_per_job": 2}})").find("no larger than the pool"),
            std::string::npos);
  EXPECT_NE(error_of(base + R"("sbatch": ["--a\n--b"]}})").find("line break"), std::string::npos);
  EXPECT_NE(error_of(base + R"("partition": "a b"}})").find("one SLURM word"), std::string::npos);
  EXPECT_NE(error_of(base + R"("idle_timeout": 5}})").find("idle_timeout_ms"), std::string::npos);
  EXPECT_NE(error_of(R"({"provider": "slurm", "slurm": {"rfaas_slurm": "r"}})").find("work_dir"),
            std::string::npos);
}

TEST(SlurmProviderStore, PilotsRoundTrip) {
  Store store(":memory:");
  EXPECT_TRUE(store.load_pilots().empty());
  for (uint64_t id = 1; id <= 4; ++id) {
    PilotRecord p;
    p.id = id;
    p.job_id = 100 + id;
    p.state = id <= 2 ? "ended" : "running";
    p.secret[0] = static_cast<uint8_t>(id);
    p.reason = id <= 2 ? "SLURM ended pilot job CANCELLED" : "";
    p.nodes = "n1-j" + std::to_string(100 + id);
    store.put_pilot(p);
  }
  std::vector<PilotRecord> all = store.load_pilots();
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all.front().id, 4u); // newest first
  EXPECT_EQ(all.front().secret[0], 4);
  EXPECT_EQ(all.back().reason, "SLURM ended pilot job CANCELLED");
  // The live ones always, the ended ones up to the limit.
  EXPECT_EQ(store.load_pilots(0).size(), 2u);
  EXPECT_EQ(store.load_pilots(1).size(), 3u);
  PilotRecord p = all.front();
  p.state = "ended";
  store.put_pilot(p);
  EXPECT_EQ(store.load_pilots(0).size(), 1u);
}
