#!/usr/bin/env python3
"""Draw the JSON files the benchmarks write (--json FILE), and the CSV files
of the benchmarks and their scripts (--csv FILE), with matplotlib.

  benchmarks/plot.py raw.json rfaas.json -o latency.png            # CDF + payload sweep
  benchmarks/plot.py --kind cdf --sizes 8,1024 raw.json rfaas.json -o cdf.png
  benchmarks/plot.py --kind sweep out/*.json -o sweep.png
  benchmarks/plot.py --kind rate out/lo-tcp-*.json -o rate.png     # ops/s of rate rows
  benchmarks/plot.py --kind payload raw.csv lib.csv rfaas.csv -o payload.png
  benchmarks/plot.py --kind sandbox sandbox.csv -o sandbox.png
  benchmarks/plot.py --kind fleet fleet.jsonl -o fleet.png          # run-rm-fleet.sh --json

Kinds:
  cdf      latency CDF of every latency result (one line per file and size)
  sweep    median latency (band: min to p99) against payload size, one line per file and mode
  rate     operations per second of the rate results (raw_libfabric_msgrate,
           rfaas_throughput_benchmark), one bar per file and size
  payload  median round trip against payload size, one chart per provider with a line
           per implementation (raw, rdmalib, rfaas) and mode; several runs of the same
           line: their median, the bar spans the runs (or the 95 % interval of the
           median from 6 runs on)
  sandbox  cold start (allocate to first result) and hot echo latency per sandbox kind,
           from run-sandbox-benchmarks.sh --csv: median over the rounds, bars min..max
  fleet    the resource manager against the number of nodes, from run-rm-fleet.sh --json
           (JSON lines): lease p50 and p99, and its CPU (heartbeats only, and while
           leasing), one line per device; failed runs are marked on the axis
  auto     fleet for JSON lines; sandbox for a sandbox CSV; cdf and sweep side by side when the files hold
           latency results with CDFs; payload for other latency rows; else rate

Needs /usr/bin/python3, python3-matplotlib and rfaas_stats.py (next to this file).
"""
import argparse
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rfaas_stats  # noqa: E402


def load_csv(path):
    """A CSV file as a document without metadata: one latency (or, for the
    cold benchmark's phases, phase) result per row, with its provider and,
    from run-sandbox-benchmarks.sh --csv, its device, sandbox kind and round.
    Reads the ping-pong shape (impl,provider,endpoint,wait,mode,size,iters,
    median_us,p99_us,...) with any columns before it."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"plot.py: cannot read {path}: {e}")
    need = {"impl", "provider", "mode", "size", "median_us"}
    if not rows or not need <= set(rows[0]):
        sys.exit(f"plot.py: {path} is not a benchmark CSV file (needs columns {', '.join(sorted(need))})")
    results = []
    for r in rows:
        res = {"kind": "phase" if r["impl"] == "rfaas-cold" else "latency", "impl": r["impl"],
               "provider": r["provider"].strip('"'), "mode": r["mode"], "size": int(r["size"]),
               "median_us": float(r["median_us"])}
        for col in ("p99_us", "min_us", "mean_us"):
            if r.get(col):
                res[col] = float(r[col])
        for col, key in (("kind", "sandbox"), ("device", "device"), ("round", "round")):
            if r.get(col) is not None:
                res[key] = r[col]
        results.append(res)
    return {"schema": "rfaas-benchmark/csv", "benchmark": os.path.basename(path), "metadata": {},
            "results": results}


def load_jsonl(path):
    """run-rm-fleet.sh's output: one rm_fleet JSON object per line."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    rows.append(json.loads(line))
    except (OSError, ValueError) as e:
        sys.exit(f"plot.py: cannot read {path}: {e}")
    if not rows or any(r.get("benchmark") != "rm_fleet" for r in rows):
        sys.exit(f"plot.py: {path} holds no rm_fleet lines (write them with run-rm-fleet.sh --json)")
    return {"fleet": rows}


def load(path):
    if path.endswith(".csv"):
        return load_csv(path)
    if path.endswith(".jsonl"):
        return load_jsonl(path)
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"plot.py: cannot read {path}: {e}")
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("rfaas-benchmark/"):
        sys.exit(f"plot.py: {path} is not a benchmark JSON file (no rfaas-benchmark schema)")
    return doc


