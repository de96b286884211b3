# Leasing through a real resource manager: it runs with its fabric on the
# test's device, an executor manager registers with it as node1, and the
# module leases, allocates with the lease, invokes, renews and releases.
import json
import os
import re
import secrets
import select
import subprocess
import time
import urllib.request

import numpy as np
import pytest

import rfaas
from conftest import READY, _allowed_cpus, _die_with_parent


def _wait_for(what, deadline, check, proc, log):
    # Readiness from log lines or the REST API, bounded; never a fixed sleep.
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if proc.poll() is not None:
            pytest.fail(f"{what}: the process exited:\n" + log.read_text())
        time.sleep(0.05)
    pytest.fail(f"{what}: not within the deadline:\n" + log.read_text())


class Stack:
    """A resource manager and an executor manager registered with it."""

    def __init__(self, work, device):
        self.work, self.device, self.procs = work, device, []
        self.token = secrets.token_hex(32)
        secret = work / "node.secret"
        secret.write_text(secrets.token_hex(32))
        secret.chmod(0o600)
        devices = os.path.abspath(os.environ["RFAAS_DEVICES"])
        rm_config = {
            "database": str(work / "rm.sqlite"),
            "http": {"host": "127.0.0.1", "port": 0, "threads": 2, "token": self.token},
            "fabric": {"device_database": devices, "device": device, "host": "127.0.0.1",
                       "port": 0, "heartbeat_ms": 1000},
        }
        (work / "rm.json").write_text(json.dumps(rm_config))
        rm_log = work / "rm.err"
        rm = self.start([os.environ["RFAAS_TEST_RESOURCE_MANAGER"], "--config",
                         str(work / "rm.json")], rm_log, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 20

        def lines():
            text = rm_log.read_text()
            rest = re.search(r"^resource_manager: ready, REST on (http://\S+)$", text, re.M)
            fabric = re.search(r"^resource_manager: fabric on (\S+) ", text, re.M)
            return (rest.group(1), fabric.group(1)) if rest and fabric else None

        self.rest, self.fabric = _wait_for("resource_manager", deadline, lines, rm, rm_log)
        self.request("POST", "/nodes", {"name": "node1", "address": "127.0.0.1:1", "cores": 1,
                                        "memory_mib": 1024, "secret": secret.read_text()})

        manager_config = {
            "device_database": devices, "device": device,
            "listen": {"host": "127.0.0.1", "port": 0},
            "resource_manager": {"enabled": True, "address": self.fabric,
                                 "secret_file": str(secret), "node": "node1"},
            "resources": {"cores": _allowed_cpus(), "memory_mib": 1024, "max_allocations": 4},
            "deadlines_ms": {"shutdown_grace": 1000},
        }
        (work / "manager.json").write_text(json.dumps(manager_config))
        manager_log = work / "manager.err"
        manager = self.start([os.environ["RFAAS_TEST_MANAGER"], "--config",
                              str(work / "manager.json")], manager_log, stdout=subprocess.PIPE)
        line = ""
        while not line.startswith(READY):
            if not select.select([manager.stdout], [], [], max(0, deadline - time.monotonic()))[0]:
                pytest.fail("executor_manager not ready:\n" + manager_log.read_text())
            line = manager.stdout.readline()
            if not line:
                pytest.fail("executor_manager exited:\n" + manager_log.read_text())
        self.manager = line.rsplit(" ", 1)[1].strip()

        def node_up():
            return any(n.get("name") == "node1" and n.get("state") == "up"
                       for n in self.request("GET", "/nodes"))

        _wait_for("node1 registered", deadline, node_up, manager, manager_log)

    def start(self, argv, log, stdout):
        proc = subprocess.Popen(argv, stdout=stdout, stderr=open(log, "w"), text=True,
                                preexec_fn=_die_with_parent)
        self.procs.append(proc)
        return proc

    def request(self, method, path, body=None):
        req = urllib.request.Request(self.rest + path, method=method,
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": "Bearer " + self.token,
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as reply:
            return json.loads(reply.read() or b"{}")

    def stop(self):
        # The executor manager first: it ends its executors.
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, device):
    s = None
    try:
        s = Stack(tmp_path_factory.mktemp("lease"), device)
        yield s
    finally:
        if s:
            s.stop()


def test_lease_allocate_invoke_release(stack, device, library):
    rm = rfaas.ResourceManager(stack.fabric, device, client="pytest")
    assert rm.address == stack.fabric
    lease = rm.lease(cores=1, memory_mib=256, duration=30)
    assert lease.cores == 1 and lease.client == "pytest"
    assert [(p.node, p.server, p.cores) for p in lease.parts] == [("node1", stack.manager, 1)]
    assert lease.expiry_ms > time.time() * 1000
    with rfaas.Executor(device) as ex:
        ex.allocate(lease, library, hot_timeout_ms=0)
        assert ex.workers == 1
        x = np.arange(100, dtype=np.uint64)
        out = np.zeros(1, dtype=np.uint64)
        assert ex.execute("sum_squares", x, out) == 8
        assert int(out[0]) == sum(v * v for v in range(100))
    before = lease.expiry_ms
    rm.renew(lease, 60)
    assert lease.expiry_ms > before
    rm.release(lease)
    with pytest.raises(rfaas.Error) as e:
        rm.release(lease)
    assert e.value.phase == "lease" and e.value.status == "lease_invalid"


def test_registered_manager_refuses_without_lease(stack, device, library):
    ex = rfaas.Executor(device)
    with pytest.raises(rfaas.Error) as e:
        ex.allocate(stack.manager, library)
    assert e.value.status == "lease_invalid"
    assert stack.manager in str(e.value)
