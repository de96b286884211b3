# Allocations, and the errors of setting one up, against a real executor
# manager (conftest.py): each test allocates (and frees) its own.
import pytest

import rfaas
from conftest import _allowed_cpus, allocate_when_free


def test_wrong_server_raises(device, library):
    ex = rfaas.Executor(device, connect_timeout=2.0, allocation_timeout=2.0)
    with pytest.raises(rfaas.Error) as e:
        ex.allocate("127.0.0.1:1", library)
    assert e.value.phase == "connect"
    assert "127.0.0.1:1" in str(e.value)
    assert e.value.manager == "127.0.0.1:1"
    assert not ex.allocated


def test_missing_library_raises(device, manager):
    ex = rfaas.Executor(device)
    with pytest.raises(rfaas.Error, match="/nonexistent/libfunctions.so") as e:
        ex.allocate(manager, "/nonexistent/libfunctions.so")
    assert e.value.phase == "configuration"


def test_usage_errors(device):
    ex = rfaas.Executor(device)
    with pytest.raises(rfaas.Error, match="no allocation") as e:
        ex.execute("echo", b"x")
    assert e.value.phase == "usage"
    with pytest.raises(rfaas.Error, match="no_such_device"):
        rfaas.Executor("no_such_device")
    with pytest.raises(rfaas.Error, match='invalid address "not an address"'):
        ex.allocate("not an address", "lib.so")


def test_resource_manager_unreachable(device):
    with pytest.raises(rfaas.Error) as e:
        rfaas.ResourceManager("127.0.0.1:1", device, connect_timeout=1.0)
    assert e.value.phase == "connect"


def test_context_manager(device, manager, library):
    with rfaas.Executor(device) as ex:
        allocate_when_free(ex, manager, library, hot_timeout_ms=0)
        assert ex.allocated and ex.workers == 1
        assert ex.execute("echo", b"ctx") == b"ctx"
        assert ex.cold_start["ready"] > 0
    assert not ex.allocated


def test_dropping_the_executor_ends_its_allocation(device, manager, library):
    # A registered array outlives its Executor, but the cores come back: the
    # manager has exactly as many as this test may use, so each allocation
    # below needs the previous one to have ended.
    cores = len(_cpus())
    arrays = []
    for i in range(2):
        ex = rfaas.Executor(device)
        # Within 2 s: an allocation nobody ends is ended by the executor
        # itself ~4 s later (its client unreachable), which must not count.
        allocate_when_free(ex, manager, library, deadline_s=2.0, cores=cores, hot_timeout_ms=0)
        arrays.append(ex.zeros(8, "int64"))
        arrays[-1] += i
        del ex
    assert [int(a.sum()) for a in arrays] == [0, 8]


def _cpus():
    ids = set()
    for part in _allowed_cpus().split(","):
        first, _, last = part.partition("-")
        ids.update(range(int(first), int(last or first) + 1))
    return ids
