# Fixtures of the Python module's tests: a real executor_manager, started
# standalone on the device named by RFAAS_TEST_DEVICE, and an executor
# allocated on it with the example functions.
#
# ctest (tests/python/CMakeLists.txt) sets RFAAS_TEST_MANAGER (the
# executor_manager binary), RFAAS_TEST_LIBRARY (the example functions),
# RFAAS_DEVICES (the device database), RFAAS_TEST_DEVICE and PYTHONPATH.
import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import threading
import time

import pytest

import rfaas

READY = "executor_manager: listening on "


def _die_with_parent():
    # The manager must not outlive pytest, also when ctest kills it.
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _allowed_cpus():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    return "0"


@pytest.fixture(scope="session")
def device():
    return os.environ.get("RFAAS_TEST_DEVICE", "lo-tcp")


@pytest.fixture(scope="session")
def library():
    return os.environ["RFAAS_TEST_LIBRARY"]


@contextlib.contextmanager
def running_manager(work, device):
    """Starts an executor manager on `device` with every CPU this test may
    use, yields its address once it accepts clients, and stops it."""
    config = {
        "device_database": os.path.abspath(os.environ["RFAAS_DEVICES"]),
        "device": device,
        "listen": {"host": "127.0.0.1", "port": 0},
        "resources": {"cores": _allowed_cpus(), "memory_mib": 1024, "max_allocations": 4},
        "deadlines_ms": {"shutdown_grace": 1000},
    }
    (work / "manager.json").write_text(json.dumps(config))
    log = open(work / "manager.err", "w")
    proc = subprocess.Popen(
        [os.environ["RFAAS_TEST_MANAGER"], "--config", str(work / "manager.json"),
         "--skip-resource-manager"],
        stdout=subprocess.PIPE, stderr=log, text=True, preexec_fn=_die_with_parent)
    try:
        # Readiness: the line the manager prints once it accepts clients.
        deadline = time.monotonic() + 20
        line = ""
        while not line.startswith(READY):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                pytest.fail("executor_manager printed no readiness line within 20 s:\n"
                            + (work / "manager.err").read_text())
            line = proc.stdout.readline()
            if not line:
                pytest.fail("executor_manager exited before it was ready:\n"
                            + (work / "manager.err").read_text())
        # Keep draining its stdout, so it never blocks on a full pipe.
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="session")
def manager(tmp_path_factory, device):
    """ "host:port" (or "ofi:...") of a running executor manager."""
    with running_manager(tmp_path_factory.mktemp("manager"), device) as address:
        yield address


def allocate_when_free(ex, manager, library, deadline_s=10.0, **options):
    """allocate(), retried while the manager answers resources_unavailable:
    it frees an allocation's cores once its executor has exited, a moment
    after the client's deallocation returned."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return ex.allocate(manager, library, **options)
        except rfaas.Error as e:
            if e.status != "resources_unavailable" or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


@pytest.fixture(scope="module")
def executor(device, manager, library):
    """An allocation of two workers with two slots each, warm (the workers
    sleep between calls instead of spinning on a loaded 2-core machine).
    Per module: the tests of allocations (test_lifecycle.py) need the
    cores back, and a 2-CPU machine has no more."""
    ex = rfaas.Executor(device)
    ex.allocate(manager, library, cores=2, slots=2, hot_timeout_ms=0)
    yield ex
    ex.close()
