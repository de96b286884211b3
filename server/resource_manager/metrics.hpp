// Metrics in the Prometheus text exposition format (version 0.0.4).
// Counters and gauges of the registry are read on the loop thread; request
// latencies are observed by the threads that serve the requests (the HTTP
// threads, the loop thread for fabric requests), so the histogram is
// lock-free (atomics).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "resource_manager/registry.hpp"

namespace rfaas::rm {

/// A latency histogram with fixed buckets from 50 µs to 5 s.
class LatencyHistogram {
public:
  static constexpr std::array<double, 12> kBounds = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 1.0, 5.0};
  void observe(double seconds);
  /// Appends the _bucket, _sum and _count lines of `name` with `labels`
  /// (e.g. `interface="http",kind="read"`).
  void render(std::string &out, const std::string &name, const std::string &labels) const;

private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{}; // last: +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

/// What the loop thread reports for one scrape.
struct RegistrySnapshot {
  Counters counters;
  size_t active_leases = 0;
  size_t nodes_up = 0;
  size_t nodes_down = 0;
  size_t nodes_drained = 0;
  uint64_t cores_total = 0;
  uint64_t cores_leased = 0;
  /// The registry's clock (ms since the Unix epoch) when it was taken.
  uint64_t generated_ms = 0;
};
/// Runs on the loop thread.
RegistrySnapshot snapshot(const Registry &registry);

/// How much the fabric loop looks at, so that an operator (and a test) can
/// see that a pass costs what the active peers cost, not what the fleet
/// does. Written by the loop thread, read by the HTTP threads.
struct FabricWork {
  /// Passes over the active peers (and preparations of a sleep).
  std::atomic<uint64_t> passes{0};
  /// Peers looked at by those passes and preparations, in total.
  std::atomic<uint64_t> peer_visits{0};
  /// Messages read from peers.
  std::atomic<uint64_t> messages{0};
  /// Peers looked at by the timeout sweeps (every peer, a few times a second).
  std::atomic<uint64_t> sweep_visits{0};
  /// Links armed one by one before a sleep (links with a descriptor of
  /// their own: connected providers).
  std::atomic<uint64_t> links_armed{0};
  /// Open connections now.
  std::atomic<uint64_t> connections{0};
  /// Peers left for the next pass because the pass had served its budget
  /// of nodes (a lease request waits for at most one such pass).
  std::atomic<uint64_t> deferred{0};
  /// The most peers other than clients that one pass has served: bounded
  /// by the budget whatever the number of nodes.
  std::atomic<uint64_t> largest_pass{0};
  /// Lease-ended and renewal notices queued for nodes (sent at once or
  /// kept until the node takes them).
  std::atomic<uint64_t> notices{0};
  /// Of those, dropped because the node's backlog was full.
  std::atomic<uint64_t> notices_dropped{0};
};

struct RequestLatencies {
  LatencyHistogram http_read;
  LatencyHistogram http_write;
  /// Fabric requests, from the message taken off the receive ring to the
  /// answer queued for sending: placement, the SQLite transaction and the
  /// token MACs, without the network.
  LatencyHistogram fabric_register;
  LatencyHistogram fabric_lease;
  LatencyHistogram fabric_renew;
  LatencyHistogram fabric_release;
  /// Not a latency: the loop's work, reported on the same page.
  FabricWork fabric_work;
};

/// The whole /metrics page.
std::string render_metrics(const RegistrySnapshot &s, const RequestLatencies &latencies);

} // namespace rfaas::rm
