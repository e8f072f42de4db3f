"""Wall time per named phase of a pipeline, as the demo and the benchmarks report it.

>>> phases = Phases()
>>> with phases("build"):
...     _ = sum(range(1000))
>>> list(phases.seconds)
['build']
>>> phases.lines()[0].startswith("  build")
True
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Phases:
    """Seconds per phase, in the order the phases first ran (a repeated name adds up)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def add(self, name: str, seconds: float) -> None:
        """Record a time measured elsewhere (e.g. by the slowest MPI rank)."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def lines(self, width: int = 46) -> list[str]:
        """``  name .... 12.3 ms`` per phase."""
        return [f"  {k:<{width}} {v * 1e3:9.1f} ms" for k, v in self.seconds.items()]


__all__ = ["Phases"]
