#!/usr/bin/env bash
# Smoke of the fleet simulator: run-rm-fleet.sh --smoke (100 simulated
# executor managers over tcp;ofi_rxm, two leasing clients, a few seconds)
# against a real resource manager, then checks its JSON line: every field
# there, every node registered, leases granted without errors, each released
# lease's notice reached its node and came back as an accounting report that
# the resource manager stored, and the REST probes answered.
#
#   rm_fleet.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: rm_fleet.sh BUILD_DIR}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-fleet-smoke.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The driver stops its resource manager and the fleet on every exit path.
"$src/benchmarks/run-rm-fleet.sh" --build-dir "$build" --smoke --idle-seconds 1 --seconds 1.5 \
  --register-timeout 40 --json "$work/fleet.jsonl"

/usr/bin/python3 - "$work/fleet.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(rows) == 1, f"expected one run, got {len(rows)}"
r = rows[0]
fields = """device provider nodes hosts clients rate_per_client heartbeat_ms add_seconds nodes_up
register_seconds rm_cpu_idle_cores rm_cpu_per_heartbeat_us rm_rss_mib_empty rm_rss_mib_added
rm_rss_mib rm_fds_empty rm_fds rm_kib_per_link rm_fds_per_link leases refused errors leases_per_s
lease_p50_us lease_p99_us rm_cpu_lease_cores rm_cpu_per_lease_us rm_rss_mib_leasing rm_fds_leasing
rest_nodes_p50_ms rest_nodes_p99_ms rest_page_p50_ms rest_page_p99_ms
rest_node_p50_ms rest_node_p99_ms rest_metrics_p50_ms rest_metrics_p99_ms rest_samples
rest_errors links_registered notices reports host_kib_per_link host_fds_per_link db_bytes
db_bytes_per_lease db_bytes_hour_extrapolated retention_days
db_bytes_retention_extrapolated accounting_records settle_seconds rm_pass_peers_max
rm_peers_deferred_leasing rest_every_ms failed""".split()
missing = [f for f in fields if f not in r]
assert not missing, f"fields missing: {missing}"
problems = []
def check(ok, what):
    if not ok:
        problems.append(what)
check(r["failed"] is False, "rm_fleet marked the run failed")
check(r["nodes"] == 100, f"nodes {r['nodes']}, expected 100")
check(r["nodes_up"] == r["nodes"], f"{r['nodes_up']} of {r['nodes']} nodes up at the resource manager")
check(r["links_registered"] == r["nodes"], f"the hosts saw {r['links_registered']} registered links")
check(r["leases"] > 0 and r["errors"] == 0, f"{r['leases']} leases, {r['errors']} errors")
check(0 < r["lease_p50_us"] <= r["lease_p99_us"], f"lease p50 {r['lease_p50_us']}, p99 {r['lease_p99_us']}")
# Every lease was released: each release is a notice to its node, answered
# with a final accounting report.
check(r["notices"] == r["leases"], f"{r['notices']} notices for {r['leases']} released leases")
check(r["reports"] == r["notices"], f"{r['reports']} reports for {r['notices']} notices")
check(r["accounting_records"] == r["leases"],
      f"the resource manager stored {r['accounting_records']} final accounting records for "
      f"{r['leases']} leases")
check(r["rm_rss_mib"] > 0 and r["rm_fds"] > 0, "no RSS or descriptors read from /proc")
# The heartbeat phase's CPU comes from /proc's clock ticks (10 ms each): 100
# nodes' heartbeats over 3 s can cost less than one tick, so zero is a
# figure below resolution, not a fault; a negative one is.
check(r["rm_cpu_idle_cores"] >= 0, f"negative CPU time for the heartbeats: {r['rm_cpu_idle_cores']}")
check(r["rest_samples"] > 0 and r["rest_errors"] == 0,
      f"REST probes: {r['rest_samples']} answered, {r['rest_errors']} errors")
check(r["db_bytes"] > 0, "no database size")
# A fabric pass serves at most 64 peers besides clients, however many nodes
# have something to say (fabric_server.cpp, kNodePeersPerPass).
check(0 <= r["rm_pass_peers_max"] <= 64,
      f"a fabric pass served {r['rm_pass_peers_max']} nodes (at most 64)")
if problems:
    sys.exit("rm_fleet smoke: " + "; ".join(problems) + "\n" + json.dumps(r))
print(f"rm_fleet smoke: {r['nodes']} nodes up in {r['register_seconds']} s, {r['leases']} leases "
      f"(p50 {r['lease_p50_us']} µs), {r['notices']} notices and reports")
PY
