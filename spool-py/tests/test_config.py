"""The configuration from Python: ``config=`` names the same
TOML file ``spool`` reads, the ``SPOOL_*`` variables apply, and every key is
a keyword argument ranking with the command's flags. A refused key or value
is a ``ValueError`` with the command's own words."""

import ast
import pathlib

import pytest

import spool
from conftest import all_records, run_spool


def write_config(path, text):
    path.write_text(text)
    return str(path)


def test_config_file_sets_root_rank_and_store_id_and_arguments_win(root, tmp_path):
    cfg = write_config(tmp_path / "spool.toml", f"""
[spool]
root = "{root}"
rank = 7
[destination]
store_id = "from-file"
[service]
adoption_slice = "250ms"
""")
    with spool.Engine(config=cfg, adopt=False) as engine:
        assert engine.dir.name.startswith("r7-"), engine.dir
        engine.sink().write(b"configured")
    rows = spool.Catalog(f"sqlite://{root}/.catalog.db").ls()
    assert [r["store_id"] for r in rows] == ["from-file"]
    # A keyword argument wins over the file, as a flag does.
    with spool.Engine(config=cfg, rank=3, store_id="from-arg", adopt=False) as engine:
        assert engine.dir.name.startswith("r3-"), engine.dir
        engine.sink().write(b"argued")
    rows = spool.Catalog(f"sqlite://{root}/.catalog.db").ls()
    assert sorted(r["store_id"] for r in rows) == ["from-arg", "from-file"]
    # fetch() reads the destination (the embedded ones under root) from the same file
    want = {"from-file": [b"configured"], "from-arg": [b"argued"]}
    for r in rows:
        assert list(spool.fetch(r["pack_id"], config=cfg)) == want[r["store_id"]]


def test_spool_variables_apply_below_arguments(root, monkeypatch):
    monkeypatch.setenv("SPOOL_RANK", "5")
    with spool.Engine(root=str(root), adopt=False) as engine:
        assert engine.dir.name.startswith("r5-"), engine.dir
    with spool.Engine(root=str(root), rank=6, adopt=False) as engine:
        assert engine.dir.name.startswith("r6-"), engine.dir
    monkeypatch.setenv("SPOOL_ROOT", str(root))
    with spool.Sink.claim(seal_records=1) as sink:
        assert sink.dir.name.startswith("r5-") and sink.dir.parent.parent == root


def test_max_bytes_from_the_file_is_the_claimed_directorys_budget(root, tmp_path):
    cfg = write_config(tmp_path / "spool.toml", "[spool]\nmax_bytes = \"200\"\n")
    sink = spool.Sink.claim(root=str(root), config=cfg, seal_records=1, admission="refuse",
                            buffer_bytes=300, release_flush_timeout=0.2)
    try:
        sink.write(b"x" * 250)
        with pytest.raises(spool.DeadlineError):
            sink.flush(timeout=0.5)
        assert sink.stats()["spool_full"]["budget"] == 200
    finally:
        with pytest.raises(spool.DeadlineError):
            sink.close()


def test_a_bad_value_in_the_file_is_refused_with_the_commands_words(root, tmp_path):
    cfg = write_config(tmp_path / "bad.toml", "[lease]\nttl = \"soon\"\n")
    with pytest.raises(spool.ConfigError) as e:
        spool.Engine(root=str(root), config=cfg)
    msg = str(e.value)
    assert "bad value for lease.ttl" in msg and str(tmp_path / "bad.toml") in msg, msg
    assert "allowed: a duration" in msg, msg
    shown = run_spool("config", "show", "--config", cfg)
    assert shown.returncode == 2, shown.stderr
    assert msg in shown.stderr, (msg, shown.stderr)
    cfg = write_config(tmp_path / "unknown.toml", "[lease]\nttl = 30\nflavour = 1\n")
    with pytest.raises(ValueError, match="unknown field `flavour` in \\[lease\\]"):
        spool.Engine(root=str(root), config=cfg)
    with pytest.raises(spool.ConfigError, match="cannot read the config file"):
        spool.Engine(root=str(root), config=str(tmp_path / "missing.toml"))


def test_every_key_is_an_argument_refused_with_its_name_and_what_is_allowed(root):
    names = [n for n, _ in spool.CONFIG_KEYS]
    assert {"root", "rank", "store", "catalog", "lease_ttl", "poll_interval",
            "upload_max_workers", "client_allow_http", "max_bytes"} <= set(names)
    for name, key in spool.CONFIG_KEYS:
        # "not-a-value" is a valid plain name: those keys are refused below
        if name in ("root", "store", "catalog", "store_id", "catalog_cluster", "lease_node_name"):
            continue
        with pytest.raises(spool.ConfigError) as e:
            spool.Engine(root=str(root), **{name: "not-a-value"})
        assert f"bad value for {key} (argument {name})" in str(e.value), str(e.value)
        assert "allowed: " in str(e.value)
    with pytest.raises(ValueError, match=r"bad value for lease\.ttl \(argument lease_ttl\).*below 5s"):
        spool.Engine(root=str(root), lease_ttl=1)
    with pytest.raises(ValueError, match=r"lease\.ttl \(argument lease_ttl\): a list is not allowed"):
        spool.Engine(root=str(root), lease_ttl=[30])
    for name, key in (("store_id", "store_id"), ("catalog_cluster", "catalog.cluster"),
                      ("lease_node_name", "lease.node_name")):
        with pytest.raises(ValueError, match=rf"{key} \(argument {name}\).*not a plain name"):
            spool.Engine(root=str(root), **{name: "a b"})
    with pytest.raises(ValueError, match=r"unknown option\(s\) lease_tll; the options are .*lease_ttl"):
        spool.Engine(root=str(root), lease_tll=30)
    # Values are spelled as in the file: numbers, or strings with units.
    with spool.Engine(root=str(root), lease_ttl="30s", poll_interval=0.05,
                      upload_max_in_flight_bytes="64MiB", client_allow_http=False,
                      adopt=False) as engine:
        assert engine.flush(timeout=10)


def test_the_stubs_list_every_key_for_engine_and_claim():
    stub = pathlib.Path(spool.__file__).with_name("_native.pyi")
    tree = ast.parse(stub.read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def fields(name):
        # a TypedDict's fields, its bases' included
        cls = classes[name]
        own = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}
        for b in cls.bases:
            if isinstance(b, ast.Name) and b.id in classes:
                own |= fields(b.id)
        return own

    def accepted(cls, fn_name):
        fn = next(n for n in classes[cls].body if isinstance(n, ast.FunctionDef) and n.name == fn_name)
        a = fn.args
        names = {x.arg for x in a.args + a.kwonlyargs}
        ann = a.kwarg.annotation if a.kwarg else None
        if isinstance(ann, ast.Subscript) and isinstance(ann.slice, ast.Name):
            names |= fields(ann.slice.id)  # **options: Unpack[_SomeOptions]
        return names

    for cls, fn in (("Engine", "__init__"), ("Sink", "claim")):
        missing = {n for n, _ in spool.CONFIG_KEYS} - accepted(cls, fn)
        assert not missing, f"{cls}.{fn} in _native.pyi lacks {sorted(missing)}"
