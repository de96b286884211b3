#include "executor_manager/manager_state.hpp"

#include <algorithm>
#include <csignal>
#include <string>

#include <spdlog/spdlog.h>

namespace rfaas::manager {

using std::chrono::milliseconds;

void Manager::executor_event(const ZygoteEvent &e) {
  ++events_;
  if (e.kind == ZygoteEvent::Kind::Died) {
    for (auto &kv : allocations_)
      if (!kv.second->exited && kv.second->pid > 0) {
        kv.second->exited = true;
        kv.second->exit_code = -SIGKILL;
        kv.second->exited_at = Clock::now();
      }
    // Its pooled executors died with it: their secrets are void.
    pooled_links_.clear();
    zygote_failed("the executor zygote " + std::to_string(e.pid) + " died");
    return;
  }
  if (e.kind == ZygoteEvent::Kind::Pooled) {
    auto p = std::make_unique<PooledLink>();
    p->pid = e.pid;
    p->secret = e.secret;
    p->since = Clock::now();
    pooled_links_[e.pid] = std::move(p);
    return;
  }
  if (e.kind == ZygoteEvent::Kind::Unpooled) {
    pooled_links_.erase(e.pid);
    return;
  }
  auto it = allocations_.find(e.allocation);
  if (e.kind == ZygoteEvent::Kind::Started && e.pooled && it == allocations_.end())
    pooled_links_.erase(e.pid); // its allocation is gone already: the secret is spent
  if (e.kind == ZygoteEvent::Kind::Failed)
    spdlog::error("zygote could not start the executor of allocation {:x}: {}", e.allocation,
                  e.reason);
  if (it == allocations_.end())
    return;
  Allocation &a = *it->second;
  switch (e.kind) {
  case ZygoteEvent::Kind::Started:
    if (a.pid > 0 && a.pid != e.pid && !a.exited) {
      // Its first executor, pooled, died as the zygote handed it the
      // allocation (the zygote logged it): `e.pid` takes the allocation
      // over with the same LaunchSpec, and connects to the client, which
      // has its answer already. The dead one's link, if bound, goes.
      spdlog::info("allocation {:x}: executor pid {}{} replaces {}, which died as it took the "
                   "allocation",
                   a.id, e.pid, e.pooled ? " (pooled)" : "", a.pid);
      pooled_links_.erase(a.pid);
      if (a.exec_connected) {
        a.exec_conn.close();
        a.exec_connected = false;
        a.exec_done = false;
      }
      a.pid = e.pid;
      a.pooled = e.pooled;
      ++executors_started_;
      executors_pooled_ += e.pooled ? 1 : 0;
      if (e.pooled && a.answered)
        bind_pooled_link(a, e.pid);
      if (e.pooled && a.client_gone)
        pooled_links_.erase(e.pid);
      break;
    }
    a.pid = e.pid;
    a.pooled = e.pooled;
    ++executors_started_;
    executors_pooled_ += e.pooled ? 1 : 0;
    // Its pooled link is bound once the client has its answer
    // (handle_allocation_request): binding registers and posts, which the
    // answer need not wait for. An allocation given up already never will.
    if (e.pooled && (a.client_gone || a.exited))
      pooled_links_.erase(e.pid);
    break;
  case ZygoteEvent::Kind::Failed:
    a.exited = true;
    a.exit_code = 1;
    a.exited_at = Clock::now();
    a.pid = 0;
    break;
  case ZygoteEvent::Kind::Exited:
    pooled_links_.erase(e.pid);
    a.exited = true;
    a.exit_code = e.code;
    a.exited_at = Clock::now();
    break;
  case ZygoteEvent::Kind::Died:
  case ZygoteEvent::Kind::Pooled:
  case ZygoteEvent::Kind::Unpooled:
    break;
  }
}

void Manager::zygote_failed(const std::string &what) {
  const auto now = Clock::now();
  if (zygote_failures_ == 0 || now - zygote_last_failure_ >= kZygoteBurstGap) {
    zygote_failures_ = 0;
    zygote_backoff_ = milliseconds(0);
  }
  ++zygote_failures_;
  zygote_last_failure_ = now;
  if (zygote_failures_ >= 2)
    zygote_backoff_ = std::min<milliseconds>(
        kZygoteBackoffMax, zygote_backoff_.count() == 0 ? kZygoteBackoffStep : zygote_backoff_ * 2);
  zygote_restart_at_ = now + zygote_backoff_;
  zygote_restart_due_ = true;
  if (zygote_failures_ == 1)
    spdlog::error("{}; restarting it (should it keep failing: with back-off up to {} ms, logged "
                  "at debug)",
                  what, kZygoteBackoffMax.count());
  else
    spdlog::debug("{}; {} failures in a row, restarting it in {} ms", what, zygote_failures_,
                  zygote_backoff_.count());
}

void Manager::restart_zygote() {
  if (!zygote_restart_due_ || zygote_.running() || Clock::now() < zygote_restart_at_)
    return;
  zygote_restart_due_ = false;
  ++events_;
  spdlog::debug("restarting the executor zygote (failure {} in a row)", zygote_failures_);
  try {
    zygote_.start(milliseconds(cfg_.executor_start_ms));
  } catch (const std::exception &ex) {
    zygote_failed(std::string("the executor zygote could not be restarted: ") + ex.what());
  }
}

void Manager::signal_executor(Allocation &a, int sig) {
  if (a.exited)
    return;
  zygote_.signal(a.id, sig);
}

void Manager::poll_executors() {
  for (auto &kv : allocations_) {
    Allocation &a = *kv.second;
    if (a.lease_end_untold && !a.exited && !tell_lease_ended(a)) {
      a.term_at = Clock::now();
      a.kill_at = a.term_at + milliseconds(cfg_.shutdown_grace_ms);
    }
    if (!a.exec_connected || a.exec_done)
      continue;
    for (int i = 0; i < 8 && !a.exec_done; ++i) {
      proto::ControlMessage m = a.exec_channel.poll();
      if (m.status == proto::ChannelStatus::Timeout)
        break;
      ++events_;
      if (m.status == proto::ChannelStatus::SendFailed) {
        spdlog::warn("allocation {:x}: cannot advertise the accounting record: {}", a.id,
                     a.exec_channel.last_error());
        continue;
      }
      if (m.status == proto::ChannelStatus::Closed || m.status == proto::ChannelStatus::Shutdown) {
        a.exec_done = true;
        break;
      }
      proto::Accounting acc;
      if (m.status == proto::ChannelStatus::Ok && m.header.type == proto::MessageType::Accounting) {
        if (proto::decode(m.data, m.size, acc) && acc.allocation_id == a.id)
          a.accounting.add(acc.counters);
        else
          spdlog::warn("allocation {:x}: dropping a bad Accounting message", a.id);
      } else {
        spdlog::warn("allocation {:x}: executor sent something unexpected", a.id);
      }
    }
  }
}
} // namespace rfaas::manager
