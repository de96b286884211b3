#include "resource_manager/metrics.hpp"

#include <cstdio>

namespace rfaas::rm {

void LatencyHistogram::observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i])
    ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

void LatencyHistogram::render(std::string &out, const std::string &name,
                              const std::string &labels) const {
  // Buckets are cumulative in the exposition format.
  uint64_t cumulative = 0;
  char bound[32];
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    if (i < kBounds.size())
      std::snprintf(bound, sizeof bound, "%g", kBounds[i]);
    else
      std::snprintf(bound, sizeof bound, "+Inf");
    out +=
        name + "_bucket{" + labels + ",le=\"" + bound + "\"} " + std::to_string(cumulative) + "\n";
  }
  char sum[64];
  std::snprintf(sum, sizeof sum, "%.9f", sum_ns_.load(std::memory_order_relaxed) / 1e9);
  out += name + "_sum{" + labels + "} " + sum + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_.load()) + "\n";
}

RegistrySnapshot snapshot(const Registry &registry) {
  RegistrySnapshot s;
  s.generated_ms = registry.now();
  s.counters = registry.counters();
  s.active_leases = registry.active_count();
  // Counted in place: copying every node (names, addresses, secrets) made a
  // scrape of 10,000 nodes cost milliseconds of the loop.
  const NodeTotals t = registry.node_totals();
  s.nodes_up = t.up;
  s.nodes_down = t.down;
  s.nodes_drained = t.drained;
  s.cores_total = t.cores;
  s.cores_leased = t.cores_leased;
  return s;
}

namespace {
void metric(std::string &out, const char *name, const char *type, const char *help,
            uint64_t value) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
         name + " " + std::to_string(value) + "\n";
}
} // namespace

std::string render_metrics(const RegistrySnapshot &s, const RequestLatencies &latencies) {
  std::string out;
  const Counters &c = s.counters;
  metric(out, "rfaas_rm_leases_granted_total", "counter", "Leases granted since start.", c.granted);
  metric(out, "rfaas_rm_leases_refused_total", "counter",
         "Lease requests refused since start (invalid, no capacity or a quota).", c.refused);
  metric(out, "rfaas_rm_leases_refused_quota_total", "counter",
         "Lease requests refused since start by a user's quota.", c.refused_quota);
  metric(out, "rfaas_rm_leases_expired_total", "counter",
         "Leases that expired without renewal since start.", c.expired);
  metric(out, "rfaas_rm_leases_released_total", "counter", "Leases released since start.",
         c.released);
  metric(out, "rfaas_rm_leases_revoked_total", "counter", "Leases revoked since start.", c.revoked);
  metric(out, "rfaas_rm_leases_node_down_total", "counter",
         "Leases ended since start because a node they held cores on went down.", c.node_down);
  metric(out, "rfaas_rm_leases_renewed_total", "counter", "Lease renewals since start.", c.renewed);
  metric(out, "rfaas_rm_leases_active", "gauge", "Leases active now.", s.active_leases);
  out += "# HELP rfaas_rm_nodes Known nodes by state (drained nodes count also as up or down).\n"
         "# TYPE rfaas_rm_nodes gauge\n";
  out += "rfaas_rm_nodes{state=\"up\"} " + std::to_string(s.nodes_up) + "\n";
  out += "rfaas_rm_nodes{state=\"down\"} " + std::to_string(s.nodes_down) + "\n";
  out += "rfaas_rm_nodes{state=\"drained\"} " + std::to_string(s.nodes_drained) + "\n";
  metric(out, "rfaas_rm_nodes_registered", "gauge", "Nodes known to the resource manager.",
         s.nodes_up + s.nodes_down);
  metric(out, "rfaas_rm_cores", "gauge", "Cores of all known nodes.", s.cores_total);
  metric(out, "rfaas_rm_cores_leased", "gauge", "Cores held by active leases.", s.cores_leased);
  const FabricWork &w = latencies.fabric_work;
  metric(out, "rfaas_rm_fabric_passes_total", "counter",
         "Passes of the fabric loop over its active peers, and preparations of its sleep.",
         w.passes.load());
  metric(out, "rfaas_rm_fabric_peer_visits_total", "counter",
         "Peers looked at by those passes (the active ones: something to read or send, a close, "
         "or work at the previous pass).",
         w.peer_visits.load());
  metric(out, "rfaas_rm_fabric_links_armed_total", "counter",
         "Links armed one by one before the loop sleeps (connected providers, whose links have "
         "a descriptor each; none where links share an endpoint).",
         w.links_armed.load());
  metric(out, "rfaas_rm_fabric_messages_total", "counter",
         "Messages read from nodes and clients over the fabric.", w.messages.load());
  metric(out, "rfaas_rm_fabric_sweep_visits_total", "counter",
         "Peers looked at by the idle-timeout sweeps (every peer, a few times a second).",
         w.sweep_visits.load());
  metric(out, "rfaas_rm_fabric_connections", "gauge", "Open fabric connections.",
         w.connections.load());
  metric(out, "rfaas_rm_fabric_peers_deferred_total", "counter",
         "Peers left for the next pass because a pass had served its budget of nodes.",
         w.deferred.load());
  metric(out, "rfaas_rm_fabric_pass_peers_max", "gauge",
         "The most peers other than clients one pass has served since start.",
         w.largest_pass.load());
  metric(out, "rfaas_rm_fabric_notices_total", "counter",
         "Lease-ended and renewal notices queued for nodes.", w.notices.load());
  metric(out, "rfaas_rm_fabric_notices_dropped_total", "counter",
         "Notices dropped because a node's backlog was full (the node did not read them as fast "
         "as leases ended).",
         w.notices_dropped.load());
  const char *h = "rfaas_rm_request_duration_seconds";
  out += std::string("# HELP ") + h +
         " Time to answer a request, by interface (http, fabric) and kind.\n# TYPE " + h +
         " histogram\n";
  latencies.http_read.render(out, h, "interface=\"http\",kind=\"read\"");
  latencies.http_write.render(out, h, "interface=\"http\",kind=\"write\"");
  latencies.fabric_register.render(out, h, "interface=\"fabric\",kind=\"register\"");
  latencies.fabric_lease.render(out, h, "interface=\"fabric\",kind=\"lease\"");
  latencies.fabric_renew.render(out, h, "interface=\"fabric\",kind=\"renew\"");
  latencies.fabric_release.render(out, h, "interface=\"fabric\",kind=\"release\"");
  return out;
}

} // namespace rfaas::rm
