"""Progress bars (tqdm) for the long passes over a graph: import, completion, lowering.

A bar is shown only when the pass is long (``THRESHOLD`` items: a few thousand ops take seconds)
and stderr is a terminal, so logs, pipes and CI stay clean. ``SPMDRULES_PROGRESS=0`` in the
environment, or ``enabled(False)`` (the CLI's ``--no-progress``), turns the bars off; ``=1``
shows them on any stderr (for a log that wants them).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

#: the fewest items a pass must have to show a bar
THRESHOLD = 2000
_state: dict[str, bool | None] = {"enabled": None}


def enabled(on: bool | None) -> None:
    """Force the bars on or off for this process; ``None`` goes back to the default (module
    docs)."""
    _state["enabled"] = on


def shown(total: int) -> bool:
    """Whether a pass over ``total`` items shows a bar."""
    if total < THRESHOLD:
        return False
    forced = _state["enabled"]
    if forced is not None:
        return forced
    env = os.environ.get("SPMDRULES_PROGRESS", "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if env in ("1", "true", "yes", "on"):
        return True
    return sys.stderr.isatty()


def progress(items: Iterable[T], what: str, *, total: int, unit: str = "op") -> Iterable[T]:
    """``items`` as they are, under a bar on stderr named ``what`` when ``shown(total)``."""
    if not shown(total):
        return items
    return _bar(items, what, total, unit)


@contextmanager
def stage(what: str, *, total: int, unit: str = "op") -> Iterator[None]:
    """A bar for one step that reports no progress of its own (torch's decomposition, a
    completion): its name and size while it runs, its time when it ends; when ``shown(total)``."""
    if not shown(total):
        yield
        return
    from tqdm import tqdm

    with tqdm(total=1, desc=f"{what} ({total} {unit}s)", file=sys.stderr, leave=False,
              bar_format="{desc}: {elapsed}") as bar:
        yield
        bar.update()


def _bar(items: Iterable[T], what: str, total: int, unit: str) -> Iterator[T]:
    from tqdm import tqdm

    with tqdm(items, desc=what, total=total, unit=unit, file=sys.stderr, leave=False,
              mininterval=0.25) as bar:
        yield from bar


__all__ = ["THRESHOLD", "enabled", "progress", "shown", "stage"]
