"""The producer API end to end on the embedded defaults (SQLite catalog,
local-directory store), and the exceptions, each raised by a real cause."""

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import threading
import time
import uuid

import pytest

import spool
from conftest import all_records, python, run_spool


def test_write_flush_close_and_read_back_through_catalog_and_store(root):
    with spool.Engine(root=str(root), adopt=False) as engine:
        sink = engine.sink(seal_records=3)
        assert engine.sink() is sink, "no options: the attached sink"
        sink.write(b"one record")
        sink.write(memoryview(b"a memoryview"))
        sink.write(bytearray(b"a bytearray"))
        assert sink.write_many(b"r%d" % i for i in range(5)) == 5
        sink.flush(timeout=5.0)
        assert engine.flush(timeout=30.0) is True
        snap = engine.snapshot()
        assert snap["indexed"] == 3 and snap["pending_index"] == 0, snap
        d = engine.dir
    assert not d.exists(), "a clean close removes the drained rank directory"
    got = all_records(root)
    want = [b"one record", b"a memoryview", b"a bytearray"] + [b"r%d" % i for i in range(5)]
    assert sorted(got) == sorted(want)
    rows = spool.Catalog(f"sqlite://{root}/.catalog.db").ls(limit=2)
    assert len(rows) == 2 and set(rows[0]) == set(spool.COLUMNS)


def test_close_without_flush_still_ships_the_tail(root):
    engine = spool.Engine(root=str(root), adopt=False)
    engine.sink().write(b"tail")
    report = engine.close()
    assert report["sealed"] and report["drained"] and report["removed"], report
    assert engine.close() is None, "close is idempotent"
    assert all_records(root) == [b"tail"]
    with pytest.raises(spool.Error, match="closed"):
        engine.sink()


def test_an_exception_inside_with_still_seals_and_releases(root):
    with pytest.raises(KeyError):
        with spool.Engine(root=str(root), adopt=False) as engine:
            engine.sink().write(b"before the error")
            d = engine.dir
            raise KeyError("boom")
    assert not d.exists()
    assert all_records(root) == [b"before the error"]


def test_threads_writing_to_one_sink(root):
    n, per = 4, 2000
    with spool.Engine(root=str(root), adopt=False) as engine:
        sink = engine.sink(seal_records=500)

        def work(t):
            for i in range(per):
                sink.write(b"t%d-%d" % (t, i))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    got = all_records(root)
    assert len(got) == n * per
    assert set(got) == {b"t%d-%d" % (t, i) for t in range(n) for i in range(per)}


def test_sink_claim_is_sink_only_and_leaves_a_dead_sibling_for_spool_run(root):
    with spool.Sink.claim(root=str(root), rank=7, seal_records=2) as sink:
        sink.write_many([b"a", b"b", b"c"])
        d = sink.dir
    assert d.name.startswith("r7-") and d.exists()
    done = run_spool("run", "--once", "--timeout", "30", "--spool-root", root)
    assert done.returncode == 0, done.stderr
    assert not d.exists(), "adopted and removed"
    assert sorted(all_records(root)) == [b"a", b"b", b"c"]


def test_run_drains_dead_siblings_as_spool_run_once_does_and_closes(root):
    # a dead sibling (a sink-only producer's directory) and a pack of the
    # engine's own
    with spool.Sink.claim(root=str(root), rank=7, seal_records=2) as sink:
        sink.write_many([b"a", b"b", b"c"])
        dead = sink.dir
    engine = spool.Engine(root=str(root))
    engine.sink(seal_records=1).write(b"own")
    report = engine.run(timeout=60)
    assert report["end"] == "drained", report
    assert report["message"].startswith("drained: "), report
    assert report["left_packs"] == 0 and report["elsewhere_packs"] == 0, report
    assert report["snapshot"]["adopted_spools"] == 1, report
    assert engine.closed, "run() closes the engine"
    assert not dead.exists(), "adopted and removed"
    assert sorted(all_records(root)) == [b"a", b"b", b"c", b"own"]


def test_snapshot_dict_has_the_fields_of_spool_run_json(root):
    # both views are generated from spool-service's one table of fields
    import json

    def keys(d):
        return {k: keys(v) if isinstance(v, dict) else None for k, v in d.items()}

    with spool.Engine(root=str(root)) as engine:
        snap = engine.snapshot()
    done = run_spool("run", "--once", "--json", "--timeout", "30", "--spool-root", root)
    assert done.returncode == 0, done.stderr
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert keys(snap) == keys(dict(last["snapshot"], ship="self"))


