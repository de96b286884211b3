#include "resource_manager/slurm_provider.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace rfaas::rm {

namespace {

std::shared_ptr<spdlog::logger> log() {
  auto l = spdlog::get("resource_manager");
  return l ? l : spdlog::default_logger();
}

using SteadyClock = std::chrono::steady_clock;

/// Attempts of one sbatch or scancel before it is given up.
constexpr int kMaxAttempts = 4;
/// After a pilot could not be submitted, none is for this long.
constexpr uint64_t kSubmitPauseMs = 30'000;
/// squeue failing this many times in a row is logged again (not each time).
constexpr int kSqueueLogEvery = 30;

std::string shell_quote(const std::string &s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

/// "node-j123" -> 123; 0 when the name is not a pilot's.
uint64_t job_of_node(const std::string &name) {
  const size_t at = name.rfind("-j");
  if (at == std::string::npos || at + 2 >= name.size())
    return 0;
  const std::string digits = name.substr(at + 2);
  if (digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return 0;
  return std::stoull(digits);
}

std::string join(const std::set<std::string> &names) {
  std::string out;
  for (const std::string &n : names)
    out += (out.empty() ? "" : ",") + n;
  return out;
}

/// Creates `dir` with mode 0700 (and its parents); throws with the cause.
void make_private_dir(const std::string &dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error("cannot create " + dir + ": " + ec.message());
  if (::chmod(dir.c_str(), 0700) != 0)
    throw std::runtime_error("cannot make " + dir + " private: " + std::strerror(errno));
}

/// Writes `text` to a new file of mode `mode` (created so, never widened
/// afterwards: a secret is not readable by others even for an instant).
void write_new_file(const std::string &path, const std::string &text, mode_t mode) {
  ::unlink(path.c_str());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      throw std::runtime_error("cannot write " + path + ": " + std::strerror(e));
    }
    off += static_cast<size_t>(n);
  }
  if (::close(fd) != 0)
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
}

} // namespace

const char *SlurmProvider::to_string(State s) {
  switch (s) {
  case State::Submitting:
    return "submitting";
  case State::Pending:
    return "pending";
  case State::Running:
    return "running";
  case State::Cancelling:
    return "cancelling";
  case State::Ended:
    return "ended";
  }
  return "ended";
}

SlurmProvider::State SlurmProvider::parse_state(const std::string &s) {
  for (State st : {State::Submitting, State::Pending, State::Running, State::Cancelling})
    if (s == to_string(st))
      return st;
  return State::Ended;
}

SlurmProvider::SlurmProvider(const SlurmProviderConfig &config, std::string rm_address,
                             Registry &registry)
    : cfg_(config), rm_address_(std::move(rm_address)) {
  make_private_dir(cfg_.work_dir);
  // Pilots of an earlier run: those that may still be in SLURM are watched
  // again; their nodes are in the registry (down until they register again).
  for (const PilotRecord &r : registry.store().load_pilots(0)) {
    next_id_ = std::max(next_id_, r.id + 1);
    Pilot p;
    p.id = r.id;
    p.job_id = r.job_id;
    p.state = parse_state(r.state);
    p.secret = r.secret;
    p.submitted_ms = r.submitted_ms;
    p.reason = r.reason;
    std::stringstream names(r.nodes);
    for (std::string n; std::getline(names, n, ',');)
      if (!n.empty())
        p.nodes.insert(n);
    if (p.state == State::Ended)
      continue;
    if (p.job_id == 0) {
      // sbatch never answered: if the job exists after all, its name gives
      // it away and apply_snapshot() cancels it.
      end(p, registry, "the resource manager stopped before sbatch answered");
      continue;
    }
    if (p.state == State::Running)
      p.running_since_ms = registry.now();
    if (p.state == State::Cancelling) {
      p.cancel_reason = "cancelled by the resource manager before its restart";
      Command c;
      c.kind = Command::Kind::Cancel;
      c.pilot_id = p.id;
      c.job_ids = {p.job_id};
      commands_.push_back(std::move(c));
    }
    log()->info("slurm: pilot {} (job {}, {}, nodes {}) from before the restart is watched again",
                p.id, p.job_id, to_string(p.state), p.nodes.empty() ? "none yet" : join(p.nodes));
    pilots_.emplace(p.id, std::move(p));
  }
  // A node admitted just before a crash may be in the registry under its
  // job's name and missing from its pilot's record: one look at the
  // registry now, so that ending a pilot later touches its own nodes only.
  if (!pilots_.empty()) {
    std::map<uint64_t, Pilot *> jobs;
    for (auto &[id, p] : pilots_)
      if (p.job_id != 0)
        jobs[p.job_id] = &p;
    for (const NodeView &v : registry.nodes())
      if (auto it = jobs.find(job_of_node(v.node.name)); it != jobs.end())
        it->second->nodes.insert(v.node.name);
  }
  // Ids of ended pilots count too: a job name is never reused.
  for (const PilotRecord &r : registry.store().load_pilots())
    next_id_ = std::max(next_id_, r.id + 1);
  log()->info("slurm: node provider: {} to {} node(s), {} per pilot job, idle pilots cancelled "
              "after {} ms; pilots in {}",
              cfg_.min_nodes, cfg_.max_nodes, cfg_.nodes_per_job, cfg_.idle_timeout_ms,
              cfg_.work_dir);
  worker_ = std::thread([this] { work(); });
}

