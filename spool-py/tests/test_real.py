"""Against the real servers (ClickHouse and moto's S3; the real-server tier
of ``cargo xtask test`` exports their addresses): the producer API writes,
the engine uploads and indexes, and the readers read every record back."""

import os
import urllib.request
import uuid

import pytest

import spool
from conftest import real_env

pytestmark = pytest.mark.real


@pytest.fixture
def clickhouse():
    env = real_env()
    base = env["SPOOL_TEST_CLICKHOUSE_URL"].rsplit("/", 1)[0]
    db = f"spool_py_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    yield f"{base}/{db}"
    http = env.get("SPOOL_TEST_CLICKHOUSE_HTTP")
    if http:
        req = urllib.request.Request(http + "/", data=f"DROP DATABASE IF EXISTS {db}".encode())
        urllib.request.urlopen(req, timeout=10).read()


def test_write_close_and_read_back_through_clickhouse_and_s3(root, clickhouse):
    bucket = real_env()["SPOOL_TEST_S3_BUCKET"]
    store = f"s3://{bucket}/py-{uuid.uuid4().hex[:8]}"
    records = [b"real-%d" % i for i in range(50)] + [os.urandom(100_000)]
    with spool.Engine(root=str(root), store=store, catalog=clickhouse, adopt=False) as engine:
        sink = engine.sink(seal_records=10)
        sink.write_many(records)
        assert engine.flush(timeout=60) is True
        d = engine.dir
    assert not d.exists()
    rows = spool.Catalog(clickhouse).ls()
    assert len(rows) == 6 and sum(r["records"] for r in rows) == len(records)
    got = []
    for row in rows:
        got.extend(spool.fetch(row["pack_id"], catalog=clickhouse, store=store))
    assert sorted(got) == sorted(records)
    # the flush bundled the small packs: rows name ranges of shared objects,
    # and the batch reader reads them back together, in the order asked
    assert len({r["object_key"] for r in rows}) < len(rows)
    assert any(r["object_key"].endswith(".bundle") and r["object_offset"] > 0 for r in rows)
    asked = [r["pack_id"] for r in reversed(rows)]
    many = spool.fetch_many(asked, catalog=clickhouse, store=store)
    assert [list(m) for m in many] == [
        list(spool.fetch(p, catalog=clickhouse, store=store)) for p in asked
    ]
