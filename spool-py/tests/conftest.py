"""Shared fixtures of the Python tests: a spool root per test, the `spool`
binary (SPOOL_BIN, else the cargo target directory's debug build), child
Python processes, and the real servers' environment for tests marked
``real`` (skipped without servers, failed when SPOOL_REQUIRE_SERVERS=1)."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def spool_bin() -> str:
    if os.environ.get("SPOOL_BIN"):
        return os.environ["SPOOL_BIN"]
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return str(target / "debug" / "spool")


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "spool"
    r.mkdir()
    return r


def run_spool(*args, timeout=60):
    """Runs the `spool` command; returns the CompletedProcess."""
    return subprocess.run([spool_bin(), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def python(code: str, *args, **kw) -> subprocess.Popen:
    """Starts a child Python running `code` (dedented) with stdout piped."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def all_records(root) -> list:
    """Every record of every pack the embedded catalog under `root` lists,
    read back from the store (checksums checked)."""
    import spool

    cat = spool.Catalog(f"sqlite://{root}/.catalog.db")
    out = []
    for row in cat.ls():
        out.extend(spool.fetch(row["pack_id"], root=str(root)))
    return out


def real_env():
    """The servers' environment, or skip/fail as SPOOL_REQUIRE_SERVERS says."""
    need = ["SPOOL_TEST_CLICKHOUSE_URL", "SPOOL_TEST_S3_BUCKET", "AWS_ENDPOINT"]
    missing = [k for k in need if not os.environ.get(k)]
    if missing:
        if os.environ.get("SPOOL_REQUIRE_SERVERS") == "1":
            pytest.fail(f"SPOOL_REQUIRE_SERVERS=1 but {', '.join(missing)} not set")
        pytest.skip(f"no real servers ({', '.join(missing)} not set)")
    return os.environ