SlurmProvider::~SlurmProvider() {
  {
    std::lock_guard<std::mutex> g(m_);
    quit_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable())
    worker_.join();
}

// ---- worker thread ---------------------------------------------------------------

std::string SlurmProvider::tool(const char *name) const {
  return cfg_.slurm_bin_dir.empty() ? std::string(name) : cfg_.slurm_bin_dir + "/" + name;
}

void SlurmProvider::queue(Command c) {
  {
    std::lock_guard<std::mutex> g(m_);
    commands_.push_back(std::move(c));
  }
  cv_.notify_all();
}

bool SlurmProvider::execute(Command &c, Done &done) {
  const auto timeout = std::chrono::milliseconds(cfg_.command_timeout_ms);
  done.kind = c.kind;
  done.pilot_id = c.pilot_id;
  done.job_ids = c.job_ids;
  ++c.attempts;
  if (c.kind == Command::Kind::Submit) {
    slurm::CommandResult r = slurm::run({tool("sbatch"), "--parsable", c.script}, timeout);
    std::optional<uint64_t> id = r.ok ? slurm::parse_job_id(r.out) : std::nullopt;
    if (id) {
      done.ok = true;
      done.job_ids = {*id};
      return true;
    }
    done.error = r.ok ? "sbatch answered \"" + r.out + "\", not a job id" : r.describe("sbatch");
  } else {
    std::vector<std::string> argv{tool("scancel")};
    for (uint64_t id : c.job_ids)
      argv.push_back(std::to_string(id));
    slurm::CommandResult r = slurm::run(argv, timeout);
    // A job that ended meanwhile is what a cancellation wants.
    if (r.ok || r.err.find("Invalid job id") != std::string::npos ||
        r.err.find("already completing or completed") != std::string::npos) {
      done.ok = true;
      return true;
    }
    done.error = r.describe("scancel");
  }
  // A submission that timed out may have reached slurmctld: its job is
  // found by name in squeue and cancelled (apply_snapshot), so trying again
  // cannot leave two pilots running for one.
  if (c.attempts >= kMaxAttempts)
    return true;
  log()->warn("slurm: {} (attempt {} of {}); trying again in {} s", done.error, c.attempts,
              kMaxAttempts, 1 << (c.attempts - 1));
  c.not_before = SteadyClock::now() + std::chrono::seconds(1 << (c.attempts - 1));
  return false;
}