def test_run_refuses_an_engine_the_daemon_ships_and_keeps_it_open(root):
    with spool.Engine(root=str(root), ship="daemon") as engine:
        with pytest.raises(spool.Error, match="no service to run"):
            engine.run(timeout=5)
        assert not engine.closed


def test_sink_open_on_a_plain_directory(tmp_path):
    d = tmp_path / "plain"
    with spool.Sink.open(str(d), seal_records=1) as sink:
        sink.write(b"x")
        sink.flush()
    packs = sorted(d.glob("*.ready"))
    assert len(packs) == 1
    assert list(spool.read_pack(str(packs[0]))) == [b"x"]
    assert list(spool.read_pack(packs[0].read_bytes())) == [b"x"]


# ---------------------------------------------------------------- errors


def test_bad_options_are_value_errors_naming_the_option(root):
    with pytest.raises(ValueError, match="unknown option.*sael_records"):
        spool.Sink.open(str(root / "d"), sael_records=1)
    with pytest.raises(spool.ConfigError, match="admission='maybe'.*block, refuse"):
        spool.Sink.open(str(root / "d"), admission="maybe")
    with pytest.raises(spool.ConfigError, match=r"lease\.ttl \(argument lease_ttl\)"):
        spool.Engine(root=str(root), lease_ttl=1)
    with pytest.raises(spool.ConfigError, match="catalog"):
        spool.Engine(root=str(root), catalog="mysql://nope")
    with pytest.raises(spool.ConfigError, match="spool root"):
        spool.Engine(root=str(root / "missing"))
    assert issubclass(spool.ConfigError, spool.Error)


def test_owned_error_names_the_holder(tmp_path):
    d = tmp_path / "held"
    child = python(
        """
        import sys, spool
        s = spool.Sink.open(sys.argv[1])
        print("held", flush=True)
        sys.stdin.read()
        """,
        d,
        stdin=__import__("subprocess").PIPE,
    )
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(spool.OwnedError) as e:
            spool.Sink.open(str(d))
        assert e.value.pid == child.pid
        assert e.value.path == str(d)
        assert e.value.host
        assert f"pid {child.pid}" in str(e.value)
    finally:
        child.kill()
        child.wait()


def test_owned_error_for_a_second_take_in_this_process(tmp_path):
    d = tmp_path / "twice"
    with spool.Sink.open(str(d)):
        with pytest.raises(spool.OwnedError) as e:
            spool.Sink.open(str(d))
        assert e.value.pid == os.getpid()


def test_full_error_carries_used_budget_and_dead_sibling_bytes(tmp_path):
    d = tmp_path / "full"
    sink = spool.Sink.open(str(d), max_bytes=200, seal_records=1, admission="refuse",
                           buffer_bytes=300, release_flush_timeout=0.2)
    sink.write(b"x" * 250)  # admitted into an empty buffer; its stage is refused
    deadline = time.monotonic() + 5
    while sink.stats()["spool_full"] is None:
        assert time.monotonic() < deadline, "the stage was never refused"
        time.sleep(0.01)
    with pytest.raises(spool.FullError) as e:
        sink.write(b"y" * 100)
    assert e.value.budget == 200 and e.value.used is not None
    assert e.value.dead_sibling_bytes == 0
    assert "is full" in str(e.value)
    # ...and a flush that cannot stage is a DeadlineError, a TimeoutError.
    with pytest.raises(TimeoutError) as e:
        sink.flush(timeout=0.3)
    assert isinstance(e.value, spool.DeadlineError) and e.value.packs == 1
    with pytest.raises(spool.DeadlineError):
        sink.close()


def test_corrupt_pack_error_names_the_offset(tmp_path):
    d = tmp_path / "c"
    with spool.Sink.open(str(d), seal_records=1) as sink:
        sink.write(b"payload" * 10)
    data = next(d.glob("*.ready")).read_bytes()
    with pytest.raises(spool.CorruptPackError) as e:
        spool.read_pack(data[:60])
    assert e.value.offset is not None and e.value.offset <= 60
    flipped = bytearray(data)
    flipped[50] ^= 1
    with pytest.raises(spool.CorruptPackError, match="SHA-256 mismatch"):
        spool.read_pack(bytes(flipped))
    with pytest.raises(spool.CorruptPackError) as e:
        spool.read_pack(b"NOTAPACK" + data[8:])
    assert e.value.offset == 0


