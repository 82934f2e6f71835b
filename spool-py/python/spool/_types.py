"""Plain result types of ``spool``."""

from typing import Optional

__all__ = ["Undrained"]


class Undrained:
    """What :meth:`spool.Engine.flush` returns when the deadline passed
    before the engine drained: false in a boolean context, with the owed
    figures (``ready`` own packs not uploaded, ``owed`` uploaded but not
    indexed, ``cycles`` run) and the service's ``message``."""

    __slots__ = ("ready", "owed", "cycles", "last_error", "message")

    def __init__(self, ready: int, owed: int, cycles: int, last_error: Optional[str],
                 message: str) -> None:
        self.ready = ready
        self.owed = owed
        self.cycles = cycles
        self.last_error = last_error
        self.message = message

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Undrained(ready={self.ready}, owed={self.owed}, cycles={self.cycles})"

    def __str__(self) -> str:
        return self.message
