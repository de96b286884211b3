#include "executor_manager/manager_state.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "common/launch_spec.hpp"

namespace rfaas::manager {

using std::chrono::milliseconds;

namespace {

void random_bytes(void *out, size_t n) {
  auto *p = static_cast<uint8_t *>(out);
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    p += r;
    n -= static_cast<size_t>(r);
  }
}

std::string describe_exit(long code) {
  if (code < 0)
    return std::string("killed by signal ") + std::to_string(-code) + " (" +
           strsignal(static_cast<int>(-code)) + ")";
  switch (code) {
  case server::ExitOk:
    return "exited normally";
  case server::ExitSetupFailed:
    return "exited: setup failed (see its log)";
  case server::ExitFunctionCrashed:
    return "exited after a function crashed";
  case server::ExitTerminated:
    return "exited on SIGTERM";
  case server::ExitClientLost:
    return "exited: its client was unreachable";
  case server::ExitRemoteWriteFault:
    return "ended: its client wrote outside its input slots (into a guard page between them); "
           "the write was refused and the client got bad_request";
  default:
    return "exited with code " + std::to_string(code);
  }
}

} // namespace

void Manager::handle_allocation_request(Client &c, const uint8_t *msg, size_t len) {
  using E = proto::ErrorCode;
  proto::AllocationRequest req;
  std::vector<proto::BufferDescriptor> results;
  proto::WireResult r = proto::decode(msg, len, req, results);
  if (!r)
    return reply(c, proto::reply_code(r.error), 0, 0, proto::describe(r));
  if (c.requested)
    return reply(c, E::BadRequest, 0, 0, "one allocation per connection");
  if (proto::get_text(req.client_host).empty())
    return reply(c, E::BadRequest, 0, 0, "AllocationRequest names no client listener");
  try {
    // host + port, or an opaque endpoint name (port 0) where addresses are not IP.
    rdmalib::Address client = rdmalib::Address::from_host_text(
        std::string(proto::get_text(req.client_host)), req.client_port);
    if (!client.opaque() && client.port == 0)
      return reply(c, E::BadRequest, 0, 0, "AllocationRequest names no client listener port");
    // The executor's workers would connect to this manager itself, which
    // then rejects them and ends the allocation while they connect: on shm
    // an endpoint that vanishes while its connection request waits in the
    // listener's queue crashed the manager (docs/BACKEND-BUGS.md, "a peer
    // that vanishes during connection setup"). No fabric call before this.
    if (client == listener_.address() || fabric_.names_own_endpoint(client))
      return reply(c, E::BadRequest, 0, 0,
                   "AllocationRequest names this executor manager's own endpoint (" +
                       client.to_string() + ") as the client's listener");
  } catch (const rdmalib::Error &e) {
    return reply(c, E::BadRequest, 0, 0, std::string("AllocationRequest.client_host: ") + e.what());
  }
  if (req.image != 0 &&
      (cfg_.sandbox.kind != server::SandboxKind::Oci || req.image > cfg_.sandbox.oci_images.size()))
    return reply(c, E::BadRequest, 0, 0,
                 "image " + std::to_string(req.image) + " is not in this manager's allow-list (" +
                     (cfg_.sandbox.kind == server::SandboxKind::Oci
                          ? std::to_string(cfg_.sandbox.oci_images.size()) + " image(s)"
                          : std::string("its sandbox is not oci")) +
                     ")");
  if (req.input_slots > cfg_.max_input_slots)
    return reply(c, E::ResourcesUnavailable, 0, 0,
                 "input_slots above this manager's limit of " +
                     std::to_string(cfg_.max_input_slots));
  if (req.input_slot_size <= proto::kSlotPrefix || req.input_slot_size > cfg_.max_slot_size)
    return reply(c, E::ResourcesUnavailable, 0, 0,
                 "input_slot_size must be " + std::to_string(proto::kSlotPrefix + 1) + ".." +
                     std::to_string(cfg_.max_slot_size));
  for (const auto &d : results)
    if (d.slot_size > cfg_.max_slot_size)
      return reply(c, E::ResourcesUnavailable, 0, 0,
                   "result slot_size above this manager's limit of " +
                       std::to_string(cfg_.max_slot_size));
  if (req.library_size == 0 || req.library_size > cfg_.max_library_size)
    return reply(c, E::ResourcesUnavailable, 0, 0,
                 "library_size must be 1.." + std::to_string(cfg_.max_library_size));
  if (allocations_.size() >= cfg_.max_allocations)
    return reply(c, E::ResourcesUnavailable, 0, 0, "too many allocations on this node");
  uint32_t memory = req.memory_mib ? req.memory_mib : cfg_.default_memory_mib;
  if (rm_) {
    // The lease bounds what its allocations on this node hold together. An
    // allocation whose client left is ending: its cores come back with its
    // executor (until then the free-core check below answers
    // resources_unavailable, which clients wait out).
    uint64_t cores_held = 0, memory_held = 0;
    for (const auto &kv : allocations_)
      if (kv.second->lease_id == c.lease_id && !kv.second->exited && !kv.second->client_gone) {
        cores_held += kv.second->workers;
        memory_held += kv.second->memory_mib;
      }
    if (cores_held + req.cores > c.lease_cores)
      return reply(c, E::LeaseInvalid, 0, 0,
                   "lease_invalid: lease " + std::to_string(c.lease_id) + " holds " +
                       std::to_string(c.lease_cores) + " core(s) here, " +
                       std::to_string(cores_held) + " in use, " + std::to_string(req.cores) +
                       " requested");
    if (c.lease_memory_mib && memory_held + memory > c.lease_memory_mib)
      return reply(c, E::LeaseInvalid, 0, 0,
                   "lease_invalid: lease " + std::to_string(c.lease_id) + " holds " +
                       std::to_string(c.lease_memory_mib) + " MiB here, " +
                       std::to_string(memory_held) + " in use, " + std::to_string(memory) +
                       " requested");
  }
  if (memory_used_ + static_cast<uint64_t>(memory) > cfg_.memory_mib)
    return reply(c, E::ResourcesUnavailable, 0, 0,
                 std::to_string(memory) + " MiB requested, " +
                     std::to_string(cfg_.memory_mib - memory_used_) + " MiB free");
  std::vector<size_t> free_slots;
  for (size_t i = 0; i < core_used_.size() && free_slots.size() < req.cores; ++i)
    if (!core_used_[i])
      free_slots.push_back(i);
  if (free_slots.size() < req.cores)
    return reply(c, E::ResourcesUnavailable, 0, 0,
                 std::to_string(req.cores) + " cores requested, " +
                     std::to_string(std::count(core_used_.begin(), core_used_.end(), false)) +
                     " free");
  if (!zygote_.running())
    return reply(c, E::Internal, 0, 0, "the executor zygote is not running");

  auto a = std::make_unique<Allocation>();
  do
    random_bytes(&a->id, sizeof a->id);
  while (a->id == 0 || allocations_.count(a->id));
  random_bytes(a->secret.bytes, sizeof a->secret.bytes);
  a->core_slots = free_slots;
  a->lease_id = rm_ ? c.lease_id : 0;
  a->memory_mib = memory;
  a->workers = req.cores;
  a->started = Clock::now();
  a->client_peer = c.peer;
  if (fabric_.capabilities().atomics) {
    a->record = rdmalib::Buffer<uint64_t>(fabric_, 4, rdmalib::AccessAll);
    a->has_record = true;
  }
  server::LaunchSpec spec;
  spec.allocation_id = a->id;
  spec.secret = a->secret;
  for (size_t s : free_slots)
    spec.cores.push_back(cfg_.cores[s]);
  spec.memory_mib = memory;
  spec.device = device_;
  spec.manager_host = listener_.address().host_text();
  spec.manager_port = listener_.address().port;
  spec.connect_ms = cfg_.workers_connected_ms;
  spec.library_loaded_ms = cfg_.library_loaded_ms;
  spec.seccomp = cfg_.sandbox.kind != server::SandboxKind::Process && cfg_.sandbox.seccomp;
  // Only a verified lease names an owner; the zygote decides whether the
  // executor runs as it (Sandbox::identity_for).
  spec.owner_uid = c.lease_ok ? c.lease_owner_uid : proto::kAnonymousUid;
  spec.request.assign(msg, msg + r.size);
  std::string text = spec.serialize();
  uint64_t id = a->id;
  Allocation &ref = *a;
  allocations_[id] = std::move(a);
  for (size_t s : free_slots)
    core_used_[s] = true;
  memory_used_ += memory;
  c.requested = true;
  c.allocation = id;

  // A pooled executor whose link ended since the last look is let go before
  // this spawn reaches the zygote, which then gives the allocation another.
  poll_pooled_links();
  if (!zygote_.spawn(text)) {
    ref.exited = true;
    ref.exit_code = 1;
    ref.client_gone = true;
    return reply(c, E::Internal, 0, 0, "cannot reach the executor zygote");
  }
  auto deadline = Clock::now() + milliseconds(cfg_.executor_start_ms);
  // A zygote that dies meanwhile is restarted later (zygote_failed), without
  // this allocation's spec: its executor never starts.
  while (ref.pid < 0 && !ref.exited && zygote_.running() && Clock::now() < deadline)
    zygote_.read(10);
  if (ref.pid <= 0) {
    ref.client_gone = true;
    if (!ref.exited) {
      ref.exited = true;
      ref.exit_code = 1;
    }
    return reply(c, E::Internal, 0, 0, "the executor did not start");
  }
  spdlog::info("allocation {:x}: {} core(s), {} MiB, hot {} ms, client {}, executor pid {}{}", id,
               req.cores, memory, req.hot_timeout_ms, c.peer, ref.pid,
               ref.pooled ? " (pooled)" : "");
  reply(c, E::Ok, id, req.cores, "");
  ref.answered = true;
  // After the answer, before the client can ship its code (and with it a
  // function that could read the pooled executor's memory): the link's
  // secret is spent before anything of the tenant runs there.
  if (ref.pooled)
    bind_pooled_link(ref, ref.pid);
}

