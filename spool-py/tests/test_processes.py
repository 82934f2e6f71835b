"""Cross-process behaviour with real child processes: a Python producer
SIGKILLed mid-stream, fork-started workers (multiprocessing's ``fork``
start method, as DataLoader workers on Linux), and the interpreter's exit
without ``close()``. In every case ``spool run --once`` adopts what was
left, and every record the producer reported durable is read back."""

import json
import os
import pathlib
import signal
import subprocess
import time

import spool
from conftest import all_records, python, run_spool, spool_bin


def test_sigkill_mid_stream_then_spool_run_once_adopts_every_durable_pack(root):
    child = python(
        """
        import sys, spool
        engine = spool.Engine(root=sys.argv[1], adopt=False)
        sink = engine.sink(seal_records=50)
        print("dir", engine.dir, flush=True)
        i = 0
        while True:
            for _ in range(100):
                sink.write(b"rec-%08d" % i)
                i += 1
            sink.flush(timeout=10)
            print("durable", i, flush=True)
        """,
        root,
    )
    first = child.stdout.readline().split()
    assert first[0] == "dir", first
    durable = 0
    while durable < 2000:
        line = child.stdout.readline().split()
        assert line and line[0] == "durable", (line, child.stderr.read() if not line else "")
        durable = int(line[1])
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    done = run_spool("run", "--once", "--timeout", "60", "--spool-root", root)
    assert done.returncode == 0, done.stderr
    got = set(all_records(root))
    want = {b"rec-%08d" % i for i in range(durable)}
    assert want <= got, f"{len(want - got)} durable records lost"
    key_dir = next(p for p in root.iterdir() if not p.name.startswith("."))
    # (the key directory's reserve for a full filesystem stays: `.reserve`)
    left = [p for p in key_dir.iterdir() if p.name != ".reserve"]
    assert left == [], "every rank directory drained and removed"


def test_sigkill_of_a_sink_only_producer_every_durable_pack_is_shipped_byte_equal(root):
    # A Sink.claim producer (no service: nothing leaves its directory
    # before adoption) reports each pack it made durable; SIGKILL mid-stream.
    child = python(
        """
        import sys, spool
        sink = spool.Sink.claim(root=sys.argv[1], seal_records=40)
        print("dir", sink.dir, flush=True)
        i = 0
        while True:
            for _ in range(40):
                sink.write(b"rec-%08d" % i)
                i += 1
            sink.flush(timeout=10)
            print("durable", sink.stats()["last_staged"], flush=True)
        """,
        root,
    )
    first = child.stdout.readline().split()
    assert first[0] == "dir", (first, child.stderr.read() if not first else "")
    d = pathlib.Path(first[1])
    reported = []
    while len(reported) < 30:
        line = child.stdout.readline().split()
        assert line and line[0] == "durable", (line, child.stderr.read() if not line else "")
        reported.append(line[1])
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    on_disk = {p.name[: -len(".ready")]: p.read_bytes() for p in d.glob("*.ready")}
    assert set(reported) <= set(on_disk), "a pack reported durable is not in the directory"
    done = run_spool("run", "--once", "--timeout", "60", "--spool-root", root)
    assert done.returncode == 0, done.stderr
    assert not d.exists(), "adopted, drained and removed"
    cat = spool.Catalog(f"sqlite://{root}/.catalog.db")
    for pack_id, data in on_disk.items():
        row = cat.get(pack_id)
        assert row is not None, f"durable pack {pack_id} not indexed"
        shipped = (root / ".store" / row["object_key"]).read_bytes()
        assert shipped == data, f"pack {pack_id} differs from what was durable"
        assert list(spool.fetch(pack_id, root=str(root))) == list(spool.read_pack(data))