def test_fetch_many_reads_packs_back_in_the_order_asked_and_checks_each(root):
    with spool.Engine(root=str(root), adopt=False) as engine:
        sink = engine.sink(seal_records=1)
        sink.write_many([b"a", b"b", b"c"])
        assert engine.flush(timeout=30.0) is True
    rows = spool.Catalog(f"sqlite://{root}/.catalog.db").ls()
    asked = [r["pack_id"] for r in sorted(rows, key=lambda r: r["pack_id"], reverse=True)]
    got = [list(r) for r in spool.fetch_many(asked, root=str(root))]
    assert got == [list(spool.fetch(p, root=str(root))) for p in asked]
    assert sorted(sum(got, [])) == [b"a", b"b", b"c"]
    obj = root / ".store" / rows[0]["object_key"]
    flipped = bytearray(obj.read_bytes())
    flipped[40] ^= 1
    obj.write_bytes(bytes(flipped))
    with pytest.raises(spool.CorruptPackError, match="does not match its checksum"):
        spool.fetch_many(asked, root=str(root))


def test_fetch_checks_the_object_as_spool_cat_does(root):
    with spool.Engine(root=str(root), adopt=False) as engine:
        sink = engine.sink(seal_records=2)
        sink.write_many([b"first", b"second"])
        assert engine.flush(timeout=30.0) is True
    (row,) = spool.Catalog(f"sqlite://{root}/.catalog.db").ls()
    obj = root / ".store" / row["object_key"]
    good = obj.read_bytes()
    assert list(spool.fetch(row["pack_id"], root=str(root))) == [b"first", b"second"]
    # a flipped byte in the store: the pack's own validation refuses it
    flipped = bytearray(good)
    flipped[40] ^= 1
    obj.write_bytes(bytes(flipped))
    with pytest.raises(spool.CorruptPackError, match="does not match its checksum") as e:
        spool.fetch(row["pack_id"], root=str(root))
    assert e.value.pack == row["pack_id"]
    # a valid pack, but not the one the row describes
    other = root / "other"
    with spool.Sink.open(str(other), seal_records=1) as s:
        s.write(b"another pack")
    obj.write_bytes(next(other.glob("*.ready")).read_bytes())
    with pytest.raises(spool.CorruptPackError, match="does not match its checksum"):
        spool.fetch(row["pack_id"], root=str(root))
    # gone from the store, or never indexed: spool.Error naming it
    obj.unlink()
    with pytest.raises(spool.Error, match="has no object at key"):
        spool.fetch(row["pack_id"], root=str(root))
    with pytest.raises(spool.Error, match="is not in catalog"):
        spool.fetch("0" * 32, root=str(root))


# ------------------------------------------------------------------- GIL


