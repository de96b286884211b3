// The slurm node provider: keeps between nodes.slurm.min_nodes and
// max_nodes executor-manager nodes by submitting pilot jobs (docs/slurm.md).
//
// A pilot is one batch job of nodes_per_job nodes running
// `rfaas-slurm --pilot`, which starts one executor manager per node. Before
// submitting, the provider makes the pilot a directory (0700) holding its
// batch script and a fresh per-job secret in a 0600 file; the script names
// the file, never the secret. The nodes are not known before SLURM places
// the job, so no node entry is made in advance: an executor manager
// registers as NODE-jJOBID, and admit() adds it when its registration proof
// verifies under that job's secret, the job is one of this provider's
// pilots, and the pilot has not yet had all its nodes. Whoever cannot read
// the secret file cannot register a node, and one pilot cannot register
// nodes for another.
//
// SLURM is driven through sbatch, squeue and scancel on the provider's own
// thread, each call with a deadline (nodes.slurm.command_timeout_ms); a
// failing call is logged and retried with a backoff a bounded number of
// times. The loop thread only exchanges requests and answers with that
// thread (a mutex around two queues), so neither a slow slurmctld nor a
// hung command holds the fabric.
//
// Pilots are stored (Store::put_pilot): a restarted resource manager adopts
// the jobs that still run (their executor managers register again) and ends
// the others. A pilot that SLURM ends (time limit, scancel, node failure)
// has its nodes marked down, which ends their leases with the job's fate as
// the reason, and removed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "resource_manager/config.hpp"
#include "resource_manager/node_provider.hpp"
#include "resource_manager/slurm_cli.hpp"

namespace rfaas::rm {

class SlurmProvider final : public NodeProvider {
public:
  /// `rm_address`: where the pilots' executor managers register (the
  /// fabric's address unless the configuration names another). Reads the
  /// stored pilots and starts the thread that runs SLURM's commands.
  /// Throws std::runtime_error when the work directory cannot be made.
  SlurmProvider(const SlurmProviderConfig &config, std::string rm_address, Registry &registry);
  ~SlurmProvider() override;
  SlurmProvider(const SlurmProvider &) = delete;
  SlurmProvider &operator=(const SlurmProvider &) = delete;

  void tick(Registry &registry) override;
  std::optional<Provisioning> unplaceable(const LeaseRequest &request, Registry &registry) override;
  bool admit(const RegistrationClaim &claim, const LeaseToken &proof, Registry &registry) override;
  void stop(Registry &registry) override;

private:
  enum class State { Submitting, Pending, Running, Cancelling, Ended };
  static const char *to_string(State s);
  static State parse_state(const std::string &s);

  struct Pilot {
    uint64_t id = 0;
    uint64_t job_id = 0;
    State state = State::Submitting;
    NodeSecret secret{};
    uint64_t submitted_ms = 0;
    uint64_t ended_ms = 0;
    uint64_t running_since_ms = 0;
    /// Since when every node of the pilot has held no lease (0: busy).
    uint64_t idle_since_ms = 0;
    std::string reason;
    /// Why this provider cancelled it (the reason once SLURM confirms).
    std::string cancel_reason;
    std::set<std::string> nodes;
    /// The worker's generation when the job id became known: only a squeue
    /// answer asked later may say the job is gone.
    uint64_t known_gen = 0;
    /// SLURM's node names of the job (from squeue), once running.
    std::set<std::string> slurm_nodes;
  };

  // ---- worker thread: runs SLURM's commands ----------------------------------
  struct Command {
    enum class Kind { Submit, Cancel } kind = Kind::Submit;
    uint64_t pilot_id = 0;
    std::vector<uint64_t> job_ids; ///< Cancel
    std::string script;            ///< Submit
    int attempts = 0;
    std::chrono::steady_clock::time_point not_before{};
  };
  struct Done {
    Command::Kind kind = Command::Kind::Submit;
    uint64_t pilot_id = 0;
    std::vector<uint64_t> job_ids;
    bool ok = false;
    std::string error;
    uint64_t gen = 0;
  };
  struct Snapshot {
    std::map<uint64_t, slurm::JobInfo> jobs;
    uint64_t gen = 0;
  };
  void work();
  /// Runs one command; true when it is done (ok, or out of attempts).
  bool execute(Command &c, Done &done);
  std::string tool(const char *name) const;
  void queue(Command c);

  // ---- loop thread ---------------------------------------------------------------
  void take_answers(Registry &registry);
  void apply_snapshot(const Snapshot &snap, Registry &registry);
  void watch_running(Registry &registry);
  /// Prepares a pilot and queues its sbatch; false when it cannot (the
  /// work directory, or a pause after a failed submission).
  bool submit(Registry &registry, const std::string &why);
  void cancel(Pilot &p, Registry &registry, const std::string &why);
  /// Marks the pilot's nodes down (ending their leases with `reason`) and
  /// removes them.
  void drop_nodes(Pilot &p, Registry &registry, const std::string &reason);
  /// drop_nodes(), then records the end and removes the pilot's secret.
  void end(Pilot &p, Registry &registry, const std::string &reason);
  void persist(const Pilot &p, Registry &registry);
  /// Nodes of pilots that are starting or running (not being cancelled).
  uint32_t live_nodes() const;
  std::string pilot_dir(uint64_t id) const;
  std::string write_script(const Pilot &p) const;
  Pilot *by_job(uint64_t job_id);

  SlurmProviderConfig cfg_;
  std::string rm_address_;
  std::map<uint64_t, Pilot> pilots_;
  uint64_t next_id_ = 1;
  /// No submission before this time (a pause after a failed one).
  uint64_t hold_until_ms_ = 0;

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Command> commands_;
  std::vector<Done> done_;
  std::optional<Snapshot> snapshot_;
  bool quit_ = false;
  /// The worker polls squeue only while pilots may be in SLURM.
  bool watch_ = false;
  uint64_t gen_ = 0;
  std::thread worker_;
};

} // namespace rfaas::rm
