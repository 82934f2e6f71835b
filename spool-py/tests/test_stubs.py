"""The type stubs: mypy, strict, checks the README's producer
and reader against ``spool``'s stubs and ``py.typed`` — and flags a wrong
call, so the check has teeth. mypy is installed by ``cargo xtask test``
(``SPOOL_REQUIRE_OPTIONAL=1`` makes its absence a failure, not a skip)."""

import os
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "python"

EXAMPLE = '''
import spool

with spool.Engine(root="/tmp/r", store=None, catalog=None, rank=None) as engine:
    sink = engine.sink()
    sink.write(b"one record")
    sink.write(memoryview(b"no copy"))
    sink.write_many([b"a", b"b"])
    sink.flush(timeout=5.0)
    drained = engine.flush(timeout=30.0)
    snap = engine.snapshot()

try:
    spool.Sink.claim(root="/tmp/r")
except spool.OwnedError as e:
    print(e.pid, e.host, e.path)
except spool.DeadlineError as e:
    waited: TimeoutError = e

rows = spool.Catalog("sqlite:///tmp/r/.catalog.db").ls()
for row in rows:
    print(row["pack_id"])
frame = rows.to_pandas()
'''


def mypy(tmp_path, source):
    if os.environ.get("SPOOL_REQUIRE_OPTIONAL") != "1":
        pytest.importorskip("mypy")
    script = tmp_path / "example.py"
    script.write_text(source)
    env = dict(os.environ, MYPYPATH=str(PACKAGE))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(script)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )


def test_mypy_strict_accepts_the_readme_example_against_the_stubs(tmp_path):
    out = mypy(tmp_path, EXAMPLE)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_flags_a_record_that_is_not_bytes_like(tmp_path):
    out = mypy(tmp_path, EXAMPLE + '\nsink.write(42)\nspool.Engine(roots="/tmp/r")\n')
    assert out.returncode == 1, out.stdout + out.stderr
    lines = len(EXAMPLE.splitlines())
    for n in (lines + 2, lines + 3):
        assert f"example.py:{n}: error" in out.stdout, out.stdout