@pytest.fixture
def stalled_s3(monkeypatch):
    """An S3 endpoint that accepts connections and never answers."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    port = lsock.getsockname()[1]
    for k, v in {
        "AWS_ENDPOINT": f"http://127.0.0.1:{port}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)
    yield "s3://stalled/packs"
    lsock.close()


def progress_during(call):
    """Runs `call` while another thread counts; returns (result, count, seconds)."""
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    start = time.monotonic()
    try:
        result = call()
    except Exception as e:  # noqa: BLE001
        result = e
    took = time.monotonic() - start
    before = count[0]
    stop.set()
    t.join()
    return result, before, took


def test_a_flush_waiting_on_a_stalled_store_lets_other_threads_run(root, stalled_s3):
    engine = spool.Engine(root=str(root), store=stalled_s3, adopt=False,
                          close_flush_timeout=0.5)
    try:
        engine.sink(seal_records=1).write(b"stuck")
        result, count, took = progress_during(lambda: engine.flush(timeout=2.0))
        assert not result and isinstance(result, spool.Undrained), result
        assert result.ready + result.owed >= 1, repr(result)
        assert 1.5 < took < 4.0, took
        # A thread holding the GIL for 2 s would leave the counter near 0;
        # released, the other thread counts millions of times.
        assert count > 100_000, count
    finally:
        report = engine.close()
    assert not report["drained"] and report["sealed"] and not report["removed"], report
    assert report["dir"].exists(), "kept, unlocked, for adoption"


def test_a_write_blocked_by_admission_lets_other_threads_run(tmp_path):
    sink = spool.Sink.open(str(tmp_path / "b"), max_bytes=100, seal_records=1,
                           buffer_bytes=200, admission_timeout=1.5, release_flush_timeout=0.1)
    sink.write(b"x" * 150)
    result, count, took = progress_during(lambda: sink.write(b"y" * 100))
    assert isinstance(result, spool.FullError), result
    assert 1.0 < took < 3.5, took
    assert count > 100_000, count
    with pytest.raises(spool.DeadlineError):
        sink.close()


# ------------------------------------------------- errors from real causes


@pytest.fixture
def fuse_dir(tmp_path):
    """A directory on a real FUSE mount (bindfs over a scratch directory):
    a filesystem spool-lock refuses. Skipped where FUSE cannot be mounted,
    failed instead when SPOOL_REQUIRE_FUSE=1 (`cargo xtask test` sets it)."""
    def unavailable(why):
        if os.environ.get("SPOOL_REQUIRE_FUSE") == "1":
            pytest.fail(f"SPOOL_REQUIRE_FUSE=1 but {why}")
        pytest.skip(why)

    bindfs = shutil.which("bindfs")
    if not bindfs:
        unavailable("bindfs is not installed (apt-get install bindfs)")
    src, mnt = tmp_path / "backing", tmp_path / "fuse"
    src.mkdir()
    mnt.mkdir()
    made = subprocess.run([bindfs, str(src), str(mnt)], capture_output=True, text=True)
    if made.returncode != 0:
        unavailable(f"bindfs could not mount a FUSE filesystem: {made.stderr.strip()}")
    try:
        yield mnt
    finally:
        for umount in (["fusermount", "-u"], ["fusermount3", "-u"], ["umount"]):
            if shutil.which(umount[0]) and subprocess.run([*umount, str(mnt)]).returncode == 0:
                break


def test_shared_filesystem_error_for_a_root_on_fuse(fuse_dir):
    with pytest.raises(spool.SharedFilesystemError) as e:
        spool.Engine(root=str(fuse_dir))
    assert e.value.filesystem == "FUSE", e.value.filesystem
    assert e.value.path.startswith(str(fuse_dir)), e.value.path
    assert "allow_shared_filesystem" in str(e.value)
    with pytest.raises(spool.SharedFilesystemError):
        spool.Sink.claim(root=str(fuse_dir))
    with pytest.raises(spool.SharedFilesystemError):
        spool.Sink.open(str(fuse_dir / "plain"))
    # ...and the override admits it (only for a filesystem this node alone
    # uses; FUSE has no renameat2(RENAME_NOREPLACE), so the directory is made first).
    (fuse_dir / "plain").mkdir()
    with spool.Sink.open(str(fuse_dir / "plain"), allow_shared_filesystem=True,
                         seal_records=1) as sink:
        sink.write(b"on fuse")
    assert [list(spool.read_pack(str(p))) for p in (fuse_dir / "plain").glob("*.ready")] == [
        [b"on fuse"]]


def lease_table(db):
    (name,) = db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%lease'").fetchone()
    return name


def test_lease_lost_error_when_the_catalogs_lease_is_taken_over(root):
    engine = spool.Engine(root=str(root), lease_scope="catalog", lease_ttl=5, adopt=False,
                          poll_interval=0.05, close_flush_timeout=0.5)
    try:
        engine.sink(seal_records=1).write(b"before")
        assert engine.flush(timeout=20) is True, "catalog scope: drained only under the lease"
        assert engine.snapshot()["lease_held"]
        # Another publisher takes the lease over: a claim of the next term,
        # live for ten minutes, appended to the catalog's lease table.
        db = sqlite3.connect(str(root / ".catalog.db"))
        table = lease_table(db)
        name, term = db.execute(
            f'SELECT name, max(term) FROM "{table}" GROUP BY name').fetchone()
        now = int(time.time() * 1000)
        db.execute(f'INSERT INTO "{table}" VALUES (?, ?, ?, ?, ?, ?)',
                   (name, term + 1, str(uuid.uuid4()), "someone-else:4242", now, now + 600_000))
        db.commit()
        db.close()
        # The keeper sees the foreign claim at its next renewal (ttl/3) and
        # latches once it has outlived 2 x ttl: then flush raises, even with
        # nothing owed (nothing more will ever be shipped by this engine).
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, engine.snapshot()
            try:
                engine.flush(timeout=1)
            except spool.LeaseLostError as e:
                assert "pid 4242 on host someone-else" in str(e) and "latched" in str(e), str(e)
                break
        assert engine.snapshot()["latched"]
        engine.sink().write(b"after")
        with pytest.raises(spool.LeaseLostError):
            engine.flush(timeout=1)
    finally:
        engine.close()


def test_full_error_charges_a_dead_siblings_bytes_in_the_layout(root):
    # A producer in its own process leaves a rank directory with packs and exits.
    child = python(
        """
        import sys, spool
        with spool.Sink.claim(root=sys.argv[1], rank=1, seal_records=1) as s:
            for i in range(4):
                s.write(b"d" * 1000)
        """,
        root,
    )
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    sink = spool.Sink.claim(root=str(root), rank=0, max_bytes=3000, seal_records=1,
                            buffer_bytes=5000, admission="refuse", release_flush_timeout=0.2)
    try:
        sink.write(b"x" * 100)
        with pytest.raises(spool.DeadlineError):
            sink.flush(timeout=0.5)
        full = sink.stats()["spool_full"]
        assert full["budget"] == 3000 and full["dead_sibling_bytes"] > 4000, full
        with pytest.raises(spool.FullError) as e:
            for _ in range(10_000):  # until the buffer is full too
                sink.write(b"y" * 1000)
        assert e.value.dead_sibling_bytes > 4000 and e.value.budget == 3000, vars(e.value)
        assert e.value.used is not None and e.value.path == str(sink.dir)
    finally:
        with pytest.raises(spool.DeadlineError):
            sink.close()


# ------------------------------------------------- optional pandas / pyarrow


def optional(module):
    """`module` if importable; else skipped, or failed when
    SPOOL_REQUIRE_OPTIONAL=1 (`cargo xtask test` installs both and sets it)."""
    if os.environ.get("SPOOL_REQUIRE_OPTIONAL") == "1":
        return __import__(module)
    return pytest.importorskip(module)


def catalog_with_rows(root, n):
    with spool.Engine(root=str(root), adopt=False) as engine:
        sink = engine.sink(seal_records=1)
        for i in range(n):
            sink.write(b"row-%d" % i)
    return spool.Catalog(f"sqlite://{root}/.catalog.db")


def test_rows_to_pandas(root):
    pandas = optional("pandas")
    rows = catalog_with_rows(root, 3).ls()
    df = rows.to_pandas()
    assert isinstance(df, pandas.DataFrame)
    assert list(df.columns) == list(spool.COLUMNS) and len(df) == 3
    assert sorted(df["pack_id"]) == sorted(r["pack_id"] for r in rows)
    assert df["records"].sum() == 3


def test_rows_to_arrow(root):
    pyarrow = optional("pyarrow")
    rows = catalog_with_rows(root, 2).ls(limit=2)
    table = rows.to_arrow()
    assert isinstance(table, pyarrow.Table)
    assert table.num_rows == 2 and table.column_names == list(spool.COLUMNS)
    assert sorted(table.column("pack_id").to_pylist()) == sorted(r["pack_id"] for r in rows)


def test_rows_name_the_producer_and_a_sink_without_an_ordinal_reads_none(root):
    """Through the Python readers: a sink without an ordinal
    reads back ``None`` (not 0, which is ``w0/``), ``sink(ordinal=0)``
    reads 0, the producer's pid and host are this process's, and a
    DataFrame carries the missing ordinal as a missing value."""
    with spool.Engine(root=str(root), adopt=False) as engine:
        engine.sink(seal_records=1).write(b"no ordinal")
        engine.sink(ordinal=0, seal_records=1).write(b"worker zero")
    rows = spool.Catalog(f"sqlite://{root}/.catalog.db").ls()
    assert len(rows) == 2, rows
    assert sorted(rows, key=lambda r: r["ordinal"] is not None)[0]["ordinal"] is None
    assert sorted(r["ordinal"] for r in rows if r["ordinal"] is not None) == [0]
    assert {r["source_pid"] for r in rows} == {os.getpid()}
    assert {r["source_host"] for r in rows} == {socket.gethostname()}
    pandas = optional("pandas")
    df = rows.to_pandas()
    assert df["ordinal"].isna().sum() == 1 and (df["ordinal"] == 0).sum() == 1
    assert pandas.isna(df.loc[df["ordinal"].isna(), "ordinal"]).all()