def label_of(doc, extra=""):
    m = doc.get("metadata", {})
    parts = [doc.get("benchmark", "?").replace("_benchmark", ""), m.get("provider") or "?"]
    if extra:
        parts.append(extra)
    return " ".join(parts)


def human_size(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def impls_of(doc):
    """The implementations a document's latency rows come from: more than one
    in raw_vs_rdmalib_pingpong, whose lines must not be joined."""
    return {r.get("impl") for r in doc.get("results", []) if r.get("kind") == "latency"}


def row_label(doc, r):
    impl = f"{r.get('impl')} " if len(impls_of(doc)) > 1 else ""
    return f"{impl}{r.get('mode', '')}"


def latency_rows(doc, sizes):
    for r in doc.get("results", []):
        if r.get("kind") in ("latency", "phase") and (not sizes or r.get("size") in sizes):
            yield r


def draw_cdf(ax, docs, sizes):
    for doc in docs:
        for r in latency_rows(doc, sizes):
            cdf = r.get("cdf") or {}
            if not cdf.get("us"):
                continue
            ax.plot(cdf["us"], cdf["q"], drawstyle="steps-post",
                    label=label_of(doc, f"{row_label(doc, r)} {human_size(r['size'])}"))
    ax.set_xscale("log")
    ax.set_xlabel("latency (µs, log)")
    ax.set_ylabel("fraction of calls")
    ax.set_ylim(0, 1.01)
    ax.set_title("latency CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="x-small")


def draw_sweep(ax, docs):
    for doc in docs:
        lines = {}
        for r in latency_rows(doc, None):
            if r.get("kind") != "latency":
                continue
            lines.setdefault(row_label(doc, r), []).append(r)
        for mode, rows in lines.items():
            rows.sort(key=lambda r: r["size"])
            if len(rows) < 2:
                continue
            x = [r["size"] for r in rows]
            ax.plot(x, [r["median_us"] for r in rows], marker="o", label=label_of(doc, mode))
            ax.fill_between(x, [r["min_us"] for r in rows], [r["p99_us"] for r in rows], alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("payload (bytes, log)")
    ax.set_ylabel("round trip (µs, log): median, band min..p99")
    ax.set_title("payload sweep")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="x-small")


def draw_rate(ax, docs, paths):
    labels, values = [], []
    for doc in docs:
        for r in doc.get("results", []):
            if r.get("kind") != "rate":
                continue
            what = r.get("pattern", "")
            if r.get("impl") == "rfaas":
                what += f" c{r.get('clients', 1)} w{r.get('workers', 1)}"
            labels.append(label_of(doc, f"{what} {human_size(r['size'])}"))
            values.append(r["ops_per_s"])
    if not values:
        sys.exit("plot.py: no rate results in " + ", ".join(paths))
    y = range(len(values))
    ax.barh(list(y), values)
    ax.set_yticks(list(y))
    ax.set_yticklabels(labels, fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel("operations per second")
    ax.set_title("message and invocation rate")
    ax.grid(True, axis="x", alpha=0.3)


def provider_of(doc, r):
    return r.get("provider") or doc.get("metadata", {}).get("provider") or "?"


def spread(values):
    """The bar around a median of several runs: the 95 % interval of the
    median from 6 runs on, else the runs' range."""
    ci = rfaas_stats.median_ci95(values)
    return ci if ci else (min(values), max(values))


def draw_payload(fig, docs):
    """One chart per provider: median round trip against payload, a line per
    implementation and mode (raw and rdmalib ping-pongs, rFaaS functions)."""
    # provider -> (impl, mode) -> size -> medians of the runs
    lines = {}
    for doc in docs:
        for r in doc.get("results", []):
            if r.get("kind") != "latency" or "median_us" not in r:
                continue
            key = (r.get("impl") or doc.get("benchmark", "?"), r.get("mode", ""))
            per_size = lines.setdefault(provider_of(doc, r), {}).setdefault(key, {})
            per_size.setdefault(r["size"], []).append(r["median_us"])
    if not lines:
        sys.exit("plot.py: no latency results to draw against payload")
    providers = sorted(lines)
    axes = fig.subplots(1, len(providers), squeeze=False)[0]
    fig.set_size_inches(max(6.0, 4.5 * len(providers)), 4)
    order = {"raw": 0, "rdmalib": 1, "rfaas": 2}
    for ax, provider in zip(axes, providers):
        for (impl, mode), per_size in sorted(lines[provider].items(),
                                             key=lambda kv: (order.get(kv[0][0], 9), kv[0])):
            sizes = sorted(per_size)
            med = [rfaas_stats.median(per_size[z]) for z in sizes]
            lo = [m - spread(per_size[z])[0] for m, z in zip(med, sizes)]
            hi = [spread(per_size[z])[1] - m for m, z in zip(med, sizes)]
            ax.errorbar(sizes, med, yerr=[lo, hi], marker="o", markersize=3, capsize=2,
                        label=f"{impl} {mode}".strip())
        ax.set_xscale("log", base=2)
        # Ticks every factor of 16 with readable sizes rather than powers of 2.
        all_sizes = [z for per_size in lines[provider].values() for z in per_size]
        ticks = [1 << (4 * i) for i in range(8) if min(all_sizes) / 4 <= 1 << (4 * i) <= max(all_sizes) * 4]
        ax.set_xticks(ticks)
        ax.set_xticklabels([human_size(t) for t in ticks])
        ax.set_yscale("log")
        ax.set_xlabel("payload (log)")
        ax.set_ylabel("round trip, median (µs, log)")
        ax.set_title(provider)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="x-small")


def draw_sandbox(fig, docs):
    """Per device: the cold start (first result, ms) and the hot echo round
    trip (µs) of each sandbox kind, median over the rounds."""
    # device -> metric -> kind -> per-round medians; metric -> its place
    data, kinds, place = {}, [], {}
    for doc in docs:
        for r in doc.get("results", []):
            kind = r.get("sandbox")
            if kind is None:
                continue
            if kind not in kinds:
                kinds.append(kind)
            if r["kind"] == "phase":
                if r.get("mode") != "first_result":
                    continue
                metric, value = "cold start, allocate to first result (ms)", r["median_us"] / 1000
                place[metric] = (0, 0)
            else:
                metric, value = f"hot {r.get('mode')} {human_size(r['size'])} (µs)", r["median_us"]
                place[metric] = (1, r["size"])
            dev = r.get("device") or provider_of(doc, r)
            data.setdefault(dev, {}).setdefault(metric, {}).setdefault(kind, []).append(value)
    if not data:
        sys.exit("plot.py: no sandbox rows (write them with run-sandbox-benchmarks.sh --csv FILE)")
    devs = sorted(data)
    metrics = sorted(place, key=place.get)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    fig.set_size_inches(max(6.0, 3.6 * len(metrics)), 3.6)
    width = 0.8 / len(devs)
    for ax, metric in zip(axes, metrics):
        for i, dev in enumerate(devs):
            per_kind = data[dev].get(metric, {})
            ks = [k for k in kinds if k in per_kind]
            med = [rfaas_stats.median(per_kind[k]) for k in ks]
            lo = [m - min(per_kind[k]) for m, k in zip(med, ks)]
            hi = [max(per_kind[k]) - m for m, k in zip(med, ks)]
            x = [kinds.index(k) + (i - (len(devs) - 1) / 2) * width for k in ks]
            ax.bar(x, med, width, yerr=[lo, hi], capsize=3, label=dev)
        ax.set_xticks(range(len(kinds)))
        ax.set_xticklabels(kinds)
        ax.set_title(metric, fontsize="small")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize="x-small")


def draw_fleet(fig, docs):
    """Lease latency and the resource manager's CPU against the fleet size,
    one line per device (several runs of one size: their median)."""
    data, failed = {}, {}
    for doc in docs:
        for r in doc.get("fleet", []):
            dev = r["device"]
            if r.get("failed"):  # not every node registered, or no lease: no figure
                failed.setdefault(dev, []).append(r["nodes"])
                continue
            data.setdefault(dev, {}).setdefault(r["nodes"], []).append(r)
    if not data:
        sys.exit("plot.py: no successful rm_fleet runs to draw")
    ax_lat, ax_cpu = fig.subplots(1, 2)
    for dev in sorted(data):
        ns = sorted(data[dev])

        def med(key):
            return [rfaas_stats.median([r[key] for r in data[dev][n]]) for n in ns]

        ax_lat.plot(ns, [v / 1000 for v in med("lease_p50_us")], "o-", label=f"{dev} p50")
        ax_lat.plot(ns, [v / 1000 for v in med("lease_p99_us")], "s--", label=f"{dev} p99")
        ax_cpu.plot(ns, med("rm_cpu_idle_cores"), "o-", label=f"{dev} heartbeats only")
        ax_cpu.plot(ns, med("rm_cpu_lease_cores"), "s--", label=f"{dev} while leasing")
    for dev, ns in sorted(failed.items()):
        for ax in (ax_lat, ax_cpu):
            # At the foot of the axis, whatever its scale.
            ax.plot(ns, [0.03] * len(ns), "rx", markersize=10, transform=ax.get_xaxis_transform(),
                    label=f"{dev}: failed")
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("lease latency, request to grant (ms)")
    ax_cpu.set_ylabel("resource manager CPU (cores)")
    ax_cpu.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    for ax in (ax_lat, ax_cpu):
        ax.set_xscale("log")
        ax.set_xlabel("simulated executor managers (nodes)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="x-small")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+",
                    help="JSON (--json) or CSV (--csv) files written by the benchmarks and scripts")
    ap.add_argument("-o", "--output", default="plot.png", help="image to write (png, svg, pdf)")
    ap.add_argument("--kind", choices=["auto", "cdf", "sweep", "rate", "payload", "sandbox", "fleet"], default="auto")
    ap.add_argument("--sizes", default="", help="CDF: only these payload sizes, e.g. 8,1024")
    ap.add_argument("--title", default="", help="figure title (default: host and date of the first file)")
    ap.add_argument("--dpi", type=int, default=80)
    args = ap.parse_args()

    docs = [load(p) for p in args.files]
    sizes = {int(s) for s in args.sizes.split(",") if s.strip()} or None
    has_latency = any(True for d in docs for _ in latency_rows(d, None))
    has_cdf = any(r.get("cdf") for d in docs for r in latency_rows(d, None))
    has_sandbox = any("sandbox" in r for d in docs for r in d.get("results", []))
    kind = args.kind
    if kind == "auto":
        if any("fleet" in d for d in docs):
            kind = "fleet"
        elif has_sandbox:
            kind = "sandbox"
        elif has_latency:
            kind = "both" if has_cdf else "payload"
        else:
            kind = "rate"

    if kind == "fleet":
        fig = plt.figure(figsize=(11, 4))
        draw_fleet(fig, docs)
    elif kind in ("payload", "sandbox"):
        fig = plt.figure(figsize=(11, 4))
        (draw_payload if kind == "payload" else draw_sandbox)(fig, docs)
    elif kind == "both":
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        draw_cdf(axes[0], docs, sizes)
        draw_sweep(axes[1], docs)
    else:
        fig, ax = plt.subplots(figsize=(7, 4) if kind != "rate" else (8, 0.5 + 0.3 * 12))
        if kind == "cdf":
            draw_cdf(ax, docs, sizes)
        elif kind == "sweep":
            draw_sweep(ax, docs)
        else:
            draw_rate(ax, docs, args.files)
    # CSV files carry no metadata: the first JSON file's, else their names.
    m = next((d["metadata"] for d in docs if d.get("metadata")), None)
    if m is None and not args.title:
        args.title = ", ".join(os.path.basename(p) for p in args.files)
    m = m or {}
    loadavg = m.get("loadavg_1m")
    loadavg = f"{loadavg:.1f}" if isinstance(loadavg, (int, float)) else "?"
    commit = str(m.get("git_commit", "?"))
    commit = commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")
    title = args.title or (f"{m.get('host', '?')}, {m.get('date_utc', '?')}, commit {commit}, "
                           f"{m.get('cpus', '?')} CPUs, load {loadavg}")
    fig.suptitle(title, fontsize="small")
    fig.tight_layout()
    out_dir = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(out_dir, exist_ok=True)
    fig.savefig(args.output, dpi=args.dpi)
    print(f"plot.py: wrote {args.output}")


if __name__ == "__main__":
    main()
