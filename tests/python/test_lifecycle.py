# Allocations, and the errors of setting one up, against a real executor
# manager (conftest.py): each test allocates (and frees) its own.
import pytest

import rfaas


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
        ex.allocate(manager, library, hot_timeout_ms=0)
        assert ex.allocated and ex.workers == 1
        assert ex.execute("echo", b"ctx") == b"ctx"
        assert ex.cold_start["ready"] > 0
    assert not ex.allocated