void SlurmProvider::work() {
  const auto poll_every = std::chrono::milliseconds(cfg_.poll_ms);
  auto next_poll = SteadyClock::now();
  int squeue_failures = 0;
  std::unique_lock<std::mutex> lock(m_);
  while (!quit_) {
    const auto now = SteadyClock::now();
    // The first command whose backoff has passed.
    auto ready = std::find_if(commands_.begin(), commands_.end(),
                              [&](const Command &c) { return c.not_before <= now; });
    if (ready != commands_.end()) {
      Command c = std::move(*ready);
      commands_.erase(ready);
      lock.unlock();
      Done done;
      const bool finished = execute(c, done);
      lock.lock();
      if (finished) {
        done.gen = ++gen_;
        done_.push_back(std::move(done));
        // The answer may change what squeue says: ask soon.
        next_poll = std::min(next_poll, SteadyClock::now() + std::chrono::milliseconds(50));
      } else {
        commands_.push_back(std::move(c));
      }
      continue;
    }
    if (watch_ && now >= next_poll) {
      const uint64_t gen = gen_;
      lock.unlock();
      // Every state, so that an ended job is seen with its fate (kept by
      // slurmctld for MinJobAge) rather than just gone.
      slurm::CommandResult r =
          slurm::run({tool("squeue"), "-h", "-t", "all", "--me", "-o", slurm::kSqueueFormat},
                     std::chrono::milliseconds(cfg_.command_timeout_ms));
      lock.lock();
      if (r.ok) {
        if (squeue_failures > 0)
          log()->info("slurm: squeue answers again (after {} failure(s))", squeue_failures);
        squeue_failures = 0;
        snapshot_ = Snapshot{slurm::parse_squeue(r.out), gen};
        next_poll = SteadyClock::now() + poll_every;
      } else {
        if (squeue_failures++ % kSqueueLogEvery == 0)
          log()->warn("slurm: {}; the pilots' state is not updated until it answers",
                      r.describe("squeue"));
        // Backs off to ten polling periods while it fails.
        next_poll = SteadyClock::now() + poll_every * std::min(1 + squeue_failures, 10);
      }
      continue;
    }
    // Woken by queue() and stop() too; the second is only an upper bound.
    auto wake = watch_ ? next_poll : now + std::chrono::seconds(1);
    for (const Command &c : commands_)
      wake = std::min(wake, c.not_before);
    cv_.wait_until(lock, std::max(wake, now + std::chrono::milliseconds(1)));
  }
}

// ---- loop thread -----------------------------------------------------------------

std::string SlurmProvider::pilot_dir(uint64_t id) const {
  return cfg_.work_dir + "/pilot-" + std::to_string(id);
}

SlurmProvider::Pilot *SlurmProvider::by_job(uint64_t job_id) {
  for (auto &[id, p] : pilots_)
    if (p.job_id == job_id && job_id != 0)
      return &p;
  return nullptr;
}

uint32_t SlurmProvider::live_nodes() const {
  uint32_t n = 0;
  for (const auto &[id, p] : pilots_)
    if (p.state == State::Submitting || p.state == State::Pending || p.state == State::Running)
      n += cfg_.nodes_per_job;
  return n;
}

void SlurmProvider::persist(const Pilot &p, Registry &registry) {
  PilotRecord r;
  r.id = p.id;
  r.job_id = p.job_id;
  r.state = to_string(p.state);
  r.secret = p.secret;
  r.submitted_ms = p.submitted_ms;
  r.ended_ms = p.ended_ms;
  r.reason = p.reason;
  r.nodes = join(p.nodes);
  try {
    registry.store().put_pilot(r);
  } catch (const StoreError &e) {
    // The pilot lives on in memory; only a restart would lose track of it
    // (its job then ends at its time limit).
    log()->error("slurm: cannot store pilot {} (job {}): {}", p.id, p.job_id, e.what());
  }
}

