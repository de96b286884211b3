#!/usr/bin/python3
"""Hot invocation latency through the Python module, next to C++'s in the same run.

Starts an executor manager standalone on DEVICE, runs the C++ benchmark
(rfaas_invocation_benchmark, echo, one worker, always hot) and then the same
calls through the `rfaas` module, alternating ROUNDS times, and prints the
median, 99th percentile and minimum of each, plus the Python module's cost
over C++ per call. Python is timed per call with time.perf_counter_ns()
around Executor.execute(), as an application would see it.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python_invocation.py \\
        --build build --device lo-tcp --iters 20000

Python inputs and outputs are registered arrays (Executor.empty(): no copy
anywhere, like the C++ benchmark's rfaas::allocator vectors) and, in a
second row, plain NumPy arrays (librfaas copies them through its registered
slots).
"""
import argparse
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import rfaas_stats  # benchmarks/: the statistics of every benchmark


def die_with_parent():
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_manager(binary, devices, device, work):
    with open("/proc/self/status") as f:
        cores = next(l.split(":", 1)[1].strip() for l in f if l.startswith("Cpus_allowed_list:"))
    config = {"device_database": os.path.abspath(devices), "device": device,
              "listen": {"host": "127.0.0.1", "port": 0},
              "resources": {"cores": cores, "memory_mib": 1024, "max_allocations": 4}}
    path = os.path.join(work, "manager.json")
    with open(path, "w") as f:
        json.dump(config, f)
    log = open(os.path.join(work, "manager.err"), "w")
    proc = subprocess.Popen([binary, "--config", path, "--skip-resource-manager"],
                            stdout=subprocess.PIPE, stderr=log, text=True,
                            preexec_fn=die_with_parent)
    deadline = time.monotonic() + 20
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            proc.kill()
            sys.exit("executor_manager is not ready after 20 s:\n" + open(log.name).read())
        line = proc.stdout.readline()
        if not line:
            sys.exit("executor_manager exited:\n" + open(log.name).read())
        if line.startswith("executor_manager: listening on "):
            return proc, line.rsplit(" ", 1)[1].strip()


def run_cpp(binary, args, manager, size, iters):
    out = subprocess.run(
        [binary, "--devices", args.devices, "--device", args.device, "--manager", manager,
         "--library", args.library, "--sizes", str(size), "--hot-timeout", "-1",
         "--iters", str(iters), "--budget", "1000", "--settle-ms", "200"],
        check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields and not line.startswith("#") and fields[0] != "mode" and fields[1] == str(size):
            return {"median": float(fields[3]), "p99": float(fields[4]), "min": float(fields[5])}
    sys.exit("no result row in the C++ benchmark's output:\n" + out)


def run_python(rfaas, args, manager, size, iters, registered):
    with rfaas.Executor(args.device, args.devices) as ex:
        ex.allocate(manager, args.library, cores=1, hot_timeout_ms=-1,
                    max_input_size=max(size, 8), max_output_size=max(size, 8))
        if registered:
            x, out = ex.empty(size), ex.empty(size)
        else:
            x, out = np.empty(size, np.uint8), np.empty(size, np.uint8)
        x[:] = 1
        execute, clock = ex.execute, time.perf_counter_ns
        for _ in range(min(iters, 1000)):  # warm-up, as the C++ side's first calls
            execute("echo", x, out)
        samples = [0] * iters
        for i in range(iters):
            t0 = clock()
            execute("echo", x, out)
            samples[i] = clock() - t0
    samples.sort()
    us = [s / 1000.0 for s in samples]
    return {"median": rfaas_stats.median(us), "p99": rfaas_stats.percentile(us, 0.99), "min": us[0]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build", help="build directory")
    p.add_argument("--devices", default="config/devices.json")
    p.add_argument("--device", default="lo-tcp")
    p.add_argument("--library", help="default: BUILD/examples/functions/libfunctions.so")
    p.add_argument("--size", type=int, default=8, help="payload bytes")
    p.add_argument("--iters", type=int, default=20000, help="measured calls per run")
    p.add_argument("--rounds", type=int, default=2, help="C++ then Python, this many times")
    args = p.parse_args()
    args.library = args.library or os.path.join(args.build, "examples/functions/libfunctions.so")
    sys.path.insert(0, os.path.join(args.build, "python"))
    import rfaas

    cpp = os.path.join(args.build, "benchmarks/rfaas_invocation_benchmark")
    with tempfile.TemporaryDirectory(prefix="rfaas-pybench.") as work:
        proc, manager = start_manager(os.path.join(args.build, "server/executor_manager/executor_manager"),
                                      args.devices, args.device, work)
        try:
            rows = []
            for r in range(args.rounds):
                rows.append(("C++ (rfaas::allocator)", r, run_cpp(cpp, args, manager, args.size, args.iters)))
                rows.append(("Python (Executor.empty)", r,
                             run_python(rfaas, args, manager, args.size, args.iters, True)))
                rows.append(("Python (plain numpy)", r,
                             run_python(rfaas, args, manager, args.size, args.iters, False)))
        finally:
            proc.terminate()
            proc.wait()
    print(f"# echo {args.size} B, device {args.device}, one worker always hot, "
          f"{args.iters} calls per run, microseconds")
    print(f"{'client':<26} {'round':>5} {'median':>8} {'p99':>8} {'min':>8}")
    for name, r, s in rows:
        print(f"{name:<26} {r:>5} {s['median']:>8.2f} {s['p99']:>8.2f} {s['min']:>8.2f}")
    for label in ("Python (Executor.empty)", "Python (plain numpy)"):
        cpp_med = rfaas_stats.median(s["median"] for n, _, s in rows if n.startswith("C++"))
        py_med = rfaas_stats.median(s["median"] for n, _, s in rows if n == label)
        print(f"# {label}: +{py_med - cpp_med:.2f} us per call over C++ "
              f"({py_med / cpp_med:.2f}x), medians over {args.rounds} rounds")


if __name__ == "__main__":
    main()
