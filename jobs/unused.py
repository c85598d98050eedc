"""Packages a process refuses to import because it never uses them, though its libraries would load them at start:
pandas by pyarrow (its first conversion of a numpy array asks whether it is a pandas object: 0.18-0.25 s), scipy by
numba (its BLAS check: 0.13-0.2 s). Used by the decode helpers and the exporter (``jobs.export.host_process``)."""
from __future__ import annotations

from typing import Any


class Without:
    """An import finder that reports the named packages as not installed (pyarrow and numba then go without). A
    ``None`` in ``sys.modules`` would not do: pyarrow's compiled import takes the ``None`` for the module."""

    def __init__(self, *names: str, why: str = "is not used in this process") -> None:
        self.names = frozenset(names)
        self.why = why

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"{name} {self.why}", name=name)
        return None
