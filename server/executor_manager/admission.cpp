#include "executor_manager/admission.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace rfaas::manager {

namespace {
constexpr std::chrono::seconds kLogInterval{1};
}

Admission::Admission(const AdmissionConfig &config) : cfg_(config) {}

size_t Admission::pending_from(const std::string &peer) const {
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

void Admission::note(Throttle &t, const std::string &text, Clock::time_point now) {
  if (t.last != Clock::time_point{} && now - t.last < kLogInterval) {
    ++t.suppressed;
    t.last_text = text;
    return;
  }
  if (t.suppressed)
    spdlog::warn("{} (and {} more like it in the last {} s)", text, t.suppressed,
                 std::chrono::duration_cast<std::chrono::seconds>(now - t.last).count());
  else
    spdlog::warn("{}", text);
  t.last = now;
  t.suppressed = 0;
}

bool Admission::may_admit(const std::string &peer, Clock::time_point now) {
  if (pending_from(peer) < cfg_.max_pending_per_peer)
    return true;
  ++counters_.refused_per_peer;
  note(refused_log_,
       "admission: refusing a connection from " + peer + ": it holds " +
           std::to_string(cfg_.max_pending_per_peer) +
           " connections without an allocation (admission.max_pending_per_peer)",
       now);
  return false;
}

Admission::Ticket Admission::victim(Clock::time_point now) {
  if (pending_.size() < cfg_.max_pending)
    return 0;
  // The peer holding the most places gives one up: its oldest (among equals,
  // the oldest of all, so that peers holding one place each take turns).
  uint32_t most = 0;
  for (const auto &kv : per_peer_)
    most = std::max(most, kv.second);
  for (const auto &kv : pending_) {
    if (pending_from(kv.second.peer) != most)
      continue;
    ++counters_.evicted_full;
    note(full_log_,
         "admission: " + std::to_string(pending_.size()) +
             " connections without an allocation (admission.max_pending); closing the oldest "
             "of " +
             kv.second.peer + ", which holds " + std::to_string(most),
         now);
    return kv.first;
  }
  return 0;
}

Admission::Ticket Admission::admitted(const std::string &peer, Clock::time_point now) {
  Ticket t = next_++;
  pending_[t] = Entry{peer, now};
  ++per_peer_[peer];
  ++counters_.admitted;
  counters_.peak_pending = std::max<uint64_t>(counters_.peak_pending, pending_.size());
  return t;
}

void Admission::forget_peer(const std::string &peer) {
  auto it = per_peer_.find(peer);
  if (it != per_peer_.end() && --it->second == 0)
    per_peer_.erase(it);
}

void Admission::granted(Ticket t) {
  auto it = pending_.find(t);
  if (it == pending_.end())
    return;
  ++counters_.granted;
  forget_peer(it->second.peer);
  pending_.erase(it);
}

void Admission::released(Ticket t) {
  auto it = pending_.find(t);
  if (it == pending_.end())
    return;
  forget_peer(it->second.peer);
  pending_.erase(it);
}

std::vector<Admission::Ticket> Admission::expired(Clock::time_point now) {
  std::vector<Ticket> out;
  auto limit = std::chrono::milliseconds(cfg_.request_ms);
  for (const auto &kv : pending_) {
    // Tickets grow with time: the first young one ends the scan.
    if (now - kv.second.since <= limit)
      break;
    out.push_back(kv.first);
    ++counters_.evicted_deadline;
    note(deadline_log_,
         "admission: closing the connection of " + kv.second.peer + ": no allocation within " +
             std::to_string(cfg_.request_ms) + " ms (admission.request_ms)",
         now);
  }
  return out;
}

void Admission::setup_failed(const std::string &peer, const std::string &why,
                             Clock::time_point now) {
  ++counters_.failed_setup;
  note(failed_log_, "admission: connection setup with " + peer + " failed: " + why, now);
}

void Admission::bad_input(const std::string &what, Clock::time_point now) {
  ++counters_.bad_input;
  note(bad_log_, what, now);
}

void Admission::peer_event(const std::string &what, Clock::time_point now) {
  note(peer_log_, what, now);
}

std::string Admission::describe() const {
  const Counters &c = counters_;
  return "admission: " + std::to_string(pending_.size()) + " pending now (peak " +
         std::to_string(c.peak_pending) + "); " + std::to_string(c.admitted) + " admitted, " +
         std::to_string(c.granted) + " granted an allocation, " +
         std::to_string(c.refused_per_peer) + " refused (per-peer limit), " +
         std::to_string(c.evicted_full) + " evicted (total limit), " +
         std::to_string(c.evicted_deadline) + " evicted (deadline), " +
         std::to_string(c.failed_setup) + " failed during setup, " + std::to_string(c.bad_input) +
         " malformed hellos or messages";
}

std::string Admission::periodic(Clock::time_point now) {
  if (cfg_.stats_interval_s == 0 ||
      now - last_report_ < std::chrono::seconds(cfg_.stats_interval_s))
    return {};
  last_report_ = now;
  const Counters &c = counters_, &r = reported_;
  bool changed = c.admitted != r.admitted || c.refused_per_peer != r.refused_per_peer ||
                 c.evicted_full != r.evicted_full || c.evicted_deadline != r.evicted_deadline ||
                 c.failed_setup != r.failed_setup || c.bad_input != r.bad_input ||
                 pending_.size() != reported_pending_;
  reported_ = counters_;
  reported_pending_ = pending_.size();
  return changed ? describe() : std::string();
}

void Admission::flush(Clock::time_point now) {
  for (Throttle *t :
       {&refused_log_, &full_log_, &deadline_log_, &failed_log_, &bad_log_, &peer_log_})
    if (t->suppressed) {
      spdlog::warn("{} (and {} more like it)", t->last_text, t->suppressed - 1);
      t->suppressed = 0;
      t->last = now;
    }
}

} // namespace rfaas::manager
