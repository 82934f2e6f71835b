"""The Python binding's benchmarks, run by ``cargo xtask
bench python`` through spool-bench's ``python`` case, which measures the
Rust sink beside it and turns these figures into BENCHMARKS.md rows.

Usage: ``python bench.py SCRATCH_DIR SIZE [PART]`` (SIZE: Full, Quick or
Smoke; PART: ``calls``, the default, or ``big``); prints one JSON object.
``calls`` gives:

- ``write_ns`` / ``bytearray_ns``: nanoseconds per call of ``sink.write``
  on 100-byte ``bytes`` records, and of ``bytearray.extend`` appending the
  same records (best of 3 runs each, loops alike);
- ``write_many_rps``: records per second of one ``sink.write_many`` call on
  a list of 100-byte records (best of 3);

``big`` gives ``mib_1mib_python``: MiB/s writing 1 MiB records with
``sink.write`` and flushing (durable), on SCRATCH_DIR's disk. spool-bench
runs it in rounds alternating with the Rust sink doing the same, after a
``sync``, so both meet the disk in the same state.
"""

import json
import os
import shutil
import sys
import time

import spool

SIZES = {
    "Full": dict(small=1_000_000, many=2_000_000, big=256),
    "Quick": dict(small=100_000, many=200_000, big=32),
    "Smoke": dict(small=10_000, many=20_000, big=4),
}


def fresh(scratch, name):
    d = os.path.join(scratch, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def sink(scratch, name):
    # big buffer and packs: the figure is the call, not admission waits
    return spool.Sink.open(fresh(scratch, name), buffer_bytes=1 << 30,
                           seal_bytes=64 << 20, release_flush_timeout=120)


def per_call(scratch, n):
    records = [os.urandom(100) for _ in range(1000)] * (n // 1000)
    best_sink = best_ba = float("inf")
    for run in range(3):
        ba = bytearray()
        append = ba.extend
        t = time.perf_counter()
        for r in records:
            append(r)
        best_ba = min(best_ba, time.perf_counter() - t)
        del ba
        s = sink(scratch, f"write-{run}")
        write = s.write
        t = time.perf_counter()
        for r in records:
            write(r)
        best_sink = min(best_sink, time.perf_counter() - t)
        s.close()
        shutil.rmtree(s.dir)
    return best_sink / len(records) * 1e9, best_ba / len(records) * 1e9


def write_many(scratch, n):
    records = [os.urandom(100) for _ in range(1000)] * (n // 1000)
    best = float("inf")
    for run in range(3):
        s = sink(scratch, f"many-{run}")
        t = time.perf_counter()
        assert s.write_many(records) == len(records)
        best = min(best, time.perf_counter() - t)
        s.close()
        shutil.rmtree(s.dir)
    return len(records) / best


def big(scratch, n):
    record = os.urandom(1 << 20)
    s = sink(scratch, "big")
    t = time.perf_counter()
    for _ in range(n):
        s.write(record)
    s.flush(timeout=300)
    took = time.perf_counter() - t
    s.close()
    shutil.rmtree(s.dir)  # as the Rust round removes its own
    return n / took


def main():
    scratch, size = sys.argv[1], sys.argv[2]
    part = sys.argv[3] if len(sys.argv) > 3 else "calls"
    n = SIZES[size]
    os.makedirs(scratch, exist_ok=True)
    if part == "big":
        out = dict(big=n["big"], mib_1mib_python=big(scratch, n["big"]))
    elif part == "calls":
        write_ns, bytearray_ns = per_call(scratch, n["small"])
        out = dict(
            small=n["small"], many=n["many"],
            write_ns=write_ns, bytearray_ns=bytearray_ns,
            write_many_rps=write_many(scratch, n["many"]),
            python=sys.version.split()[0],
        )
    else:
        sys.exit(f"unknown part {part!r}: calls or big")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
