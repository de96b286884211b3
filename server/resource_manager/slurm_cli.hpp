// SLURM's command-line tools as the slurm node provider uses them: run one
// command with a deadline, read sbatch's and squeue's parsable output,
// expand a node list. No SLURM library is linked: the CLI is SLURM's stable
// interface across versions, and a hung slurmctld costs a killed child
// process here, never a stuck thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rfaas::rm::slurm {

/// What one command did.
struct CommandResult {
  /// It ran to its end within the deadline with exit status 0.
  bool ok = false;
  /// It was killed at the deadline.
  bool timed_out = false;
  /// Exit status (or 128 + the signal that ended it); -1 if it never ran.
  int status = -1;
  std::string out;
  std::string err;
  /// One line for a log: "sbatch: exit status 1: sbatch: error: ...".
  std::string describe(const std::string &what) const;
};

/// Runs `argv` (argv[0] looked up in PATH) without a shell, stdin from
/// /dev/null, and collects its output. At `timeout` the child (its process
/// group) is killed with SIGKILL and reaped. Thread-safe; blocks the caller
/// for at most `timeout` plus the reaping. Never throws for a failing
/// command (a failed fork or exec is a result too).
CommandResult run(const std::vector<std::string> &argv, std::chrono::milliseconds timeout);

/// "node[1-3,07],gpu01" -> node1 node2 node3 node07 gpu01 (SLURM's host list
/// syntax: one bracket group per name, ranges keep their zero padding).
/// Returns nullopt for text it cannot read.
std::optional<std::vector<std::string>> expand_hostlist(const std::string &list);

/// The job id in sbatch --parsable's answer ("1234" or "1234;cluster").
std::optional<uint64_t> parse_job_id(const std::string &text);

/// One line of `squeue -h -o '%i|%T|%N|%j|%r'`.
struct JobInfo {
  uint64_t job_id = 0;
  /// PENDING, CONFIGURING, RUNNING, COMPLETING, COMPLETED, CANCELLED,
  /// TIMEOUT, NODE_FAIL, FAILED, PREEMPTED, ...
  std::string state;
  /// SLURM's node list ("(null)" or empty while pending).
  std::string nodelist;
  std::string name;
  /// Why it waits or how it ended; may hold anything, so it comes last.
  std::string reason;
};
/// The format squeue is asked for, and its parser (lines it cannot read
/// are skipped; a job step line or a heading never reads as a job).
constexpr const char *kSqueueFormat = "%i|%T|%N|%j|%r";
std::map<uint64_t, JobInfo> parse_squeue(const std::string &text);

/// A job in this state will not run again (or has ended).
bool is_terminal(const std::string &state);
/// A job in this state runs its batch script.
bool is_running(const std::string &state);

} // namespace rfaas::rm::slurm
