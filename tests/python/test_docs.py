# docs/python.md's complete example runs as written, against the manager of
# conftest.py: its address, device, device database and library replace the
# ones the page names.
import os
import pathlib
import subprocess
import sys

from conftest import running_manager

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def example():
    text = DOC.read_text()
    start = text.index("```python\n", text.index("## A complete example")) + len("```python\n")
    return text[start:text.index("```", start)]


def test_complete_example_runs(tmp_path, device, library):
    # A manager of its own: the example takes two cores, which the shared
    # manager may not have freed yet after the previous tests.
    with running_manager(tmp_path, device) as manager:
        run_example(device, manager, library)


def run_example(device, manager, library):
    code = example()
    for written, actual in (("127.0.0.1:10000", manager), ("config/devices.json",
                            os.path.abspath(os.environ["RFAAS_DEVICES"])),
                            ("build/examples/functions/libfunctions.so", library),
                            ('"lo-tcp"', '"' + device + '"')):
        assert written in code, f"the example no longer names {written}"
        code = code.replace(written, actual)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "sum of squares: " + str(sum(v * v for v in range(1000)))
    assert lines[1] == "b'hello'"
    assert lines[3] == "[b'one', b'two']"
    assert 'failed: unknown_function' in lines[4] and lines[5] == "unknown_function"
