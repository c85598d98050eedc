"""Bad input, named: every problem names its file and position so it can be quarantined and found again."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

T = TypeVar("T")


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


def excerpt(text: str | bytes, n: int = 8) -> str:
    """File content as a quarantine reason may show it: the first ``n`` bytes in hex (``0x726f6f74...``). A reason
    is read by people and stored for the lake's life; it never quotes a file (a link to /etc/shadow was read and its
    first word quoted)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    return "0x" + data[:n].hex() + ("..." if len(data) > n else "")


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


class FinalError(ReconError):
    """An error that a retry would meet again (the same options, the same lake): an Airflow task fails at once."""


class UsageError(FinalError, ValueError):
    """An option value that cannot work (a missing lake, a malformed time, an unknown group): one line that names
    the option, the value and what to do; the command line exits 2."""


def fail_fast(task_fn: Callable[..., T]) -> Callable[..., T]:
    """An Airflow task body whose :class:`FinalError` (a usage error, a failed expectation suite) fails the task at
    once, without its retries: a missing lake or a wrong Param gives the same error 30 s later. The line names the DAG Param where the error names its option
    (``--lake x: ...`` -> ``Param lake (--lake on the command line) x: ...``). Other errors are retried as before."""

    @functools.wraps(task_fn)
    def run(*args: Any, **kwargs: Any) -> T:
        try:
            return task_fn(*args, **kwargs)
        except FinalError as e:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(as_param_error(str(e), kwargs.get("params"))) from e

    return run


def as_param_error(message: str, params: Any) -> str:
    """``message`` with its leading ``--option`` named as the DAG Param it came from, when the DAG has that Param."""
    m = re.match(r"--([a-z][a-z0-9-]*)\b", message)
    if not m or not params:
        return message
    name = m.group(1).replace("-", "_")
    try:
        known = name in params
    except TypeError:
        known = False
    return f"Param {name} (--{m.group(1)} on the command line){message[m.end():]}" if known else message
