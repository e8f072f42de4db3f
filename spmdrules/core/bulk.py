"""Bulk work on large models: phases that make many small objects at once."""

from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Callable
from typing import Final, TypeVar

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


def _malloc_trim() -> Callable[[int], int] | None:
    if sys.platform != "linux":
        return None
    try:
        # the symbols the interpreter is linked with, libc's among them: no search for the
        # library (ctypes.util.find_library runs ldconfig in a subprocess)
        fn: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    return fn


_TRIM: Final = _malloc_trim()


def release_scratch() -> None:
    """Give the C heap's free pages back to the system.

    pydantic-core parses a model file into a JSON tree on the C heap (about three times the
    file's size) before it builds the records; Python's own objects live in separate arenas, so
    the later phases never reuse those freed pages and the process would keep them resident
    until it ends: 200 MB of a 60 MB file's load. glibc's ``malloc_trim`` returns them; elsewhere
    this does nothing."""
    if _TRIM is not None:
        _TRIM(0)
