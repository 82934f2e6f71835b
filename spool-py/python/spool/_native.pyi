"""Type stubs of the native half of ``spool`` (``spool._native``, built
from ``spool-py/src`` by maturin). Import these names from ``spool``."""

import os
from typing import Any, Dict, Iterable, Iterator, List, Literal, Optional, Tuple, Union

from typing_extensions import Buffer, TypedDict, Unpack

from ._types import Undrained

_Bytes = Buffer  # anything with the buffer protocol: bytes, memoryview, a numpy array
_Path = Union[str, "os.PathLike[str]"]
_Secs = Union[float, str]  # seconds, or "500ms", "30s", "2m", "1h"
_Size = Union[int, str]  # bytes, or "64MiB", "1GB"

COLUMNS: List[str]

class _ConfigKeys(TypedDict, total=False):
    """Every configuration key (``spool.CONFIG_KEYS``) as a keyword argument,
    spelled as in the TOML file (``spool config show`` lists them)."""

    max_bytes: _Size
    allow_shared_filesystem: bool
    mode: Literal["0700", "0750", "0770"]
    group: str
    catalog_request_timeout: _Secs
    catalog_cluster: str
    store_id: str
    lease_scope: Literal["node", "catalog"]
    lease_node_name: str
    lease_ttl: _Secs
    poll_interval: _Secs
    recheck_interval: _Secs
    max_backoff: _Secs
    staging_max_age: _Secs
    adoption_slice: _Secs
    index_batch: int
    index_linger: _Secs
    ship: Literal["self", "daemon"]
    pipeline_depth: int
    stop_flush_timeout: _Secs
    once_timeout: _Secs
    unhealthy_after: _Secs
    upload_max_workers: int
    upload_max_in_flight_bytes: _Size
    upload_multipart_threshold: _Size
    upload_part_size: _Size
    upload_small_pack_workers: int
    upload_part_concurrency: int
    upload_max_attempts: int
    upload_backoff_initial: _Secs
    upload_backoff_max: _Secs
    upload_bundle_bytes: _Size
    upload_bundle_linger: _Secs
    upload_orphan_grace: _Secs
    client_connect_timeout: _Secs
    client_request_timeout: _Secs
    client_max_retries: int
    client_retry_timeout: _Secs
    client_allow_http: bool
    metrics_addr: str
    metrics_linger: _Secs

class _ClaimOptions(_ConfigKeys, total=False):
    """``Sink.claim``'s keyword arguments: the keys and the sink options."""

    ordinal: Optional[int]
    seal_bytes: int
    seal_records: int
    seal_age: float
    buffer_bytes: int
    admission: Literal["block", "refuse"]
    admission_timeout: float
    release_flush_timeout: float
    charge_dead_siblings: bool

class _EngineOptions(_ConfigKeys, total=False):
    """``Engine``'s keyword arguments: the keys and the engine's own."""

    adopt: bool
    close_flush_timeout: float

#: Every configuration key as (keyword-argument name, key name).
CONFIG_KEYS: List[Tuple[str, str]]

class Sink:
    """A producer's handle on a spool directory (see the Rust docs)."""

    @staticmethod
    def claim(
        root: Optional[_Path] = ...,
        store: Optional[str] = ...,
        catalog: Optional[str] = ...,
        rank: Optional[int] = ...,
        *,
        config: Optional[_Path] = ...,
        **options: Unpack[_ClaimOptions],
    ) -> "Sink":
        """Claims a fresh rank directory under the layout and opens a
        sink-only producer on it."""
    @staticmethod
    def open(
        dir: _Path,
        *,
        ordinal: Optional[int] = ...,
        seal_bytes: int = ...,
        seal_records: int = ...,
        seal_age: float = ...,
        buffer_bytes: int = ...,
        admission: Literal["block", "refuse"] = ...,
        admission_timeout: float = ...,
        release_flush_timeout: float = ...,
        max_bytes: int = ...,
        charge_dead_siblings: bool = ...,
        allow_shared_filesystem: bool = ...,
    ) -> "Sink":
        """Opens a sink on a plain directory (lock mode ``take``)."""
    def write(self, record: _Bytes) -> None:
        """Appends one record."""
    def write_many(self, records: Iterable[_Bytes]) -> int:
        """Appends every record of an iterable; returns how many."""
    def flush(self, timeout: float = 30.0) -> None:
        """Seals and stages what the sink holds (``DeadlineError`` after
        ``timeout`` seconds)."""
    def close(self) -> None:
        """Seals, stages and releases (idempotent)."""
    def stats(self) -> Dict[str, Any]:
        """The sink's counters."""
    @property
    def dir(self) -> "os.PathLike[str]":
        """The spool directory."""
    @property
    def ordinal(self) -> Optional[int]:
        """The worker ordinal, or None."""
    @property
    def closed(self) -> bool:
        """Whether ``close()`` ran."""
    def __enter__(self) -> "Sink": ...
    def __exit__(self, *exc: Any) -> bool: ...