std::string SlurmProvider::write_script(const Pilot &p) const {
  const std::string dir = pilot_dir(p.id);
  std::string s = "#!/bin/bash\n";
  s += "# A pilot job of an rFaaS resource manager (nodes.provider \"slurm\"): one executor\n"
       "# manager per node, registered with the secret in the file named below.\n";
  s += "#SBATCH --job-name=" + cfg_.job_name + "-" + std::to_string(p.id) + "\n";
  s += "#SBATCH --nodes=" + std::to_string(cfg_.nodes_per_job) + "\n";
  s += "#SBATCH --ntasks-per-node=1\n";
  s += "#SBATCH --time=" + cfg_.time_limit + "\n";
  if (!cfg_.partition.empty())
    s += "#SBATCH --partition=" + cfg_.partition + "\n";
  if (!cfg_.account.empty())
    s += "#SBATCH --account=" + cfg_.account + "\n";
  s += "#SBATCH --chdir=" + dir + "\n";
  s += "#SBATCH --output=" + dir + "/job-%j.out\n";
  for (const std::string &line : cfg_.sbatch)
    s += "#SBATCH " + line + "\n";
  s += "exec " + shell_quote(cfg_.rfaas_slurm) + " --pilot --resource-manager " +
       shell_quote(rm_address_) + " --secret-file " + shell_quote(dir + "/secret") +
       " --work-dir " + shell_quote(dir) + "/job-\"$SLURM_JOB_ID\"";
  for (const std::string &o : cfg_.pilot_options)
    s += " " + shell_quote(o);
  s += "\n";
  return s;
}

bool SlurmProvider::submit(Registry &registry, const std::string &why) {
  // After a pilot that could not be submitted, SLURM is given a pause
  // rather than a submission per lease request.
  if (registry.now() < hold_until_ms_)
    return false;
  Pilot p;
  p.id = next_id_++;
  p.secret = generate_secret();
  p.submitted_ms = registry.now();
  const std::string dir = pilot_dir(p.id);
  std::string script;
  try {
    make_private_dir(dir);
    write_new_file(dir + "/secret", to_hex(p.secret) + "\n", 0600);
    script = dir + "/pilot.sh";
    write_new_file(script, write_script(p), 0700);
  } catch (const std::exception &e) {
    log()->error("slurm: cannot prepare pilot {}: {}", p.id, e.what());
    hold_until_ms_ = registry.now() + kSubmitPauseMs;
    return false;
  }
  log()->info("slurm: submitting pilot {} ({} node(s)): {}", p.id, cfg_.nodes_per_job, why);
  persist(p, registry);
  Command c;
  c.kind = Command::Kind::Submit;
  c.pilot_id = p.id;
  c.script = script;
  pilots_.emplace(p.id, std::move(p));
  {
    std::lock_guard<std::mutex> g(m_);
    watch_ = true;
  }
  queue(std::move(c));
  return true;
}

void SlurmProvider::cancel(Pilot &p, Registry &registry, const std::string &why) {
  if (p.state == State::Cancelling || p.state == State::Ended)
    return;
  log()->info("slurm: cancelling pilot {} (job {}): {}", p.id, p.job_id, why);
  // No new lease lands on its nodes while SLURM ends it.
  for (const std::string &n : p.nodes)
    registry.drain(n, true);
  p.state = State::Cancelling;
  p.cancel_reason = "cancelled by the resource manager: " + why;
  persist(p, registry);
  Command c;
  c.kind = Command::Kind::Cancel;
  c.pilot_id = p.id;
  c.job_ids = {p.job_id};
  queue(std::move(c));
}

void SlurmProvider::drop_nodes(Pilot &p, Registry &registry, const std::string &reason) {
  // p.nodes holds every node of the job the registry knows: admit() adds
  // each, and the constructor added those a crash kept out of the record.
  for (const std::string &n : p.nodes) {
    // A node whose executor manager said goodbye before SLURM's answer came
    // is down already: its ended leases learn why now.
    registry.explain_down(n, reason);
    if (!registry.node(n))
      continue;
    if (Status s = registry.mark_down(n, reason); !s.ok())
      log()->error("slurm: cannot mark node {} down: {}", n, s.message);
    if (Status s = registry.remove_node(n, true); !s.ok())
      log()->error("slurm: cannot remove node {}: {}", n, s.message);
  }
}

