"""Local kernels: what one rank computes for an op, on its own blocks.

A kernel receives the rank's local input blocks (numpy arrays; a list for a list argument; ``None``
for an absent optional) and a :class:`LocalContext` describing the global picture (mesh, this rank's
mesh coordinate, the global shapes and the attributes the rule inferred for every input and
output), and returns the rank's local output blocks, one per output of the op (a list for a
variadic output). Attributes that name global sizes (reshape targets, split sections, ...) are
rewritten for the block inside the kernel, from the context.

A partial input block holds a piece of a pending reduction; a kernel whose rule keeps an input
partial must produce the matching partial output piece (e.g. a vocab-sharded embedding masks ids
outside its rows and yields a partial sum).

Kernels are registered per op name with :func:`register_kernel`; :func:`get_kernel` finds them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from spmdrules.attr import DistAttr
from spmdrules.errors import UnsupportedError
from spmdrules.mesh import ProcessMesh

Array = NDArray[Any]
Block = Array | list[Array] | None


@dataclass(frozen=True, slots=True)
class LocalContext:
    """What a kernel may know besides its blocks."""

    op: str
    mesh: ProcessMesh
    coord: tuple[int, ...]
    #: one entry per tensor argument (a tuple for a list argument, None if absent)
    input_shapes: tuple[Any, ...]
    input_attrs: tuple[Any, ...]
    #: one entry per output
    output_shapes: tuple[Any, ...]
    output_attrs: tuple[Any, ...]
    #: the op's attributes by Paddle name, defaults filled
    attrs: dict[str, Any]


Kernel = Callable[[LocalContext, Sequence[Block]], tuple[Block, ...]]

_KERNELS: dict[str, Kernel] = {}


def register_kernel(*names: str) -> Callable[[Kernel], Kernel]:
    """Register one kernel function under one or more op names."""

    def deco(fn: Kernel) -> Kernel:
        for n in names:
            if n in _KERNELS:
                raise ValueError(f"a kernel for {n!r} is already registered")
            _KERNELS[n] = fn
        return fn

    return deco


def get_kernel(op: str) -> Kernel:
    _ensure_loaded()
    fn = _KERNELS.get(op)
    if fn is None:
        raise UnsupportedError(f"{op}: no local kernel is registered; it cannot be executed")
    return fn


def list_kernels() -> list[str]:
    _ensure_loaded()
    return sorted(_KERNELS)


_loaded = False


def _ensure_loaded() -> None:
    """Kernels live next to their rules (``kernels_*`` modules in spmdrules) and load on demand."""
    global _loaded
    if not _loaded:
        _loaded = True
        import importlib
        import pkgutil

        import spmdrules

        for m in pkgutil.iter_modules(spmdrules.__path__):
            if m.name.startswith("kernels_"):
                importlib.import_module(f"spmdrules.{m.name}")


__all__ = [
    "Array",
    "Block",
    "DistAttr",
    "Kernel",
    "LocalContext",
    "get_kernel",
    "list_kernels",
    "np",
    "register_kernel",
]
