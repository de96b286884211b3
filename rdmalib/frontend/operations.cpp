// Operations, once for every backend: the argument checks and Status rules
// of operations.hpp, the retry of a post that finds no room until the
// connection's post deadline, the stashes, the reporting of a link's end,
// and the blocking wait. The backend's posts, reaps and sleeps are inlined
// here (backend.hpp): one call from the application into rdmalib per
// operation, no virtual call, no allocation.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <rdmalib/operations.hpp>

#include "backend.hpp"

namespace rdmalib {

namespace detail {
namespace {

/// An empty poll() asks the backend about the peer (connection-manager
/// events, a gone process) once every this many calls, so that a caller
/// that only busy-polls also learns that its peer went away.
constexpr uint32_t kPeerCheckInterval = 1024;

/// How long completions already underway may still arrive after the end of
/// a link was observed (sockets completes a send from its progress thread,
/// possibly after the peer got it and hung up): a finished operation must
/// not be reported as lost.
constexpr auto kCloseGrace = std::chrono::milliseconds(50);

[[gnu::noinline, gnu::cold]] Status no_connection() noexcept { return Status::InvalidArgument; }

[[gnu::noinline, gnu::cold]] Status out_of_bounds(ConnectionImpl &c, const char *what, size_t len,
                                                  uint64_t offset,
                                                  const RemoteBuffer &rb) noexcept {
  c.set_error("%s of %zu bytes at offset %llu exceeds the remote buffer (%llu bytes)", what, len,
              static_cast<unsigned long long>(offset), static_cast<unsigned long long>(rb.size));
  return Status::InvalidArgument;
}

[[gnu::noinline, gnu::cold]] Status too_long(ConnectionImpl &c, const char *what,
                                             size_t len) noexcept {
  c.set_error("%s of %zu bytes exceeds this fabric's largest transfer (max_message = %zu bytes)",
              what, len, c.fab->caps.max_message);
  return Status::InvalidArgument;
}

[[gnu::noinline, gnu::cold]] Status null_buffer(ConnectionImpl &c, const char *what) noexcept {
  c.set_error("%s: a local buffer of non-zero length at a null address", what);
  return Status::InvalidArgument;
}

[[gnu::noinline, gnu::cold]] Status unordered_notify(ConnectionImpl &c) noexcept {
  c.set_error("write_imm: this fabric has no remote CQ data (%s), and its provider %s neither "
              "orders a send after a write nor fences one: the emulation's notification could "
              "reach the target before the data, so write_imm is refused",
              c.fab->mask.disables(CapRemoteCqData) ? "masked off" : "not offered",
              c.fab->provider.c_str());
  return Status::Unsupported;
}

inline bool in_bounds(const RemoteBuffer &rb, uint64_t offset, uint64_t len) noexcept {
  return offset <= rb.size && len <= rb.size - offset;
}

/// Checks shared by every post with a local buffer; Ok when it may proceed.
inline Status check_local(ConnectionImpl *c, const LocalRef &buf, const char *what) noexcept {
  if (RDMALIB_UNLIKELY(!c))
    return no_connection();
  if (RDMALIB_UNLIKELY(!c->usable()))
    return Status::Closed;
  if (RDMALIB_UNLIKELY(buf.len > c->fab->caps.max_message))
    return too_long(*c, what, buf.len);
  if (RDMALIB_UNLIKELY(!buf.ptr && buf.len))
    return null_buffer(*c, what);
  return Status::Ok;
}

/// A post that found no room (Status::Again): drive progress, moving
/// completions into the stashes, and try again until the connection's post
/// deadline, then Timeout. The deadline clock is read only here, never on
/// the fast path.
template <class Post>
[[gnu::noinline]] Status retry(ConnectionImpl &c, Queue q, const char *what, Post &&post) noexcept {
  Deadline dl(c.options.post_deadline);
  Status st;
  do {
    c.make_room(q);
    if (!c.usable())
      return Status::Closed;
    st = post();
  } while (st == Status::Again && !dl.passed());
  if (st == Status::Again) {
    c.set_error("%s: the %s queue stayed full for %lld ms (poll completions more often, or raise "
                "ConnectionOptions' depths or post_deadline)",
                what, q == Queue::Send ? "send" : "receive",
                static_cast<long long>(c.options.post_deadline.count()));
    return Status::Timeout;
  }
  return st;
}

/// ConnectionOptions::check_peer_before_poll: a peer process known gone
/// (rate-limited by the backend) and the connection manager's events, at
/// most once per millisecond for the latter too.
[[gnu::noinline]] void check_peer_now(ConnectionImpl &c) noexcept {
  if (c.peer_gone())
    return;
  auto now = std::chrono::steady_clock::now();
  if (now < c.next_poll_check)
    return;
  c.next_poll_check = now + std::chrono::milliseconds(1);
  c.check_peer();
}

/// What an empty poll does besides returning 0: look at the peer now and
/// then, report the end of the link once on the Recv queue, and leave the
/// CPU to a provider's progress thread.
[[gnu::noinline]] size_t idle_poll(ConnectionImpl &c, Queue q, Completion *out,
                                   size_t max) noexcept {
  if (c.empty_polls >= kPeerCheckInterval) {
    c.empty_polls = 0;
    if (!c.peer_closed && c.open)
      c.check_peer();
  }
  if (c.peer_closed && q == Queue::Recv && !c.peer_close_reported) {
    // Completions flushed by the end come first; then the end itself, also
    // when no receive was posted to carry it.
    size_t n = c.reap(q, out, max);
    if (n) {
      for (size_t i = 0; i < n; ++i)
        if (out[i].kind == OpKind::PeerClosed)
          c.peer_close_reported = true;
      return n;
    }
    c.peer_close_reported = true;
    out[0] = Completion{0, 0, 0, OpKind::PeerClosed, Status::Closed};
    return 1;
  }
  if (c.idle_yields)
    sched_yield();
  return 0;
}

/// poll()'s reading when LinkCore::detour is raised: the stashes, the
/// opted-in look at the peer, the backend's whole reap(); then the flag is
/// cleared if nothing calls for it any more.
[[gnu::noinline]] size_t full_reap(ConnectionImpl &c, Queue q, Completion *out,
                                   size_t max) noexcept {
  size_t n = 0;
  CompletionStash &stash = c.stash(q);
  if (!stash.empty())
    n = stash.pop(out, max);
  if (n < max) {
    // Opted in (ConnectionOptions::check_peer_before_poll): before entering
    // the provider, which a dead peer may have left locked.
    if (c.options.check_peer_before_poll && c.open && !c.peer_closed)
      check_peer_now(c);
    n += c.reap(q, out + n, max - n);
  }
  c.detour = !c.tx_stash.empty() || !c.rx_stash.empty() || c.options.check_peer_before_poll ||
             c.needs_detour();
  return n;
}

} // namespace
} // namespace detail

using detail::ConnectionImpl;

Status Operations::send(const LocalRef &src, uint64_t context, uint32_t flags) noexcept {
  ConnectionImpl *c = impl_;
  Status st = detail::check_local(c, src, "send");
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  const bool inl = (flags & PostInline) && src.len <= c->fab->caps.max_inline;
  st = c->post_send(src, context, inl);
  if (RDMALIB_LIKELY(st != Status::Again))
    return st;
  // Captures by value: a captured reference to a parameter would make the
  // fast path above store it to memory on every call.
  return detail::retry(*c, Queue::Send, "send",
                       [c, &src, context, inl] { return c->post_send(src, context, inl); });
}

Status Operations::post_recv(const LocalRef &dst, uint64_t context) noexcept {
  // The same rules as the batch below, without its loops: a receive is
  // reposted after every message.
  ConnectionImpl *c = impl_;
  if (RDMALIB_UNLIKELY(!c))
    return detail::no_connection();
  if (RDMALIB_UNLIKELY(!c->usable()))
    return Status::Closed;
  if (RDMALIB_UNLIKELY(!dst.ptr && dst.len))
    return detail::null_buffer(*c, "post_recv");
  size_t done = 0;
  Status st = c->post_recv(&dst, &context, 1, done);
  if (RDMALIB_LIKELY(st != Status::Again))
    return st;
  return detail::retry(*c, Queue::Recv, "post_recv", [c, &dst, context] {
    size_t one = 0;
    return c->post_recv(&dst, &context, 1, one);
  });
}

Status Operations::post_recv(const LocalRef *dst, const uint64_t *contexts, size_t n,
                             size_t *posted) noexcept {
  if (posted)
    *posted = 0;
  ConnectionImpl *c = impl_;
  if (RDMALIB_UNLIKELY(!c))
    return detail::no_connection();
  if (RDMALIB_UNLIKELY(!c->usable()))
    return Status::Closed;
  if (RDMALIB_UNLIKELY(n && (!dst || !contexts))) {
    c->set_error("post_recv: %zu receives without buffers or contexts", n);
    return Status::InvalidArgument;
  }
  for (size_t i = 0; i < n; ++i)
    if (RDMALIB_UNLIKELY(!dst[i].ptr && dst[i].len))
      return detail::null_buffer(*c, "post_recv");
  size_t done = 0;
  Status st = c->post_recv(dst, contexts, n, done);
  if (RDMALIB_UNLIKELY(st == Status::Again)) {
    st = detail::retry(*c, Queue::Recv, "post_recv", [&] {
      size_t more = 0;
      Status s = c->post_recv(dst + done, contexts + done, n - done, more);
      done += more;
      return s;
    });
  }
  if (posted)
    *posted = done;
  return st;
}

Status Operations::write(const LocalRef &src, const RemoteBuffer &dst, uint64_t offset,
                         uint64_t context, uint32_t flags) noexcept {
  ConnectionImpl *c = impl_;
  Status st = detail::check_local(c, src, "write");
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  if (RDMALIB_UNLIKELY(!detail::in_bounds(dst, offset, src.len)))
    return detail::out_of_bounds(*c, "write", src.len, offset, dst);
  const bool inl = (flags & PostInline) && src.len <= c->fab->caps.max_inline;
  const uint64_t addr = dst.addr + offset;
  st = c->post_write(src, addr, dst.key, context, inl);
  if (RDMALIB_LIKELY(st != Status::Again))
    return st;
  return detail::retry(*c, Queue::Send, "write", [c, &src, &dst, addr, context, inl] {
    return c->post_write(src, addr, dst.key, context, inl);
  });
}

Status Operations::write_imm(const LocalRef &src, const RemoteBuffer &dst, uint64_t offset,
                             uint32_t imm, uint64_t context, uint32_t flags) noexcept {
  ConnectionImpl *c = impl_;
  Status st = detail::check_local(c, src, "write_imm");
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  if (RDMALIB_UNLIKELY(!detail::in_bounds(dst, offset, src.len)))
    return detail::out_of_bounds(*c, "write_imm", src.len, offset, dst);
  const Capabilities &caps = c->fab->caps;
  const bool inl = (flags & PostInline) && src.len <= caps.max_inline;
  const uint64_t addr = dst.addr + offset;
  if (RDMALIB_LIKELY(caps.remote_cq_data)) {
    st = c->post_write_imm(src, addr, dst.key, imm, context, inl);
    if (RDMALIB_LIKELY(st != Status::Again))
      return st;
    return detail::retry(*c, Queue::Send, "write_imm", [c, &src, &dst, addr, imm, context, inl] {
      return c->post_write_imm(src, addr, dst.key, imm, context, inl);
    });
  }
  if (RDMALIB_UNLIKELY(!c->fab->write_notify_ordered))
    return detail::unordered_notify(*c);
  st = c->post_write_notify(src, addr, dst.key, imm, context, inl);
  if (RDMALIB_LIKELY(st != Status::Again))
    return st;
  return detail::retry(*c, Queue::Send, "write_imm", [c, &src, &dst, addr, imm, context, inl] {
    return c->post_write_notify(src, addr, dst.key, imm, context, inl);
  });
}

Status Operations::read(const LocalRef &dst, const RemoteBuffer &src, uint64_t offset,
                        uint64_t context) noexcept {
  ConnectionImpl *c = impl_;
  Status st = detail::check_local(c, dst, "read");
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  if (RDMALIB_UNLIKELY(!detail::in_bounds(src, offset, dst.len)))
    return detail::out_of_bounds(*c, "read", dst.len, offset, src);
  const uint64_t addr = src.addr + offset;
  st = c->post_read(dst, addr, src.key, context);
  if (RDMALIB_LIKELY(st != Status::Again))
    return st;
  return detail::retry(*c, Queue::Send, "read",
                       [&] { return c->post_read(dst, addr, src.key, context); });
}

namespace detail {
namespace {

Status atomic(ConnectionImpl *c, OpKind kind, const LocalRef &result, const RemoteBuffer &target,
              uint64_t offset, uint64_t operand, uint64_t compare, uint64_t context) noexcept {
  const char *what = kind == OpKind::FetchAdd ? "fetch_add" : "compare_swap";
  Status st = check_local(c, result, what);
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  if (!c->fab->caps.atomics) {
    c->set_error("%s: this fabric has no remote atomics (capability 'atomics' is %s)", what,
                 c->fab->mask.disables(CapAtomics) ? "masked off" : "not offered");
    return Status::Unsupported;
  }
  if (result.len < sizeof(uint64_t) || !in_bounds(target, offset, sizeof(uint64_t)) ||
      ((target.addr + offset) & 7) != 0) {
    c->set_error("%s needs an 8-byte result buffer and an 8-byte aligned target inside the "
                 "remote buffer (offset %llu, size %llu)",
                 what, static_cast<unsigned long long>(offset),
                 static_cast<unsigned long long>(target.size));
    return Status::InvalidArgument;
  }
  const uint64_t addr = target.addr + offset;
  st = c->post_atomic(kind, result, addr, target.key, operand, compare, context);
  if (st != Status::Again)
    return st;
  return retry(*c, Queue::Send, what, [&] {
    return c->post_atomic(kind, result, addr, target.key, operand, compare, context);
  });
}

} // namespace
} // namespace detail

Status Operations::fetch_add(const LocalRef &result, const RemoteBuffer &target, uint64_t offset,
                             uint64_t add, uint64_t context) noexcept {
  return detail::atomic(impl_, OpKind::FetchAdd, result, target, offset, add, 0, context);
}

Status Operations::compare_swap(const LocalRef &result, const RemoteBuffer &target, uint64_t offset,
                                uint64_t compare, uint64_t swap, uint64_t context) noexcept {
  return detail::atomic(impl_, OpKind::CompareSwap, result, target, offset, swap, compare, context);
}

size_t Operations::poll(Queue q, Completion *out, size_t max) noexcept {
  ConnectionImpl *c = impl_;
  if (RDMALIB_UNLIKELY(!c || !out || max == 0))
    return 0;
  // One byte stands for every condition the plain read does not handle
  // (LinkCore::detour): a busy poller's call is the provider's read and
  // little else.
  size_t n =
      RDMALIB_UNLIKELY(c->detour) ? detail::full_reap(*c, q, out, max) : c->reap_plain(q, out, max);
  if (RDMALIB_LIKELY(n))
    return n;
  // A busy-polling caller comes here many times per message: only every
  // kPeerCheckInterval-th empty poll, an ended link or a provider with a
  // progress thread need more than the count.
  if (RDMALIB_LIKELY(++c->empty_polls < detail::kPeerCheckInterval && !c->peer_closed &&
                     !c->idle_yields))
    return 0;
  return detail::idle_poll(*c, q, out, max);
}

WaitResult Operations::wait(Queue q, Completion *out, size_t max, int timeout_ms) noexcept {
  return wait(q, out, max, timeout_ms, std::chrono::microseconds(0));
}

WaitResult Operations::wait(Queue q, Completion *out, size_t max, int timeout_ms,
                            std::chrono::microseconds spin) noexcept {
  ConnectionImpl *c = impl_;
  if (!c || !out || max == 0)
    return WaitResult{0, Status::InvalidArgument};
  const detail::Deadline deadline = timeout_ms < 0
                                        ? detail::Deadline::never()
                                        : detail::Deadline(std::chrono::milliseconds(timeout_ms));
  // Within the caller's spin budget a look that found nothing is followed by
  // a yield, not a sleep: the same loop, so a dead peer is still checked
  // before each entry into the provider. Not on providers whose progress
  // thread a spinning caller would starve (idle_yields).
  const bool spinning = spin.count() > 0 && !c->idle_yields;
  const auto spin_end = detail::Deadline::clock::now() + spin;
  const bool fd = c->fab->caps.wait_fd;
  int backoff_us = 1;
  unsigned spins = 0;
  for (;;) {
    // Before entering the provider: a peer known gone may hold a lock of it.
    c->peer_gone();
    size_t n = poll(q, out, max);
    if (n)
      return WaitResult{n, Status::Ok};
    if (!c->open)
      return WaitResult{0, Status::Closed};
    if (c->peer_closed || c->check_peer()) {
      // Completions underway when the end was observed get a moment.
      detail::Deadline grace(detail::kCloseGrace);
      do {
        n = poll(q, out, max);
        if (n)
          return WaitResult{n, Status::Ok};
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      } while (!grace.passed());
      return WaitResult{0, Status::Closed};
    }
    if (deadline.passed())
      return WaitResult{0, Status::Timeout};
    if (spinning && detail::Deadline::clock::now() < spin_end) {
      // A thread that spins on a shared CPU would keep its peer (or the
      // process that must answer) off it until preempted: a yield costs a
      // system call when nobody waits for the CPU, and hands it over when
      // somebody does.
      sched_yield();
      continue;
    }
    if (fd) {
      int slice = deadline.remaining_ms(c->wait_slice_ms());
      n = c->block(q, out, max, slice > 0 ? slice : 1);
      if (n)
        return WaitResult{n, Status::Ok};
      continue;
    }
    // No wait object (or masked off): poll with a growing pause, first only
    // yielding, so that a provider's progress thread on the same core is
    // not starved and a completion that is about to arrive is seen at once.
    if (++spins < 64) {
      sched_yield();
      continue;
    }
    int left_us = deadline.remaining_ms(1) * 1000 + 1000;
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(backoff_us, left_us)));
    backoff_us = std::min(backoff_us * 2, spins < 1024 ? 20 : 200);
  }
}

bool Operations::arm() noexcept {
  ConnectionImpl *c = impl_;
  if (!c || !c->open || !c->fab->caps.wait_fd)
    return false;
  // Completions read ahead (a post that waited for room) are in the stashes,
  // where no descriptor announces them; an end seen but not yet reported
  // is the caller's to read.
  if (!c->tx_stash.empty() || !c->rx_stash.empty() || (c->peer_closed && !c->peer_close_reported))
    return false;
  return c->arm();
}

std::chrono::milliseconds Operations::post_deadline() const noexcept {
  return impl_ ? impl_->options.post_deadline : std::chrono::milliseconds(0);
}

void Operations::set_post_deadline(std::chrono::milliseconds deadline) noexcept {
  if (impl_)
    impl_->options.post_deadline = std::max(deadline, std::chrono::milliseconds(0));
}

const char *Operations::last_error() const noexcept {
  if (!impl_)
    return "rdmalib: operations on an empty connection (a default-constructed Operations)";
  return impl_->last_error[0] ? impl_->last_error : "no error";
}

} // namespace rdmalib