def test_fork_children_never_keep_the_parents_lock(root):
    # The parent: an engine, two fork-started workers that find the
    # parent's sink refused, each write through a sink claimed for itself,
    # close it, then stay alive. Then the parent is SIGKILLed.
    parent = python(
        """
        import json, multiprocessing as mp, sys, time, spool
        root = sys.argv[1]
        engine = spool.Engine(root=root, adopt=False)
        sink = engine.sink(seal_records=10)
        sink.write_many(b"parent-%d" % i for i in range(25))
        sink.flush()

        def worker(k, q):
            out = {}
            for what, call in [("sink", lambda: sink.write(b"from the child")),
                               ("engine", lambda: engine.flush(timeout=1)),
                               ("engine.sink", lambda: engine.sink())]:
                try:
                    call()
                    out[what] = "no error"
                except spool.ForkedError as e:
                    out[what] = str(e)
            with spool.Sink.claim(root=root, rank=100 + k, seal_records=3) as own:
                own.write_many(b"child%d-%d" % (k, i) for i in range(7))
                out["own"] = str(own.dir)
            q.put(out)
            time.sleep(600)

        ctx = mp.get_context("fork")
        q = ctx.Queue()
        kids = [ctx.Process(target=worker, args=(k, q), daemon=False) for k in range(2)]
        for p in kids:
            p.start()
        results = [q.get(timeout=30) for _ in kids]
        print(json.dumps({"dir": str(engine.dir), "kids": [p.pid for p in kids],
                          "results": results}), flush=True)
        time.sleep(600)
        """,
        root,
    )
    info = json.loads(parent.stdout.readline())
    kids = info["kids"]
    try:
        for r in info["results"]:
            for what in ("sink", "engine", "engine.sink"):
                assert f"belongs to pid {parent.pid}" in r[what], r
                assert "open your own" in r[what], r
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        for k in kids:
            os.kill(k, 0)  # the workers outlive their parent
        engine_dir = info["dir"]
        done = run_spool("run", "--once", "--timeout", "60", "--spool-root", root)
        assert done.returncode == 0, done.stderr
        assert not os.path.exists(engine_dir), (
            "the killed parent's directory is adopted although its forked children live"
        )
        for r in info["results"]:
            assert not os.path.exists(r["own"]), "each child's closed sink is adopted"
        got = sorted(all_records(root))
        want = sorted([b"parent-%d" % i for i in range(25)]
                      + [b"child%d-%d" % (k, i) for k in range(2) for i in range(7)])
        assert got == want
    finally:
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_interpreter_exit_without_close_leaves_the_directory_for_adoption(root):
    # A sink-only producer whose daemon thread is still writing when the
    # main thread returns: the exit hook releases the sink (admission
    # stops, what was admitted is staged), then lets the lock go.
    child = python(
        """
        import atexit, sys, threading, time
        written = []
        atexit.register(lambda: print("written", len(written), flush=True))  # runs last
        import spool
        sink = spool.Sink.claim(root=sys.argv[1], seal_records=2000)
        print("dir", sink.dir, flush=True)

        def writer():
            i = 0
            while True:
                try:
                    sink.write(b"w-%d" % i)
                except spool.Error:
                    return  # released by the exit hook: nothing more admitted
                written.append(i)
                i += 1
                if i % 100 == 0:
                    time.sleep(0.001)

        threading.Thread(target=writer, daemon=True).start()
        time.sleep(0.5)
        """,
        root,
    )
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    d, n = lines["dir"], int(lines["written"])
    assert n > 0
    assert os.path.isdir(d)
    done = run_spool("run", "--once", "--timeout", "60", "--spool-root", root)
    assert done.returncode == 0, done.stderr
    assert not os.path.exists(d)
    got = set(all_records(root))
    assert {b"w-%d" % i for i in range(n)} <= got


def test_a_live_sink_claim_producer_is_shipped_by_the_daemon_while_it_lives(root):
    # The node's daemon (polling only every 60 s) ships a live Sink.claim
    # producer's packs; the producer removes each once its row is
    # confirmed; all while it lives.
    daemon = subprocess.Popen([spool_bin(), "run", "--poll-interval", "60", "--spool-root",
                               str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        time.sleep(0.5)
        child = python(
            """
            import sys, time, spool
            sink = spool.Sink.claim(root=sys.argv[1], seal_records=1)
            print("dir", sink.dir, flush=True)
            for i in range(20):
                sink.write(b"rec-%08d" % i)
                sink.flush(timeout=10)
                print("durable", sink.stats()["last_staged"], flush=True)
            time.sleep(600)
            """,
            root,
        )
        first = child.stdout.readline().split()
        assert first[0] == "dir", (first, child.stderr.read() if not first else "")
        d = pathlib.Path(first[1])
        staged = {child.stdout.readline().split()[1] for _ in range(20)}
        cat = spool.Catalog(f"sqlite://{root}/.catalog.db")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            indexed = {r["pack_id"] for r in cat.ls()} if (root / ".catalog.db").exists() else set()
            if staged <= indexed and not list(d.glob("*.ready")):
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"not shipped while the producer lives: {sorted(d.glob('*'))}")
        assert child.poll() is None, "the producer exited: shipped by exiting, not handed off"
    finally:
        if child is not None:
            child.kill()
            child.wait()
        daemon.terminate()
        daemon.wait(timeout=10)

def test_an_engine_with_ship_daemon_hands_off_and_its_flush_waits_for_the_daemon(root):
    # Engine(ship="daemon") starts no service: its flush waits for the
    # node's daemon (Undrained while none runs), then returns True once the
    # daemon shipped every pack and the engine removed them.
    child = python(
        """
        import sys, spool
        with spool.Engine(root=sys.argv[1], ship="daemon") as engine:
            assert engine.snapshot() == {"ship": "daemon"}, engine.snapshot()
            sink = engine.sink(seal_records=1)
            for i in range(10):
                sink.write(b"rec-%08d" % i)
            sink.flush(timeout=10)
            r = engine.flush(timeout=0.5)
            print("without", bool(r), getattr(r, "ready", None), flush=True)
            sys.stdin.readline()
            print("with", engine.flush(timeout=30) is True, flush=True)
        print("closed", flush=True)
        """,
        root,
        stdin=subprocess.PIPE,
    )
    daemon = None
    try:
        line = child.stdout.readline().split()
        assert line == ["without", "False", "10"], (line, child.stderr.read() if not line else "")
        assert not (root / ".catalog.db").exists() or not list(
            spool.Catalog(f"sqlite://{root}/.catalog.db").ls()), "the engine shipped by itself"
        daemon = subprocess.Popen([spool_bin(), "run", "--spool-root", str(root)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().split() == ["with", "True"]
        assert child.stdout.readline().split() == ["closed"]
        assert child.wait(timeout=30) == 0, child.stderr.read()
        rows = spool.Catalog(f"sqlite://{root}/.catalog.db").ls()
        assert len(rows) == 10
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=10)