void Manager::tick() {
  auto now = Clock::now();
  admission_tick(now);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    Allocation &a = *it->second;
    if (!a.exited && a.client_gone) {
      if (!a.term_sent && now >= a.term_at) {
        signal_executor(a, SIGTERM);
        a.term_sent = true;
      } else if (a.term_sent && !a.kill_sent && now >= a.kill_at) {
        spdlog::warn("allocation {:x}: executor ignored SIGTERM; killing it", a.id);
        signal_executor(a, SIGKILL);
        a.kill_sent = true;
      }
    }
    if (a.exited && a.answered && !a.client_gone && !a.client_told) {
      a.client_told = true;
      tell_client_ended(a);
    }
    // An executor that ended on its own (crash, setup failure): its client
    // learns it from the worker connections; the allocation ends here.
    bool drained = !a.exec_connected || a.exec_done || now - a.exited_at > milliseconds(500);
    if (a.exited && drained) {
      finish(a);
      for (auto &c : clients_) {
        if (c->allocation != a.id)
          continue;
        c->allocation = 0;
        // Where the fabric reports no dead peer, the client's link to us
        // would stay open for ever; its executor could not reach it, so it
        // is gone (or cut off, and its allocation is over anyway).
        if (a.exit_code == server::ExitClientLost && !c->closed) {
          spdlog::warn("client {}: its executor could not reach it; dropping it", c->peer);
          c->closed = true;
          c->conn.close();
        }
      }
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
}

void Manager::tell_client_ended(const Allocation &a) {
  // Its client's link was dropped for it (below): nobody to tell.
  if (a.exit_code == server::ExitClientLost)
    return;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  for (auto &cp : clients_) {
    Client &c = *cp;
    if (c.closed || c.allocation != a.id)
      continue;
    proto::AllocationResponse notice;
    notice.allocation_id = a.id;
    notice.status = proto::ErrorCode::ShuttingDown;
    proto::set_text_truncated(notice.message, std::string("the executor on node ") + host + ": " +
                                                  describe_exit(a.exit_code));
    // Posted, not sent: the loop must not wait on a client that is slow or
    // gone; a busy send area means the client is mid-exchange (its workers
    // report to it anyway).
    proto::ChannelStatus st =
        c.channel.send_idle() ? c.channel.post(notice) : proto::ChannelStatus::Timeout;
    spdlog::debug("allocation {:x}: told client {} that its executor {}: {}", a.id, c.peer,
                  describe_exit(a.exit_code), proto::to_string(st));
  }
}

void Manager::finish(Allocation &a) {
  for (size_t s : a.core_slots)
    core_used_[s] = false;
  memory_used_ -= std::min(memory_used_, a.memory_mib);
  proto::AccountingCounters t = a.accounting.totals(a.has_record ? a.record.data() : nullptr);
  if (cfg_.log_accounting)
    spdlog::info("allocation {:x} ended: executor {}; {}", a.id, describe_exit(a.exit_code),
                 AllocationAccounting::describe(t));
  if (rm_ && a.lease_id) {
    LeaseUse &u = lease_use_[a.lease_id];
    u.totals.allocation_ns += t.allocation_ns;
    u.totals.hot_polling_ns += t.hot_polling_ns;
    u.totals.execution_ns += t.execution_ns;
    u.totals.invocations += t.invocations;
    u.memory_mib = std::max<uint64_t>(u.memory_mib, a.memory_mib);
    bool others = std::any_of(allocations_.begin(), allocations_.end(), [&](const auto &kv) {
      return kv.second.get() != &a && kv.second->lease_id == a.lease_id;
    });
    report_lease(a.lease_id, u.ended && !others);
  }
}
} // namespace rfaas::manager
