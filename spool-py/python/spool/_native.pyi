"""Type stubs of the native half of ``spool`` (``spool._native``, built
from ``spool-py/src`` by maturin). Import these names from ``spool``."""

import os
from typing import Any, Dict, Iterable, Iterator, List, Literal, Optional, Union

from ._types import Undrained

_Bytes = Union[bytes, bytearray, memoryview, Any]  # anything with the buffer protocol
_Path = Union[str, "os.PathLike[str]"]

COLUMNS: List[str]

class Sink:
    """A producer's handle on a spool directory (see the Rust docs)."""

    @staticmethod
    def claim(
        root: _Path,
        store: Optional[str] = ...,
        catalog: Optional[str] = ...,
        rank: Optional[int] = ...,
        store_id: str = ...,
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
        root: _Path,
        store: Optional[str] = ...,
        catalog: Optional[str] = ...,
        rank: Optional[int] = ...,
        store_id: str = ...,
        *,
        lease_scope: Literal["node", "catalog"] = ...,
        lease_ttl: float = ...,
        poll_interval: float = ...,
        recheck_interval: float = ...,
        max_backoff: float = ...,
        staging_max_age: float = ...,
        adoption_slice: float = ...,
        index_batch: int = ...,
        adopt: bool = ...,
        upload_max_workers: int = ...,
        upload_max_in_flight_bytes: int = ...,
        upload_max_attempts: int = ...,
        upload_multipart_threshold: int = ...,
        upload_backoff_max: float = ...,
        allow_shared_filesystem: bool = ...,
        close_flush_timeout: float = ...,
    ) -> None: ...
    def sink(self, ordinal: Optional[int] = ..., **options: Any) -> Sink:
        """The attached sink of this ordinal, or a new one with these
        options (those of ``Sink.open``)."""
    def flush(self, timeout: float = 30.0) -> Union[Literal[True], Undrained]:
        """True when drained, else the owed figures."""
    def snapshot(self) -> Dict[str, Any]:
        """The service's snapshot."""
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
          root: Optional[_Path] = ...) -> Records:
    """Reads a pack back from the store, checked against its catalog row."""

def _close_at_exit() -> None: ...
