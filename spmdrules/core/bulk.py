"""Bulk work on large models: phases that make many small objects at once."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

T_ = TypeVar("T_")


def without_gc(fn: Callable[[], T_]) -> T_:
    """``fn()`` with the cyclic collector off.

    Loading, building and completing a graph make a bulk of small objects without reference
    cycles (a few per op or tensor). With the collector on, each new generation of them triggers
    a scan of every object made before, so a 200k-op load spends most of its time scanning. The
    objects are scanned once, at the first collection after.

    A plain function, not a generator-based context manager: leaving one allocates once the
    collector is back on, which would run that young-generation collection here already."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return fn()
    finally:
        if was_enabled:
            gc.enable()
