"""spool from Python: producers, the embedded engine, and readers.

A thin layer over the Rust crates (``spool-service``'s engine,
``spool-core``'s sink and pack reader, ``spool-catalog``, ``spool-upload``)::

    import spool
    with spool.Engine(root="/var/lib/spool") as engine:   # embedded store + catalog
        sink = engine.sink()
        sink.write(b"one record")
        engine.flush(timeout=30.0)

Blocking calls release the GIL; errors are the exceptions of
:mod:`spool._errors` (all under :class:`spool.Error`); an engine or sink used
in a forked child raises :class:`spool.ForkedError` instead of touching the
parent's state. At interpreter exit every engine and sink this process
opened and did not close is closed (in that order: sinks, then engines), so
its packs are sealed and its directory left for adoption.
"""

import atexit as _atexit
import datetime as _dt
from typing import Any, Dict, Iterator, List, Optional, Union

from . import _errors, _native
from ._errors import *  # noqa: F403  (the exception tree; its names are _errors.__all__)
from ._errors import ConfigError
from ._types import Undrained
from ._native import Engine, Sink, read_pack

__all__ = [
    "Engine",
    "Sink",
    "Catalog",
    "Rows",
    "Undrained",
    "COLUMNS",
    "CONFIG_KEYS",
    "read_pack",
    "fetch",
    "fetch_many",
    *_errors.__all__,
]

#: The columns of a catalog row, in the catalog's order.
COLUMNS = _native.COLUMNS

#: Every configuration key as ``(keyword-argument name, key name)``, in the
#: order ``spool config show`` prints them: ``("lease_ttl", "lease.ttl")``.
#: :class:`Engine` and :meth:`Sink.claim` take each as a keyword argument.
CONFIG_KEYS = _native.CONFIG_KEYS


class Rows(List[Dict[str, Any]]):
    """Catalog rows (one dict per pack, keys :data:`COLUMNS`), convertible
    to a DataFrame or an Arrow table when pandas or pyarrow is installed
    (neither is a dependency)."""

    def to_pandas(self) -> Any:
        """The rows as a ``pandas.DataFrame`` (needs pandas)."""
        import pandas  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: PLC0415  (optional)

        return pandas.DataFrame(list(self), columns=list(COLUMNS))

    def to_arrow(self) -> Any:
        """The rows as a ``pyarrow.Table`` (needs pyarrow)."""
        import pyarrow  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: PLC0415  (optional)

        return pyarrow.Table.from_pylist(list(self))


Time = Union[None, int, float, _dt.datetime]


def _ms(t: Time, what: str) -> Optional[int]:
    if t is None:
        return None
    if isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            raise ConfigError(f"{what}={t!r}: give an aware datetime (with tzinfo), or epoch seconds")
        return int(t.timestamp() * 1000)
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise ConfigError(f"{what}={t!r}: expected a datetime or epoch seconds (int or float)")
    return int(t * 1000)


class Catalog:
    """A catalog opened by URL: ``clickhouse://HOST:PORT/DB[?table_prefix=P]``,
    ``sqlite:///ABS/PATH.db``, ``memory://``."""

    def __init__(self, url: str) -> None:
        self._native = _native.Catalog(url)

    @property
    def url(self) -> str:
        """The catalog's server, credentials masked."""
        return self._native.server

    def ls(self, since: Time = None, until: Time = None, limit: Optional[int] = None) -> Rows:
        """Rows of packs created in ``[since, until)`` (datetimes or epoch
        seconds; default: all), oldest first, at most ``limit`` of them."""
        return Rows(self._native.ls(_ms(since, "since"), _ms(until, "until"), limit))

    def get(self, pack_id: str) -> Optional[Dict[str, Any]]:
        """The row of one pack, or ``None``."""
        return self._native.get(pack_id)

    def count(self) -> int:
        """How many packs the catalog lists."""
        return self._native.count()


def fetch(pack_id: str, catalog: Optional[str] = None, store: Optional[str] = None,
          root: Optional[str] = None, *, config: Optional[str] = None) -> Iterator[bytes]:
    """Reads pack ``pack_id`` back from the store (its row from the
    catalog), checks it as ``spool cat`` does (the pack's own validation and
    the row's checksum and size; :class:`CorruptPackError` otherwise), and
    iterates its records. ``root`` stands for the embedded catalog and
    store under a spool root; what is not given comes from the
    configuration as for ``spool cat`` (``config``, else ``$SPOOL_CONFIG``
    or ``./spool.toml``; ``SPOOL_CATALOG``, ``SPOOL_STORE``, ``SPOOL_ROOT``)."""
    return _native.fetch(pack_id, catalog, store, root, config=config)


def fetch_many(pack_ids: List[str], catalog: Optional[str] = None, store: Optional[str] = None,
               root: Optional[str] = None, *, config: Optional[str] = None) -> List[_native.Records]:
    """Reads the packs ``pack_ids`` back together, each checked as
    :func:`fetch` checks one, and returns their records' iterators in the
    order asked. Packs that share an object (a bundle) cost one ranged GET
    for all of them, not one each: ask for a bundle's packs together (rows
    from :meth:`Catalog.ls` name each pack's ``object_key``). The first
    failure raises, as :func:`fetch` would for that pack."""
    return _native.fetch_many(list(pack_ids), catalog, store, root, config=config)


_atexit.register(_native._close_at_exit)