void SlurmProvider::end(Pilot &p, Registry &registry, const std::string &reason) {
  if (p.state == State::Ended)
    return;
  drop_nodes(p, registry, reason);
  p.state = State::Ended;
  p.ended_ms = registry.now();
  p.reason = reason;
  log()->info("slurm: pilot {} (job {}) ended: {}; node(s) {} removed", p.id, p.job_id, reason,
              p.nodes.empty() ? "none" : join(p.nodes));
  persist(p, registry);
  // Its executor managers have read the secret; nobody needs it any more.
  ::unlink((pilot_dir(p.id) + "/secret").c_str());
}

void SlurmProvider::take_answers(Registry &registry) {
  std::vector<Done> done;
  std::optional<Snapshot> snap;
  {
    std::lock_guard<std::mutex> g(m_);
    done.swap(done_);
    snap.swap(snapshot_);
  }
  for (Done &d : done) {
    auto it = pilots_.find(d.pilot_id);
    if (it == pilots_.end())
      continue;
    Pilot &p = it->second;
    if (d.kind == Command::Kind::Submit) {
      if (!d.ok) {
        log()->error("slurm: pilot {} could not be submitted: {}; no new pilot for {} s", p.id,
                     d.error, kSubmitPauseMs / 1000);
        hold_until_ms_ = registry.now() + kSubmitPauseMs;
        end(p, registry, "sbatch failed: " + d.error);
        continue;
      }
      p.job_id = d.job_ids.front();
      p.known_gen = d.gen;
      if (p.state == State::Submitting)
        p.state = State::Pending;
      log()->info("slurm: pilot {} is job {}", p.id, p.job_id);
      persist(p, registry);
    } else if (!d.ok) {
      // The job runs on (to its time limit); the next idle check or stop
      // tries again.
      log()->error("slurm: pilot {} (job {}) could not be cancelled: {}", p.id, p.job_id, d.error);
      p.state = State::Running;
      p.idle_since_ms = 0;
      for (const std::string &n : p.nodes)
        registry.drain(n, false);
      persist(p, registry);
    }
  }
  if (snap)
    apply_snapshot(*snap, registry);
}

