"""The exceptions of ``spool``: one tree under :class:`Error`.

The messages are the library's own words (the same as the ``spool`` command
prints); the attributes carry the figures a program acts on.
"""

from typing import Optional

__all__ = [
    "Error",
    "ConfigError",
    "OwnedError",
    "SharedFilesystemError",
    "FullError",
    "DeadlineError",
    "LeaseLostError",
    "CorruptPackError",
    "ForkedError",
]


class Error(Exception):
    """Every failure of spool (the library crates' typed errors, as Python exceptions)."""


class ConfigError(Error, ValueError):
    """A bad option or configuration value: the message names the option,
    the value, and what is allowed."""


class OwnedError(Error):
    """The spool directory is owned by another process (or by this one).

    ``pid`` and ``host`` name the holder (``pid`` is ``None`` when its owner
    record has none), ``path`` the directory."""

    def __init__(self, message: str, pid: Optional[int] = None, host: Optional[str] = None,
                 path: Optional[str] = None) -> None:
        super().__init__(message)
        self.pid = pid
        self.host = host
        self.path = path


class SharedFilesystemError(Error):
    """The spool is on a shared (network) filesystem where flock does not
    exclude other nodes; ``allow_shared_filesystem=True`` overrides."""

    def __init__(self, message: str, path: Optional[str] = None,
                 filesystem: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path
        self.filesystem = filesystem


class FullError(Error):
    """A record was not admitted: the spool is full (``used`` of ``budget``
    bytes, ``dead_sibling_bytes`` of them in dead siblings awaiting
    adoption), or the sink's buffer is (``buffered`` of ``buffer_bytes``)."""

    def __init__(self, message: str, used: Optional[int] = None, budget: Optional[int] = None,
                 dead_sibling_bytes: Optional[int] = None, buffered: Optional[int] = None,
                 buffer_bytes: Optional[int] = None, path: Optional[str] = None) -> None:
        super().__init__(message)
        self.used = used
        self.budget = budget
        self.dead_sibling_bytes = dead_sibling_bytes
        self.buffered = buffered
        self.buffer_bytes = buffer_bytes
        self.path = path


class DeadlineError(Error, TimeoutError):
    """A flush did not finish by its deadline; the message (and ``packs``,
    ``bytes``) say what is left. Nothing is lost: it stays in the sink or
    the spool and keeps going."""

    def __init__(self, message: str, packs: Optional[int] = None,
                 bytes: Optional[int] = None, path: Optional[str] = None) -> None:
        super().__init__(message)
        self.packs = packs
        self.bytes = bytes
        self.path = path


class LeaseLostError(Error):
    """The service latched: a foreign lease outlived twice its TTL, so its
    lease-gated work stopped for good (the daemon exits 7 for this)."""


class CorruptPackError(Error):
    """A pack failed validation; ``offset`` is where (when the problem has
    one), ``pack`` what was read."""

    def __init__(self, message: str, offset: Optional[int] = None,
                 pack: Optional[str] = None) -> None:
        super().__init__(message)
        self.offset = offset
        self.pack = pack


class ForkedError(Error):
    """An engine, sink or catalog handle used in a process forked from the
    one that opened it: open your own in the child."""
