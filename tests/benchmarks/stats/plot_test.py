#!/usr/bin/python3
"""benchmarks/plot.py on small generated inputs in the formats the benchmarks
and scripts write: a ping-pong CSV of raw and rdmalib on two providers, an
rFaaS JSON document, a run-sandbox-benchmarks.sh --csv file. Each kind must
write a PNG with the charts and lines the inputs call for."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.normpath(os.path.join(HERE, "..", "..", "..", "benchmarks"))
PLOT = os.path.join(BENCH, "plot.py")
sys.path.insert(0, BENCH)
import plot  # noqa: E402

HEAD = "impl,provider,endpoint,wait,mode,size,iters,median_us,p99_us,min_us,mean_us\n"


def pingpong_csv(path):
    with open(path, "w") as f:
        f.write(HEAD)
        for rep in range(2):
            for prov, base in (("tcp", 9.0), ("shm", 0.6)):
                for impl, extra in (("raw", 0.0), ("rdmalib", 0.05)):
                    for size in (8, 1024, 65536):
                        m = base + extra + size / 5000 + rep * 0.01
                        f.write(f'{impl},"{prov}",msg,busy,writeimm,{size},100,{m:.3f},{2 * m:.3f},'
                                f'{m * 0.9:.3f},{m:.3f}\n')


def rfaas_json(path):
    results = [{"kind": "latency", "impl": "rfaas", "mode": "echo", "size": z, "iters": 50,
                "median_us": 12.0 + z / 4000, "p99_us": 30.0, "min_us": 11.0, "mean_us": 13.0}
               for z in (8, 1024, 65536)]
    doc = {"schema": "rfaas-benchmark/1", "benchmark": "rfaas_invocation_benchmark",
           "metadata": {"provider": "tcp", "host": "test", "cpus": 2}, "results": results}
    with open(path, "w") as f:
        json.dump(doc, f)


def sandbox_csv(path):
    with open(path, "w") as f:
        f.write("device,kind,round,impl,provider,endpoint,wait,mode,size,iters,median_us,p99_us,"
                "min_us,mean_us\n")
        for rnd in range(3):
            for kind, cold in (("process", 40000), ("namespaces", 47000)):
                f.write(f'lo-tcp,{kind},{rnd},rfaas-cold,"tcp",-,busy,first_result,0,15,'
                        f'{cold + rnd * 100},{cold * 1.2},{cold * 0.9},{cold}\n')
                f.write(f'lo-tcp,{kind},{rnd},rfaas-cold,"tcp",-,busy,connect,0,15,100,120,90,100\n')
                f.write(f'lo-tcp,{kind},{rnd},rfaas,"tcp",-,busy,echo,8,3000,11.5,20,10,12\n')


class Plot(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = self.dir.name

    def tearDown(self):
        self.dir.cleanup()

    def run_plot(self, *args):
        out = os.path.join(self.d, "out.png")
        r = subprocess.run([sys.executable, PLOT, *args, "-o", out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
        self.assertLess(len(data), 100 * 1024)
        return out

    def test_payload_one_chart_per_provider(self):
        csv_path, js = os.path.join(self.d, "pp.csv"), os.path.join(self.d, "rfaas.json")
        pingpong_csv(csv_path)
        rfaas_json(js)
        self.run_plot("--kind", "payload", csv_path, js)
        fig = plot.plt.figure()
        plot.draw_payload(fig, [plot.load(csv_path), plot.load(js)])
        titles = {ax.get_title(): ax for ax in fig.axes}
        self.assertEqual(set(titles), {"shm", "tcp"})
        labels = [t.get_text() for t in titles["tcp"].get_legend().get_texts()]
        self.assertEqual(labels, ["raw writeimm", "rdmalib writeimm", "rfaas echo"])
        # The line of two runs is their median: at 8 B raw tcp, 9.0016 and 9.0116.
        line = titles["tcp"].get_lines()[0]
        self.assertAlmostEqual(line.get_ydata()[0], 9.0066, places=3)

    def test_sandbox_cold_start_per_kind(self):
        path = os.path.join(self.d, "sandbox.csv")
        sandbox_csv(path)
        self.run_plot(path)  # auto: a sandbox CSV draws the sandbox kind
        fig = plot.plt.figure()
        plot.draw_sandbox(fig, [plot.load(path)])
        cold = fig.axes[0]
        self.assertTrue(cold.get_title().startswith("cold start"))
        self.assertEqual([t.get_text() for t in cold.get_xticklabels()], ["process", "namespaces"])
        heights = [b.get_height() for b in cold.patches]
        self.assertAlmostEqual(heights[0], 40.1)  # median over rounds, in ms
        self.assertAlmostEqual(heights[1], 47.1)

    def test_json_cdf_and_sweep_still_drawn(self):
        js = os.path.join(self.d, "rfaas.json")
        rfaas_json(js)
        self.run_plot("--kind", "sweep", js)

    def test_fleet_against_nodes(self):
        path = os.path.join(self.d, "fleet.jsonl")
        rows = [("lo-rxm", 100, 100.0, 2000.0, 0.04, 0.30, False),
                ("lo-rxm", 1000, 180.0, 30000.0, 0.18, 0.37, False),
                ("lo-rxm", 1000, 200.0, 40000.0, 0.20, 0.39, False),
                ("lo-rxm", 10000, 0.0, 0.0, 0.33, 0.78, True)]
        with open(path, "w") as f:
            for dev, n, p50, p99, idle, lease, failed in rows:
                f.write(json.dumps({"benchmark": "rm_fleet", "device": dev, "nodes": n,
                                    "lease_p50_us": p50, "lease_p99_us": p99,
                                    "rm_cpu_idle_cores": idle, "rm_cpu_lease_cores": lease,
                                    "failed": failed}) + "\n")
        self.run_plot(path)  # auto: JSON lines draw the fleet kind
        fig = plot.plt.figure()
        plot.draw_fleet(fig, [plot.load(path)])
        lat, cpu = fig.axes
        p50 = next(l for l in lat.get_lines() if l.get_label() == "lo-rxm p50")
        # Two runs of 1,000 nodes: their median; the failed 10,000 is no point.
        self.assertEqual(list(p50.get_xdata()), [100, 1000])
        self.assertAlmostEqual(p50.get_ydata()[1], 0.19)  # ms
        idle = next(l for l in cpu.get_lines() if l.get_label() == "lo-rxm heartbeats only")
        self.assertAlmostEqual(idle.get_ydata()[1], 0.19)
        self.assertIn("lo-rxm: failed", [l.get_label() for l in lat.get_lines()])

    def test_not_a_benchmark_file(self):
        bad = os.path.join(self.d, "bad.csv")
        with open(bad, "w") as f:
            f.write("a,b\n1,2\n")
        r = subprocess.run([sys.executable, PLOT, bad, "-o", os.path.join(self.d, "x.png")],
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not a benchmark CSV", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
