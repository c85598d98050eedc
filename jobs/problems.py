"""Bad input, named: every problem names its file and position so it can be quarantined and found again."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One piece of unusable input, bound for ``bronze/quarantine``.

    Args:
        source_path: the landing-zone path (or URI) of the file.
        position: byte (binary files) or character (JSON files) offset of the bad record; 0 for a whole file.
        reason: what is wrong and, where useful, what was done about it.
    """

    source_path: str
    position: int
    reason: str


class ReconError(Exception):
    """Base class of the project's named errors."""


class ConfigParseError(ReconError, ValueError):
    """A fastjson config file that cannot be parsed (file and character position in the message)."""

    def __init__(self, source_path: str, position: int, reason: str) -> None:
        self.source_path = source_path
        self.position = position
        self.reason = reason
        super().__init__(f"{source_path}: at character {position}: {reason}")


class CorruptSegmentError(ReconError, ValueError):
    """A commitlog or consumequeue record that cannot be decoded (segment and byte position in the message)."""

    def __init__(self, source_path: str, position: int, reason: str) -> None:
        self.source_path = source_path
        self.position = position
        self.reason = reason
        super().__init__(f"{source_path}: at byte {position}: {reason}")


class LandingLayoutError(ReconError, ValueError):
    """A landing-zone path that does not follow the layout of spec §3."""


class UsageError(ReconError, ValueError):
    """An option value that cannot work (a missing lake, a malformed time, an unknown group): one line that names
    the option, the value and what to do; the command line exits 2."""
