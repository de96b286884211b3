// rfaas::executor: invocations (docs/protocol.md step 5): posting inputs,
// reaping results and write completions, execute/async/execute_parallel.
#include "executor_impl.hpp"

#include <algorithm>
#include <cstring>
#include <future>
#include <memory>

namespace rfaas {

using namespace detail;

static_assert(Registration::kPrefix == proto::kSlotPrefix,
              "a registered input is sent with its headers as an input slot holds them");

// The steps of an invocation, expanded into execute(), async() and the other
// callers in this file rather than called: each call cost ~15 instructions
// of its own (arguments, saved registers), and an 8-byte call on shared
// memory spends only a few hundred instructions on rFaaS's side at all.
#define RFAAS_HOT [[gnu::always_inline]] inline

void executor::impl::worker_lost(Worker &w, status why) noexcept {
  if (!w.alive)
    return;
  w.alive = false;
  w.end_reason = why;
  for (Slot &s : w.slots) {
    if (s.state != SlotState::InFlight)
      continue;
    if (!s.result_in)
      s.res = result{why, 0, 0};
    s.result_in = true;
    s.write_done = true;
    finish(s);
  }
}

RFAAS_HOT void executor::impl::finish(Slot &s) noexcept {
  if (s.source) {
    --s.source->in_flight;
    s.source = nullptr;
  }
  if (s.target) {
    --s.target->in_flight;
    s.target = nullptr;
  }
  s.state = s.abandoned ? SlotState::Free : SlotState::Done;
  s.abandoned = false;
}

void executor::impl::abandon(Slot &s) noexcept {
  // The slot stays busy until the late result (or the link's end): the
  // worker may still read the input slot. Nobody reads the result.
  s.abandoned = true;
  s.out = mutable_buffer{};
  if (s.source) {
    // Told of the timeout, the caller may free the input block at once: the
    // late result must not reach its registration any more. The write that
    // sent the input has normally completed long before the timeout.
    --s.source->in_flight;
    s.source = nullptr;
  }
  if (s.target) {
    // The worker may still write the result in place, after the caller got
    // its timeout and reused the block: with a new key the write fails in
    // the network (the worker then answers into the result slot instead).
    revoke_target(*s.target);
    --s.target->in_flight;
    s.target = nullptr;
  }
}

RFAAS_HOT void executor::impl::on_write_done(Worker &w, const rdmalib::Completion &c) noexcept {
  uint32_t s = static_cast<uint32_t>(c.context & 0xFFFF);
  if (s >= w.slots.size())
    return;
  --w.writes_pending;
  Slot &sl = w.slots[s];
  sl.write_done = true;
  if (c.status != rdmalib::Status::Ok && !sl.result_in) {
    sl.res = result{status::network_error, 0, 0};
    sl.result_in = true;
  }
  if (sl.state == SlotState::InFlight && sl.result_in)
    finish(sl);
}

RFAAS_HOT void executor::impl::on_result(Worker &w, uint32_t imm) noexcept {
  proto::Immediate im = proto::parse_immediate(imm);
  if (im.slot >= w.slots.size())
    return;
  Slot &sl = w.slots[im.slot];
  if (sl.state != SlotState::InFlight || sl.result_in || !proto::immediate_matches(imm, sl.id))
    return; // stale or foreign: nothing waits for it
  // In place: the header sits in the target block's prefix, right before the
  // output, which is the caller's buffer itself.
  const char *at;
  size_t avail;
  if (im.in_place && sl.target) {
    at = static_cast<const char *>(sl.target->base) + Registration::kPrefix -
         proto::kResultHeaderSize;
    avail = proto::kResultHeaderSize + std::min(sl.out.size, sl.target->user_bytes);
  } else {
    constexpr size_t kHeaderAt = proto::kSlotPrefix - proto::kResultHeaderSize;
    at = w.results.data() + size_t(im.slot) * result_slot + kHeaderAt;
    avail = result_slot - kHeaderAt;
  }
  proto::ResultHeader h;
  proto::WireResult r = im.in_place && !sl.target
                            ? proto::WireResult{proto::WireError::Inconsistent}
                            : proto::decode(at, avail, h);
  result res;
  if (!r) {
    // The header is unusable; the immediate still says what happened.
    res.status = im.status != proto::ErrorCode::Ok ? from_wire(im.status) : status::bad_request;
  } else if (h.invocation_id != static_cast<uint32_t>(sl.id) &&
             !proto::immediate_matches(imm, h.invocation_id)) {
    res.status = status::bad_request;
  } else {
    res.status = from_wire(h.status);
    res.detail = h.detail;
    if (h.status == proto::ErrorCode::Ok) {
      if (sl.abandoned) {
        // Nobody reads the output any more.
      } else if (im.in_place) {
        // Already where the caller wants it (decode checked it fits).
        res.output_size = h.output_size;
        ++counters.results_in_place;
      } else if (h.output_size > sl.out.size) {
        res.status = status::output_too_large;
        res.detail = h.output_size;
      } else {
        if (h.output_size)
          std::memcpy(sl.out.data, at + proto::kResultHeaderSize, h.output_size);
        res.output_size = h.output_size;
        ++counters.results_copied;
      }
    }
  }
  sl.res = res;
  sl.result_in = true;
  if (sl.write_done)
    finish(sl);
}

void executor::impl::on_slot_completion(Worker &w, const rdmalib::Completion &c) noexcept {
  if (c.kind == rdmalib::OpKind::RemoteWriteImm)
    on_result(w, c.imm);
  else if (c.context & kWriteCtx)
    on_write_done(w, c);
}

RFAAS_HOT void executor::impl::progress(Worker &w, int block_ms, rdmalib::Queue block_on) noexcept {
  // A member, not a local: a local array of Completion is value-initialised
  // on every call, and this runs once per spin of the busy-poll loop.
  rdmalib::Completion *c = comp_buf;
  // What queue `q` holds: polled, or waited for when it is the one to block on.
  auto fetch = [&](rdmalib::Queue q) -> rdmalib::WaitResult {
    if (block_ms > 0 && block_on == q)
      return w.ops.wait(q, c, 16, block_ms);
    return {w.ops.poll(q, c, 16), rdmalib::Status::Ok};
  };
  rdmalib::WaitResult got = fetch(rdmalib::Queue::Recv);
  if (got.status == rdmalib::Status::Closed) {
    worker_lost(w, status::closed);
    return;
  }
  size_t n = got.count;
  for (size_t i = 0; i < n; ++i) {
    if (c[i].status != rdmalib::Status::Ok || c[i].kind == rdmalib::OpKind::PeerClosed) {
      worker_lost(w, status::closed);
      return;
    }
    if (c[i].kind == rdmalib::OpKind::RemoteWriteImm) {
      on_result(w, c[i].imm);
      if (caps.write_consumes_receive)
        w.control.recycle(c[i]);
    } else if (c[i].kind == rdmalib::OpKind::Recv && w.control.owns(c[i])) {
      proto::ChannelStatus cs = w.control.take(c[i]).status;
      if (cs == proto::ChannelStatus::Shutdown || cs == proto::ChannelStatus::Closed) {
        // Results sent before the Shutdown have been processed already
        // (same connection, in order): what is still in flight is lost.
        // A worker whose lease ended says so (the node's manager ended the
        // allocation at the lease's expiry, revocation or release).
        const bool lease_over = cs == proto::ChannelStatus::Shutdown &&
                                w.control.goodbye().reason == proto::ErrorCode::LeaseInvalid;
        worker_lost(w, lease_over ? status::lease_invalid : status::closed);
        return;
      }
    }
  }
  if (w.writes_pending) {
    n = fetch(rdmalib::Queue::Send).count;
    for (size_t i = 0; i < n; ++i)
      if (c[i].context & kWriteCtx)
        on_write_done(w, c[i]);
  }
}

RFAAS_HOT result executor::impl::post(uint32_t wi, uint32_t s, uint32_t function,
                                      const_buffer input, mutable_buffer output,
                                      milliseconds within) noexcept {
  Worker &w = workers[wi];
  if (!w.alive)
    return result{w.end_reason == status::ok ? status::closed : w.end_reason, 0, 0};
  if (input.size > max_input)
    return result{status::payload_too_large, 0, max_input};
  Slot &sl = w.slots[s];
  const uint64_t id = ++next_id;

  // Zero copy when the input is the start of one of our registered blocks
  // and its header room is not in use by another invocation.
  detail::Registration *reg = registry.find(input.data);
  if (reg && !(reg->in_flight == 0 && input.size <= reg->user_bytes && reg->region.valid()))
    reg = nullptr;
  // The result is written in place when the output is the start of one of
  // our blocks whose prefix is free (or holds this invocation's own input
  // header: the result can only come after the worker received the input).
  detail::Registration *target = registry.find(output.data);
  if (target && !(!caps.endpoint_bound_memory && target->region.valid() &&
                  (target->in_flight == 0 || target == reg)))
    target = nullptr;
  proto::InvocationHeader h;
  h.invocation_id = static_cast<uint32_t>(id);
  h.function = function;
  h.payload_size = static_cast<uint32_t>(input.size);
  h.slot = static_cast<uint16_t>(s);
  proto::ResultTarget t;
  if (target) {
    const size_t room = std::min<size_t>(std::min(output.size, target->user_bytes),
                                         proto::kMaxSlotSize - proto::kResultHeaderSize);
    t.target = target->region.remote();
    t.offset = Registration::kPrefix - proto::kResultHeaderSize;
    t.capacity = static_cast<uint32_t>(proto::kResultHeaderSize + room);
    // The worker keeps the slot's last target: a caller reusing its output
    // block sends 16 bytes of headers instead of 56 (on shm, an 8-byte call
    // then fits the provider's first cache line of inline data).
    h.flags = sl.target_sent && sl.sent_target == t ? proto::kSameTarget : proto::kWithTarget;
  }
  // The headers end where the payload starts: at the end of the slot's
  // prefix, or right before the caller's registered input.
  char *payload_at = reg ? static_cast<char *>(const_cast<void *>(input.data))
                         : w.staging.data() + size_t(s) * input_slot + proto::kSlotPrefix;
  if (!reg && input.size)
    std::memcpy(payload_at, input.data, input.size);
  const size_t lead =
      proto::slot_write_lead(proto::encode_input_headers(payload_at, h, t), input.size);
  const rdmalib::LocalRef src =
      reg ? reg->region.local(Registration::kPrefix - lead, lead + input.size)
          : w.staging.local_bytes(size_t(s) * input_slot + proto::kSlotPrefix - lead,
                                  lead + input.size);

  // The call's deadline bounds the post too: to a worker whose node died, a
  // reliable-datagram provider may refuse posts while it tries to reconnect
  // (tcp;ofi_rxm), for the connection's whole post deadline (5 s).
  const bool bounded = within < w.post_deadline;
  if (bounded)
    w.ops.set_post_deadline(within);
  rdmalib::Status st =
      w.ops.write_imm(src, w.input.buffer, w.input.offset(s) + proto::kSlotPrefix - lead,
                      proto::make_immediate(s, id), kWriteCtx | s);
  if (bounded)
    w.ops.set_post_deadline(w.post_deadline);
  if (st != rdmalib::Status::Ok) {
    if (st == rdmalib::Status::Closed) {
      worker_lost(w, status::closed);
      return result{status::closed, 0, 0};
    }
    return result{st == rdmalib::Status::Timeout ? status::timeout : status::network_error, 0, 0};
  }
  ++w.writes_pending;
  if (h.flags & proto::kWithTarget) {
    sl.sent_target = t;
    sl.target_sent = true;
  }
  if (reg)
    ++reg->in_flight;
  if (target)
    ++target->in_flight;
  ++(reg ? counters.inputs_in_place : counters.inputs_copied);
  sl.state = SlotState::InFlight;
  sl.result_in = false;
  sl.write_done = false;
  sl.abandoned = false;
  sl.id = id;
  sl.out = output;
  sl.source = reg;
  sl.target = target;
  sl.res = result{};
  return sl.res;
}

RFAAS_HOT result executor::impl::complete(uint32_t wi, uint32_t s, milliseconds timeout) noexcept {
  Worker &w = workers[wi];
  Slot &sl = w.slots[s];
  uint32_t spins = 0;
  // Where the provider's own threads move the data, a spinning caller takes
  // their core: sleep in the provider for what is still missing instead.
  const bool block = caps.progress == rdmalib::Progress::Thread;
  // Reading the clock costs more than a poll (~40 ns in a VM): a spinning
  // caller sets the deadline at its first look at the clock, which a result
  // already in (the pipelined case) never reaches. Each wait may take 10 ms:
  // a blocking caller dates it at once.
  Clock::time_point deadline = block ? Clock::now() + timeout : Clock::time_point{};
  bool dated = block;
  while (sl.state == SlotState::InFlight) {
    if (block)
      progress(w, 10, sl.result_in ? rdmalib::Queue::Send : rdmalib::Queue::Recv);
    else
      progress(w);
    // The clock now and then: after 64 polls, or after every wait.
    if (block || ++spins == 64) {
      spins = 0;
      const Clock::time_point now = Clock::now();
      if (!dated) {
        deadline = now + timeout;
        dated = true;
      } else if (now > deadline && sl.state == SlotState::InFlight) {
        // The slot stays busy until the late result arrives, but nobody
        // reads it: the caller's output buffer may be gone by then.
        abandon(sl);
        return result{status::timeout, 0, 0};
      }
    }
  }
  sl.state = SlotState::Free;
  return sl.res;
}

RFAAS_HOT bool executor::impl::find_free(uint32_t &wi, uint32_t &s) noexcept {
  // Round robin, workers first, from where the last search ended. The
  // cursor steps instead of dividing a flat index: three divisions per
  // invocation were a visible part of the client's hot path.
  uint32_t w = rr_worker, slot = rr_slot;
  for (uint32_t k = nworkers * nslots; k > 0; --k) {
    const uint32_t cw = w, cs = slot;
    if (++w == nworkers) {
      w = 0;
      if (++slot == nslots)
        slot = 0;
    }
    if (workers[cw].slots[cs].state == SlotState::Free) {
      wi = cw;
      s = cs;
      rr_worker = w;
      rr_slot = slot;
      return true;
    }
  }
  return false;
}

result executor::impl::execute(const function_name &fn, const_buffer in, mutable_buffer out,
                               milliseconds timeout) {
  require_allocated();
  uint32_t wi, s;
  if (!find_free(wi, s)) {
    for (Worker &w : workers)
      progress(w);
    if (!find_free(wi, s))
      return result{status::busy, 0, 0};
  }
  result r = post(wi, s, fn.hash(), in, out, timeout);
  if (workers[wi].slots[s].state == SlotState::InFlight)
    r = complete(wi, s, timeout);
  if (r.status == status::unknown_function)
    warn_unknown_function(fn);
  return r;
}

void executor::impl::warn_unknown_function(const function_name &fn) {
  rfaas::logger().warn("unknown_function: \"{}\" is not a function of the shipped library "
                       "(name hash {:08x}); check the name against the library's exports "
                       "(nm -D --defined-only LIBRARY)",
                       fn.name(), fn.hash());
}

std::vector<result> executor::impl::execute_parallel(const function_name &fn,
                                                     const std::vector<const_buffer> &in,
                                                     const std::vector<mutable_buffer> &out) {
  require_allocated();
  std::vector<result> results(in.size());
  if (in.size() != out.size() || in.empty()) {
    for (result &r : results)
      r.status = status::invalid_argument;
    return results;
  }
  const uint32_t hash = fn.hash();
  const Clock::time_point deadline = Clock::now() + deadlines.invocation;
  // Which input each (worker, slot) currently runs; SIZE_MAX = none of ours.
  std::vector<size_t> owner(size_t(nworkers) * nslots, SIZE_MAX);
  size_t next = 0, outstanding = 0;
  bool expired = false;
  uint32_t spins = 0;
  while (next < in.size() || outstanding > 0) {
    // Fill free slots.
    uint32_t wi, s;
    while (next < in.size() && !expired && find_free(wi, s)) {
      result r = post(wi, s, hash, in[next], out[next], milliseconds(ms_left(deadline)));
      if (workers[wi].slots[s].state == SlotState::InFlight) {
        owner[size_t(s) * nworkers + wi] = next;
        ++outstanding;
      } else {
        results[next] = r;
      }
      ++next;
    }
    if (outstanding == 0 && (next == in.size() || expired))
      break;
    for (uint32_t w = 0; w < nworkers; ++w) {
      progress(workers[w]);
      for (uint32_t k = 0; k < nslots; ++k) {
        size_t &o = owner[size_t(k) * nworkers + w];
        if (o != SIZE_MAX && workers[w].slots[k].state == SlotState::Done) {
          results[o] = workers[w].slots[k].res;
          workers[w].slots[k].state = SlotState::Free;
          o = SIZE_MAX;
          --outstanding;
        }
      }
    }
    if (++spins == 64) {
      spins = 0;
      if (Clock::now() > deadline) {
        expired = true;
        for (uint32_t w = 0; w < nworkers; ++w)
          for (uint32_t k = 0; k < nslots; ++k) {
            size_t &o = owner[size_t(k) * nworkers + w];
            if (o == SIZE_MAX)
              continue;
            abandon(workers[w].slots[k]);
            results[o] = result{status::timeout, 0, 0};
            o = SIZE_MAX;
            --outstanding;
          }
        for (; next < in.size(); ++next)
          results[next] = result{status::timeout, 0, 0};
      }
    }
  }
  if (std::any_of(results.begin(), results.end(),
                  [](const result &r) { return r.status == status::unknown_function; }))
    warn_unknown_function(fn);
  return results;
}

// ---- executor: invocations -------------------------------------------------------

result executor::execute(const function_name &function, const_buffer input, mutable_buffer output) {
  return impl_->execute(function, input, output, impl_->deadlines.invocation);
}

result executor::execute(const function_name &function, const_buffer input, mutable_buffer output,
                         std::chrono::milliseconds timeout) {
  return impl_->execute(function, input, output, timeout);
}

async_result executor::async(const function_name &function, const_buffer input,
                             mutable_buffer output) {
  impl_->require_allocated();
  async_result a;
  impl &self = *impl_;
  uint32_t wi, s;
  if (!self.find_free(wi, s)) {
    for (Worker &w : self.workers)
      self.progress(w);
    if (!self.find_free(wi, s)) {
      a.ready_ = result{status::busy, 0, 0};
      a.state_ = async_result::state::ready;
      return a;
    }
  }
  result r = self.post(wi, s, function.hash(), input, output, self.deadlines.invocation);
  if (self.workers[wi].slots[s].state != SlotState::InFlight) {
    a.ready_ = r;
    a.state_ = async_result::state::ready;
    return a;
  }
  // The weak pointer and the generation make a result outliving its
  // allocation (or executor) harmless.
  a.owner_ = impl_;
  a.generation_ = self.generation;
  a.worker_ = wi;
  a.slot_ = s;
  a.timeout_ = self.deadlines.invocation;
  a.state_ = async_result::state::pending;
  return a;
}

void executor::impl::discard(uint32_t wi, uint32_t s) noexcept {
  Slot &sl = workers[wi].slots[s];
  if (sl.state == SlotState::InFlight)
    abandon(sl); // Free once the late result (or the link's end) is in
  else if (sl.state == SlotState::Done)
    sl.state = SlotState::Free;
}

// ---- async_result ----------------------------------------------------------------

async_result::async_result(async_result &&other) noexcept
    : owner_(std::move(other.owner_)), generation_(other.generation_), worker_(other.worker_),
      slot_(other.slot_), timeout_(other.timeout_), ready_(other.ready_), state_(other.state_) {
  other.state_ = state::empty;
}

async_result &async_result::operator=(async_result &&other) noexcept {
  if (this != &other) {
    abandon();
    owner_ = std::move(other.owner_);
    generation_ = other.generation_;
    worker_ = other.worker_;
    slot_ = other.slot_;
    timeout_ = other.timeout_;
    ready_ = other.ready_;
    state_ = other.state_;
    other.state_ = state::empty;
  }
  return *this;
}

async_result::~async_result() { abandon(); }

void async_result::abandon() noexcept {
  if (state_ != state::pending)
    return;
  state_ = state::empty;
  std::shared_ptr<executor::impl> p = owner_.lock();
  owner_.reset();
  if (p && p->generation == generation_)
    p->discard(worker_, slot_);
}

result async_result::get() {
  if (state_ == state::ready) {
    state_ = state::empty;
    return ready_;
  }
  if (state_ != state::pending)
    throw std::future_error(std::future_errc::no_state);
  state_ = state::empty;
  std::shared_ptr<executor::impl> p = owner_.lock();
  owner_.reset();
  if (!p || p->generation != generation_)
    return result{status::closed, 0, 0};
  return p->complete(worker_, slot_, timeout_);
}

void async_result::wait() {
  if (state_ == state::ready)
    return;
  ready_ = get();
  state_ = state::ready;
}

async_result::operator std::future<result>() && {
  if (!valid())
    return std::future<result>();
  return std::async(std::launch::deferred, [r = std::move(*this)]() mutable { return r.get(); });
}

const copy_counters &executor::copies() const noexcept {
  static const copy_counters none{};
  return impl_ ? impl_->counters : none;
}

std::vector<result> executor::execute_parallel(const function_name &function,
                                               const std::vector<const_buffer> &inputs,
                                               const std::vector<mutable_buffer> &outputs) {
  return impl_->execute_parallel(function, inputs, outputs);
}
} // namespace rfaas
