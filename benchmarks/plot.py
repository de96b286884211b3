#!/usr/bin/env python3
"""Draw the JSON files the benchmarks write (--json FILE) with matplotlib.

  benchmarks/plot.py raw.json rfaas.json -o latency.png            # CDF + payload sweep
  benchmarks/plot.py --kind cdf --sizes 8,1024 raw.json rfaas.json -o cdf.png
  benchmarks/plot.py --kind sweep out/*.json -o sweep.png
  benchmarks/plot.py --kind rate out/lo-tcp-*.json -o rate.png     # ops/s of rate rows

Kinds:
  cdf    latency CDF of every latency result (one line per file and size)
  sweep  median latency (band: min to p99) against payload size, one line per file and mode
  rate   operations per second of the rate results (raw_libfabric_msgrate,
         rfaas_throughput_benchmark), one bar per file and size
  auto   cdf and sweep side by side when the files hold latency results, else rate

Needs only python3 and python3-matplotlib.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="JSON files written by the benchmarks (--json)")
    ap.add_argument("-o", "--output", default="plot.png", help="image to write (png, svg, pdf)")
    ap.add_argument("--kind", choices=["auto", "cdf", "sweep", "rate"], default="auto")
    ap.add_argument("--sizes", default="", help="CDF: only these payload sizes, e.g. 8,1024")
    ap.add_argument("--title", default="", help="figure title (default: host and date of the first file)")
    ap.add_argument("--dpi", type=int, default=80)
    args = ap.parse_args()

    docs = [load(p) for p in args.files]
    sizes = {int(s) for s in args.sizes.split(",") if s.strip()} or None
    has_latency = any(True for d in docs for _ in latency_rows(d, None))
    kind = args.kind
    if kind == "auto":
        kind = "both" if has_latency else "rate"

    if kind == "both":
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
    m = docs[0].get("metadata", {})
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
