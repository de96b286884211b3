# The Python module against a real executor manager (conftest.py), on the
# device of RFAAS_TEST_DEVICE: synchronous, asynchronous (futures and
# asyncio) and parallel invocations with NumPy inputs, registered arrays,
# and the errors.
import asyncio
import threading
import time

import numpy as np
import pytest

import rfaas


def sum_squares(values):
    # The example function's result: the sum of squares modulo 2**64.
    return int(sum(int(v) * int(v) for v in values) % 2**64)


def test_echo_numpy_into_output(executor):
    x = np.linspace(0.0, 1.0, 1000)
    out = np.zeros_like(x)
    assert executor.execute("echo", x, out) == x.nbytes
    np.testing.assert_array_equal(out, x)


def test_echo_without_output_returns_bytes(executor):
    assert executor.execute("echo", b"hello rfaas") == b"hello rfaas"
    assert executor.execute("echo", bytearray(b"xyz")) == b"xyz"
    assert executor.execute("echo", memoryview(b"abcdef")[2:]) == b"cdef"


def test_sum_squares(executor):
    x = np.arange(1, 2001, dtype=np.uint64)
    out = np.zeros(1, dtype=np.uint64)
    assert executor.execute("sum_squares", x, out) == 8
    assert int(out[0]) == sum_squares(x)


def test_registered_arrays_travel_without_copies(executor):
    x = executor.empty(512, np.uint64)
    x[:] = np.arange(512, dtype=np.uint64) * 3
    out = executor.zeros(512, np.uint64)
    assert isinstance(x, np.ndarray) and x.dtype == np.uint64 and out.shape == (512,)
    before = executor.copies
    assert executor.execute("echo", x, out) == x.nbytes
    after = executor.copies
    np.testing.assert_array_equal(out, x)
    assert after["inputs_in_place"] == before["inputs_in_place"] + 1
    assert after["results_in_place"] == before["results_in_place"] + 1
    assert after["inputs_copied"] == before["inputs_copied"]
    # Plain NumPy memory is copied by librfaas (not by Python) into a
    # registered slot, and the result copied out of one.
    plain = np.arange(64, dtype=np.uint64)
    plain_out = np.zeros_like(plain)
    executor.execute("echo", plain, plain_out)
    last = executor.copies
    assert last["inputs_copied"] == after["inputs_copied"] + 1
    assert last["results_copied"] == after["results_copied"] + 1
    np.testing.assert_array_equal(plain_out, plain)


def test_registered_array_outlives_nothing(executor):
    # Arrays keep their block until NumPy drops them; many come and go.
    for i in range(50):
        a = executor.zeros((4, 8), "float32")
        a += i
        assert a.sum() == 32 * i


def test_futures(executor):
    inputs = [np.full(100, i, dtype=np.int32) for i in range(executor.workers * executor.slots)]
    outputs = [np.zeros_like(x) for x in inputs]
    futures = [executor.submit("echo", x, out) for x, out in zip(inputs, outputs)]
    assert [f.result() for f in futures] == [x.nbytes for x in inputs]
    assert all(f.done() for f in futures)
    assert futures[0].result() == inputs[0].nbytes  # collected once, kept
    for x, out in zip(inputs, outputs):
        np.testing.assert_array_equal(out, x)
    assert executor.submit("echo", b"future bytes").result() == b"future bytes"


def test_asyncio(executor):
    async def main():
        one = await executor.submit("echo", b"awaited")
        xs = [np.arange(i, i + 10, dtype=np.uint64) for i in range(4)]
        outs = [np.zeros(1, dtype=np.uint64) for _ in xs]
        sizes = await asyncio.gather(
            *(executor.submit("sum_squares", x, o) for x, o in zip(xs[:2], outs[:2])))
        sizes += await asyncio.gather(
            *(executor.submit("sum_squares", x, o) for x, o in zip(xs[2:], outs[2:])))
        return one, sizes, [int(o[0]) for o in outs], [sum_squares(x) for x in xs]

    one, sizes, got, expected = asyncio.run(main())
    assert one == b"awaited"
    assert sizes == [8, 8, 8, 8]
    assert got == expected


def test_parallel(executor):
    xs = [np.arange(i * 100, (i + 1) * 100, dtype=np.uint64) for i in range(6)]
    outs = [np.zeros(1, dtype=np.uint64) for _ in xs]
    assert executor.execute_parallel("sum_squares", xs, outs) == [8] * 6
    assert [int(o[0]) for o in outs] == [sum_squares(x) for x in xs]
    assert executor.execute_parallel("echo", [b"a", b"bc", b"def"]) == [b"a", b"bc", b"def"]
    with pytest.raises(ValueError, match="3 inputs but 2 outputs"):
        executor.execute_parallel("echo", [b"a", b"b", b"c"], [bytearray(1), bytearray(1)])


def test_gil_is_released_while_waiting(executor):
    # While a thread waits for a 400 ms function, this thread runs Python.
    # Were the GIL held during the wait, this thread could only run again
    # once the call had returned, and would find the thread finished.
    started = threading.Event()

    def call():
        started.set()
        executor.execute("sleep_ms", np.array([400], dtype=np.uint32))

    t = threading.Thread(target=call)
    t.start()
    started.wait()
    # Let the thread get into execute() (this sleep releases the GIL); it
    # would hold the GIL from there on if execute() kept it.
    time.sleep(0.05)
    busy = sum(range(10000))  # pure Python: needs the GIL
    alive = t.is_alive()
    t.join()
    assert busy == 49995000
    assert alive, "the GIL was held while the invocation waited"


def test_unknown_function_raises(executor):
    with pytest.raises(rfaas.InvocationError) as e:
        executor.execute("no_such_function", b"x")
    assert e.value.status == "unknown_function"
    assert e.value.function == "no_such_function"
    assert isinstance(e.value, rfaas.Error) and isinstance(e.value, RuntimeError)
    assert 'invocation of "no_such_function" failed: unknown_function' in str(e.value)
    # The executor goes on serving.
    assert executor.execute("echo", b"still here") == b"still here"
    with pytest.raises(rfaas.InvocationError, match="unknown_function"):
        executor.submit("no_such_function", b"x").result()
    with pytest.raises(rfaas.InvocationError, match=r"\(input 1 of 2\) failed: payload_too_large"):
        executor.execute_parallel("echo", [b"x", bytes(executor.max_input_size + 1)])


def test_payload_too_large_raises(executor):
    with pytest.raises(rfaas.InvocationError) as e:
        executor.execute("echo", bytes(executor.max_input_size + 1))
    assert e.value.status == "payload_too_large"
    assert e.value.detail == executor.max_input_size


def test_buffers_are_checked(executor):
    x = np.arange(100, dtype=np.float64)
    with pytest.raises(TypeError, match="input must be a C-contiguous"):
        executor.execute("echo", x[::2])
    with pytest.raises(TypeError, match="output must be a C-contiguous writable"):
        executor.execute("echo", x, b"read-only bytes")
    with pytest.raises(TypeError, match="buffer protocol"):
        executor.execute("echo", "a str is not a buffer")
