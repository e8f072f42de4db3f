"""Local steps that take their time, for jobs that must still be running when a test acts on
them. Ranks unpickle them by reference, so they live in a module the ranks can import (put
tests/support on their PYTHONPATH)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class Sleep:
    """A LocalStep's function that leaves ``sleeping.<rank>`` in the folder ``marks`` (so a test
    knows the rank got there), waits ``seconds`` and returns its blocks unchanged."""

    def __init__(self, seconds: float, marks: str) -> None:
        self.seconds = seconds
        self.marks = marks

    def __call__(self, coord: tuple[int, ...], blocks: Sequence[Any]) -> list[Any]:
        Path(self.marks, f"sleeping.{os.environ.get('PMI_RANK')}").touch()
        time.sleep(self.seconds)
        return list(blocks)