void SlurmProvider::apply_snapshot(const Snapshot &snap, Registry &registry) {
  const uint64_t now = registry.now();
  for (auto &[id, p] : pilots_) {
    if (p.job_id == 0 || p.state == State::Ended || snap.gen < p.known_gen)
      continue;
    auto it = snap.jobs.find(p.job_id);
    if (it == snap.jobs.end()) {
      end(p, registry,
          p.cancel_reason.empty()
              ? "SLURM no longer knows job " + std::to_string(p.job_id) + " (it ended)"
              : p.cancel_reason);
      continue;
    }
    const slurm::JobInfo &j = it->second;
    if (j.state == "COMPLETING") {
      // Its processes are being ended: the nodes go now, the pilot's fate
      // (CANCELLED, TIMEOUT, NODE_FAIL...) is recorded once SLURM says it.
      drop_nodes(p, registry,
                 p.cancel_reason.empty() ? "SLURM is ending pilot job " + std::to_string(p.job_id)
                                         : p.cancel_reason);
      if (p.state != State::Cancelling) {
        p.state = State::Cancelling;
        persist(p, registry);
      }
      continue;
    }
    if (slurm::is_terminal(j.state)) {
      std::string fate = "job " + std::to_string(p.job_id) + " " + j.state;
      if (!j.reason.empty() && j.reason != "None")
        fate += " (" + j.reason + ")";
      end(p, registry,
          p.cancel_reason.empty() ? "SLURM ended pilot " + fate : p.cancel_reason + "; " + fate);
      continue;
    }
    if (slurm::is_running(j.state)) {
      if (auto names = slurm::expand_hostlist(j.nodelist))
        p.slurm_nodes = std::set<std::string>(names->begin(), names->end());
      if (p.state == State::Pending) {
        p.state = State::Running;
        p.running_since_ms = now;
        log()->info("slurm: pilot {} (job {}) runs on {}", p.id, p.job_id, j.nodelist);
        persist(p, registry);
      }
    }
  }
  // A job of ours that no live pilot owns (an sbatch that timed out but
  // reached slurmctld, a pilot that ended while squeue was silent): its
  // name carries the id of a pilot this resource manager made.
  std::vector<uint64_t> orphans;
  const std::string prefix = cfg_.job_name + "-";
  for (const auto &[job, info] : snap.jobs) {
    if (slurm::is_terminal(info.state) || info.name.compare(0, prefix.size(), prefix) != 0)
      continue;
    const std::string digits = info.name.substr(prefix.size());
    if (digits.empty() || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const uint64_t pilot = std::stoull(digits);
    if (pilot >= next_id_)
      continue; // not one of ours
    auto it = pilots_.find(pilot);
    if (it == pilots_.end() || it->second.state == State::Ended ||
        (it->second.job_id != 0 && it->second.job_id != job))
      orphans.push_back(job);
  }
  if (!orphans.empty()) {
    std::string list;
    for (uint64_t j : orphans)
      list += (list.empty() ? "" : " ") + std::to_string(j);
    log()->warn("slurm: job(s) {} are pilots of this resource manager that no live pilot owns; "
                "cancelling them",
                list);
    Command c;
    c.kind = Command::Kind::Cancel;
    c.job_ids = orphans;
    queue(std::move(c));
  }
}

void SlurmProvider::watch_running(Registry &registry) {
  const uint64_t now = registry.now();
  for (auto &[id, p] : pilots_) {
    if (p.state != State::Running)
      continue;
    if (p.nodes.size() < cfg_.nodes_per_job) {
      if (p.running_since_ms != 0 && now - p.running_since_ms > cfg_.start_timeout_ms)
        cancel(p, registry,
               std::to_string(p.nodes.size()) + " of its " + std::to_string(cfg_.nodes_per_job) +
                   " executor manager(s) registered within nodes.slurm.start_timeout_ms (" +
                   std::to_string(cfg_.start_timeout_ms) + " ms); see " + pilot_dir(p.id));
      continue;
    }
    bool idle = true;
    for (const std::string &n : p.nodes) {
      std::optional<NodeView> v = registry.node(n);
      if (v && v->active_leases > 0)
        idle = false;
    }
    if (!idle) {
      p.idle_since_ms = 0;
      continue;
    }
    if (p.idle_since_ms == 0)
      p.idle_since_ms = now;
    if (now - p.idle_since_ms >= cfg_.idle_timeout_ms &&
        live_nodes() >= cfg_.min_nodes + cfg_.nodes_per_job)
      cancel(p, registry,
             "its node(s) held no lease for " + std::to_string(now - p.idle_since_ms) +
                 " ms (nodes.slurm.idle_timeout_ms " + std::to_string(cfg_.idle_timeout_ms) + ")");
  }
}

void SlurmProvider::tick(Registry &registry) {
  take_answers(registry);
  watch_running(registry);
  while (live_nodes() < cfg_.min_nodes && live_nodes() + cfg_.nodes_per_job <= cfg_.max_nodes)
    if (!submit(registry, "below nodes.slurm.min_nodes (" + std::to_string(cfg_.min_nodes) + ")"))
      break;
  bool watch = false;
  for (const auto &[id, p] : pilots_)
    watch = watch || p.state != State::Ended;
  // Ended pilots are forgotten here (the store keeps them for REST).
  for (auto it = pilots_.begin(); it != pilots_.end();)
    it = it->second.state == State::Ended ? pilots_.erase(it) : std::next(it);
  std::lock_guard<std::mutex> g(m_);
  watch_ = watch;
}

std::optional<Provisioning> SlurmProvider::unplaceable(const LeaseRequest &request,
                                                       Registry &registry) {
  const std::string wait = "; ask again in " + std::to_string(cfg_.retry_after_ms) + " ms";
  for (const auto &[id, p] : pilots_) {
    const bool starting = p.state == State::Submitting || p.state == State::Pending ||
                          (p.state == State::Running && p.nodes.size() < cfg_.nodes_per_job);
    if (!starting)
      continue;
    std::string what = p.job_id ? "pilot job " + std::to_string(p.job_id) : "a pilot job";
    what += p.state == State::Running   ? " is starting its executor managers"
            : p.state == State::Pending ? " waits for SLURM to start it"
                                        : " is being submitted";
    return Provisioning{cfg_.retry_after_ms, "provisioning: " + what + wait};
  }
  if (live_nodes() + cfg_.nodes_per_job > cfg_.max_nodes)
    return std::nullopt;
  if (!submit(registry, "a lease for " + std::to_string(request.cores) + " core(s) from " +
                            request.client + " found no room"))
    return std::nullopt;
  return Provisioning{cfg_.retry_after_ms,
                      "provisioning: a pilot job was submitted to SLURM" + wait};
}

bool SlurmProvider::admit(const RegistrationClaim &claim, const LeaseToken &proof,
                          Registry &registry) {
  const uint64_t job = job_of_node(claim.node);
  Pilot *p = job ? by_job(job) : nullptr;
  if (!p || (p->state != State::Pending && p->state != State::Running))
    return false;
  if (!verify_registration(claim, proof, p->secret)) {
    log()->warn("slurm: node {} claims pilot job {} but its proof does not verify under that "
                "job's secret",
                claim.node, job);
    return false;
  }
  if (p->nodes.size() >= cfg_.nodes_per_job) {
    log()->warn("slurm: node {} refused: pilot job {} has all its {} node(s) ({})", claim.node, job,
                cfg_.nodes_per_job, join(p->nodes));
    return false;
  }
  // Once squeue has named the job's nodes, the name must be one of them.
  const std::string base = claim.node.substr(0, claim.node.rfind("-j"));
  if (!p->slurm_nodes.empty() && !p->slurm_nodes.count(base)) {
    log()->warn("slurm: node {} refused: job {} runs on {}, not on {}", claim.node, job,
                join(p->slurm_nodes), base);
    return false;
  }
  Result<Node> added =
      registry.add_node(claim.node, claim.address, claim.cores, claim.memory_mib, p->secret);
  if (!added.ok()) {
    log()->warn("slurm: node {} of pilot job {} cannot be added: {}", claim.node, job,
                added.message);
    return false;
  }
  p->nodes.insert(claim.node);
  if (p->state == State::Pending) {
    // Its executor manager is faster than the next squeue.
    p->state = State::Running;
    p->running_since_ms = registry.now();
  }
  persist(*p, registry);
  return true;
}

void SlurmProvider::stop(Registry &registry) {
  {
    std::lock_guard<std::mutex> g(m_);
    quit_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable())
    worker_.join(); // a command in flight ends within its deadline
  take_answers(registry);
  std::vector<uint64_t> jobs;
  for (const auto &[id, p] : pilots_)
    if (p.state != State::Ended && p.job_id != 0)
      jobs.push_back(p.job_id);
  if (!jobs.empty()) {
    std::vector<std::string> argv{tool("scancel")};
    std::string list;
    for (uint64_t j : jobs) {
      argv.push_back(std::to_string(j));
      list += (list.empty() ? "" : " ") + std::to_string(j);
    }
    slurm::CommandResult r = slurm::run(argv, std::chrono::milliseconds(cfg_.command_timeout_ms));
    if (r.ok || r.err.find("Invalid job id") != std::string::npos)
      log()->info("slurm: cancelled pilot job(s) {}", list);
    else
      log()->error("slurm: {}; pilot job(s) {} end at their time limit", r.describe("scancel"),
                   list);
  }
  for (auto &[id, p] : pilots_)
    end(p, registry, "the resource manager stopped and cancelled its pilots");
  pilots_.clear();
}

} // namespace rfaas::rm
