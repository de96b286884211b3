// The ping-pong's round trip, written once: raw_libfabric_pingpong,
// rdmalib_pingpong and raw_vs_rdmalib_pingpong run these loops over their own
// endpoint, so that a ratio of two of them compares the endpoints and never
// two copies of a loop that drifted apart.
//
// An endpoint type Ep offers
//   RxEvent wait_rx(const char *what), void wait_tx(const char *what),
//   char *send_buf(), char *slot_buf(int), char *target_buf(), void post_recv(int),
// and, in its own namespace (found by argument-dependent lookup):
//   void post(Ep &, Mode, size_t size, uint64_t seq)
//       a ping or reply of `size` bytes from send_buf(): a send, or a
//       write-with-immediate carrying `seq` into the peer's target buffer;
//   void post_echo(Ep &, Mode, size_t size, uint64_t seq, const RxEvent &ping)
//       the same, from the bytes the ping left (its receive slot, or the
//       target buffer).
#pragma once

#include <vector>

#include "pingpong_common.hpp"

namespace pingpong {

/// One receive-side completion, as both endpoints report it.
struct RxEvent {
  bool remote_write = false; // a peer's write-with-immediate (else a message)
  int slot = -1;             // the receive slot it consumed, or -1
  uint64_t data = 0;         // the immediate (remote CQ data)
  size_t len = 0;            // message length (messages only: tcp reports 0 for writes)
};

/// What the ping-pong expects of a receive-side event: a message of `size`
/// bytes, or a write-with-immediate carrying the sequence number.
inline void check_event(const RxEvent &ev, Mode mode, size_t size, uint64_t seq) {
  if (mode == Mode::Send) {
    if (ev.remote_write || ev.slot < 0)
      die("expected a message, got a %s", ev.remote_write ? "remote write" : "stray completion");
    if (ev.len != size)
      die("received %zu bytes, expected %zu", ev.len, size);
  } else {
    if (!ev.remote_write)
      die("expected a write-with-immediate, got a message of %zu bytes", ev.len);
    if (ev.data != (seq & 0xffffffffu))
      die("write-with-immediate carried %llu, expected %llu",
          static_cast<unsigned long long>(ev.data),
          static_cast<unsigned long long>(seq & 0xffffffffu));
  }
}

/// Repost the receive slot an event consumed, if it consumed one.
template <class Ep> void repost_if_consumed(Ep &ep, const RxEvent &ev) {
  if (ev.slot >= 0)
    ep.post_recv(ev.slot);
}

/// What the server answers with.
enum class Reply {
  Own, ///< its own send buffer, which nobody writes
  Echo ///< the bytes the ping left, as an echo function must
};

inline const char *reply_name(Reply r) { return r == Reply::Echo ? "echo" : "own"; }

/// --reply of the ping-pong programs (ExtraOptions), read into g_reply.
inline Reply g_reply = Reply::Own;
inline void add_reply_option(rfaas::cli::Options &spec) {
  spec.add_options()("reply",
                     "what the server answers with: own (its own buffer, never written) or "
                     "echo (the bytes it received, as an echo function does)",
                     rfaas::cli::value<std::string>()->default_value("own"));
}
inline void read_reply_option(const rfaas::cli::ParseResult &r) {
  std::string reply = r["reply"].as<std::string>();
  if (reply != "own" && reply != "echo")
    throw std::invalid_argument("--reply must be own or echo, not '" + reply + "'");
  g_reply = reply == "echo" ? Reply::Echo : Reply::Own;
}
/// For run_fingerprint: both sides of a two-host run must answer alike.
inline std::string reply_fingerprint() { return std::string("reply=") + reply_name(g_reply); }

/// The server's side of one measurement (or block): it answers pings until
/// the one whose first byte is kLastMarker. The two sides meet at a barrier
/// (tags counted by `tag` on both) before and after, outside the timed region.
template <class Ep>
void serve_block(Ep &ep, Mode mode, size_t size, Oob &oob, uint32_t &tag,
                 Reply reply = Reply::Own) {
  oob.barrier(++tag, "the client to start a measurement");
  for (size_t i = 0;; ++i) {
    RxEvent ev = ep.wait_rx("the client's ping");
    check_event(ev, mode, size, i);
    // The client marks its last ping in the first payload byte.
    const char *got = mode == Mode::Send ? ep.slot_buf(ev.slot) : ep.target_buf();
    bool last = static_cast<unsigned char>(got[0]) == kLastMarker;
    if (reply == Reply::Echo) {
      // The received bytes are the reply's source: their slot is reposted
      // only once the reply no longer reads it.
      post_echo(ep, mode, size, i, ev);
      ep.wait_tx("the server's reply to complete");
      repost_if_consumed(ep, ev);
    } else {
      post(ep, mode, size, i);
      repost_if_consumed(ep, ev);
      ep.wait_tx("the server's reply to complete");
    }
    if (last)
      break;
  }
  oob.barrier(++tag, "the client to finish a measurement");
}

/// The client's side of one measurement (or block) under `sched`: the
/// measured round trips land in `us` (cleared first), in microseconds. One
/// round trip = stamp, post the ping, wait for the reply, repost the receive
/// it consumed, reap our own transmit completion, stamp. The first reply's
/// bytes are checked: the server's fill, or with Reply::Echo our own ping.
template <class Ep>
void ping_block(Ep &ep, Mode mode, size_t size, Schedule sched, Oob &oob, uint32_t &tag,
                std::vector<double> &us, Reply reply = Reply::Own) {
  us.clear();
  const bool echo = reply == Reply::Echo;
  // Clear where the reply lands, to check the first one carried the bytes.
  // (No data is in flight here: the server waits at the barrier.)
  char *landing = ep.target_buf();
  landing[0] = landing[size - 1] = 0;
  for (int s = 0; s < 2; ++s)
    ep.slot_buf(s)[0] = ep.slot_buf(s)[size - 1] = 0;
  oob.barrier(++tag, "the server to start a measurement");
  for (size_t i = 0;; ++i) {
    auto t0 = Clock::now();
    bool last = sched.last(i, t0);
    // Our previous ping has completed (wait_tx), so its buffer is ours.
    const char sent = static_cast<char>(last ? kLastMarker : kClientFill);
    ep.send_buf()[0] = sent;
    post(ep, mode, size, i);
    RxEvent ev = ep.wait_rx("the server's reply");
    repost_if_consumed(ep, ev);
    ep.wait_tx("the client's ping to complete");
    auto t1 = Clock::now();
    check_event(ev, mode, size, i);
    if (i == 0) {
      const char *got = mode == Mode::Send ? ep.slot_buf(ev.slot) : landing;
      // An echo carries our ping back: its first byte, then our fill.
      const char first = echo ? sent : static_cast<char>(kServerFill);
      const char end = size == 1 ? first : static_cast<char>(echo ? kClientFill : kServerFill);
      if (got[0] != first || got[size - 1] != end)
        die("%s of %zu bytes: the reply's bytes did not arrive%s", mode_name(mode), size,
            echo ? " (an echo of the ping)" : "");
    }
    if (i >= sched.warm)
      us.push_back(elapsed_us(t0, t1));
    if (last)
      break;
  }
  oob.barrier(++tag, "the server to finish a measurement");
}

/// A whole server: serve_block for every (mode, size) of the options.
template <class Ep> void serve_all(Ep &ep, const Options &o, Oob &oob) {
  uint32_t tag = 0;
  for (Mode mode : o.modes)
    for (size_t size : o.sizes)
      serve_block(ep, mode, size, oob, tag, g_reply);
  oob.barrier(~0u, "the client to finish");
}

/// A whole client: the header, ping_block for every (mode, size) of the
/// options with its row, then the CSV and JSON files (`backend` and its
/// version name the network layer measured).
template <class Ep>
void measure_all(Ep &ep, const Options &o, Oob &oob, const RunInfo &info,
                 const std::string &backend, const std::string &backend_version) {
  print_header(o, info);
  std::vector<Row> rows;
  std::vector<double> us;
  uint32_t tag = 0;
  for (Mode mode : o.modes) {
    for (size_t size : o.sizes) {
      Schedule sched = schedule_for(o, size);
      us.reserve(sched.iters);
      ping_block(ep, mode, size, sched, oob, tag, us, g_reply);
      rows.push_back(summarise(mode, size, us));
      print_row(rows.back());
    }
  }
  write_csv(o, info, rows);
  write_json(o, info, backend, backend_version, rows);
  oob.barrier(~0u, "the server to finish");
}

} // namespace pingpong