class Engine:
    """An embedded engine: claim, service, sinks (see the Rust docs)."""

    def __init__(
        self,
        root: Optional[_Path] = ...,
        store: Optional[str] = ...,
        catalog: Optional[str] = ...,
        rank: Optional[int] = ...,
        *,
        config: Optional[_Path] = ...,
        **options: Unpack[_EngineOptions],
    ) -> None: ...
    def sink(self, ordinal: Optional[int] = ..., **options: Any) -> Sink:
        """The attached sink of this ordinal, or a new one with these sink
        options (those of ``Sink.open`` but ``max_bytes`` and
        ``allow_shared_filesystem``, which are the engine's)."""
    def flush(self, timeout: float = 30.0) -> Union[Literal[True], Undrained]:
        """True when drained, else the owed figures (with ``ship="daemon"``:
        True once the daemon confirmed every pack, else ``Undrained`` whose
        ``ready`` counts the packs still waiting)."""
    def run(self, timeout: float = 600.0, wait_for_siblings: bool = False) -> Dict[str, Any]:
        """Drains once, as ``spool run --once`` does, then closes the engine;
        the report: ``end``, ``message``, ``left_packs``,
        ``elsewhere_packs``, ``blocked``, ``elapsed``, ``snapshot``."""
    def snapshot(self) -> Dict[str, Any]:
        """The service's snapshot, with ``ship``; only ``{"ship": "daemon"}``
        when the node's daemon ships (``ship="daemon"``: no service here)."""
    def close(self) -> Optional[Dict[str, Any]]:
        """Releases in reverse; what happened (None if already closed)."""
    @property
    def dir(self) -> "os.PathLike[str]":
        """The claimed rank directory."""
    @property
    def closed(self) -> bool:
        """Whether ``close()`` ran."""
    def __enter__(self) -> "Engine": ...
    def __exit__(self, *exc: Any) -> bool: ...

class Records(Iterator[bytes]):
    """The records of a validated pack."""

    count: int
    pack_id: str
    def __iter__(self) -> "Records": ...
    def __next__(self) -> bytes: ...
    def __len__(self) -> int: ...

class Catalog:
    def __init__(self, url: str) -> None: ...
    @property
    def server(self) -> str: ...
    def ls(self, since_ms: Optional[int] = ..., until_ms: Optional[int] = ...,
           limit: Optional[int] = ...) -> List[Dict[str, Any]]: ...
    def get(self, pack_id: str) -> Optional[Dict[str, Any]]: ...
    def count(self) -> int: ...

def read_pack(source: Union[_Path, _Bytes]) -> Records:
    """Validates a pack (path or bytes) whole, then iterates its records."""

def fetch(pack_id: str, catalog: Optional[str] = ..., store: Optional[str] = ...,
          root: Optional[_Path] = ..., *, config: Optional[_Path] = ...) -> Records:
    """Reads a pack back from the store, checked against its catalog row."""

def fetch_many(pack_ids: List[str], catalog: Optional[str] = ..., store: Optional[str] = ...,
               root: Optional[_Path] = ..., *, config: Optional[_Path] = ...) -> List[Records]:
    """Reads packs back together: one GET per object, each pack checked."""

def _close_at_exit() -> None: ...
