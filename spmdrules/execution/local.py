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
The families live in :mod:`spmdrules.execution.kernels` (one module per op family, as in every
layer), and the execution package imports them all, so they are registered before any of it runs.

Reverse mode (:mod:`spmdrules.execution.adjoint`) needs each op's vector-Jacobian product on the blocks: a
:data:`Vjp` receives the same context, the rank's input blocks, its output blocks and the
cotangents of its outputs (``None`` for an output nothing depends on: a zero), and returns the
cotangent of every input (``None`` for an input that takes none: integer ids, labels). It is the
exact adjoint of the *local* kernel, so its results are derivatives with respect to the rank's own
blocks: where an input is replicated over a mesh dim they are pieces of a pending sum, the dual of
the input's layout. :func:`register_vjp` and :func:`get_vjp` mirror the kernel registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import RuleArgumentError, UnsupportedError
from spmdrules.core.mesh import ProcessMesh

Array = NDArray[Any]
Block = Array | list[Array] | list[Array | None] | None


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

#: (context, input blocks, output blocks, output cotangents) -> input cotangents
Vjp = Callable[[LocalContext, Sequence[Block], Sequence[Block], Sequence[Block]], tuple[Block, ...]]

_KERNELS: dict[str, Kernel] = {}
_VJPS: dict[str, Vjp] = {}
F = TypeVar("F", Kernel, Vjp)


def _register(table: dict[str, F], what: str, names: tuple[str, ...]) -> Callable[[F], F]:
    def deco(fn: F) -> F:
        for n in names:
            if n in table:
                raise ValueError(f"a {what} for {n!r} is already registered")
            table[n] = fn
        return fn

    return deco


def array(ctx: LocalContext, blocks: Sequence[Block], i: int, name: str) -> Array:
    """Input block ``i`` (the tensor argument ``name``), which must be one array."""
    b = blocks[i] if i < len(blocks) else None
    if not isinstance(b, np.ndarray):
        raise RuleArgumentError(
            f"{ctx.op}: argument {i} ({name!r}) must be one numpy block, got {type(b).__name__}"
        )
    return b


def arrays(ctx: LocalContext, blocks: Sequence[Block], i: int, name: str) -> list[Array]:
    """Input block ``i`` of a list argument ``name``: one array per tensor of the list."""
    b = blocks[i] if i < len(blocks) else None
    if not isinstance(b, list | tuple) or not all(isinstance(a, np.ndarray) for a in b):
        raise RuleArgumentError(
            f"{ctx.op}: argument {i} ({name!r}) is a list argument; pass a list of numpy blocks, "
            f"got {type(b).__name__}"
        )
    return [a for a in b if a is not None]  # none is None: checked above


def register_kernel(*names: str) -> Callable[[Kernel], Kernel]:
    """Register one kernel function under one or more op names."""
    return _register(_KERNELS, "kernel", names)


def register_vjp(*names: str) -> Callable[[Vjp], Vjp]:
    """Register one vector-Jacobian product under one or more op names."""
    return _register(_VJPS, "VJP", names)


def get_vjp(op: str) -> Vjp:
    fn = _VJPS.get(op)
    if fn is None:
        raise UnsupportedError(
            f"{op}: no vector-Jacobian product is registered, so reverse mode cannot pass through "
            f"it; ops with one: {', '.join(sorted(_VJPS))}"
        )
    return fn


def list_vjps() -> list[str]:
    return sorted(_VJPS)


def get_kernel(op: str) -> Kernel:
    fn = _KERNELS.get(op)
    if fn is None:
        raise UnsupportedError(f"{op}: no local kernel is registered; it cannot be executed")
    return fn


def list_kernels() -> list[str]:
    return sorted(_KERNELS)


def cotangent(cts: Sequence[Block], i: int, like: Array) -> Array:
    """Output ``i``'s cotangent block, zeros shaped like its output block when none flows."""
    g = cts[i] if i < len(cts) else None
    if g is None:
        return np.zeros_like(like)
    if not isinstance(g, np.ndarray) or g.shape != like.shape:
        raise UnsupportedError(
            f"the cotangent of output {i} must be one block shaped like the output "
            f"{list(like.shape)}, got {getattr(g, 'shape', type(g).__name__)}"
        )
    return g



__all__ = [
    "Array",
    "Block",
    "DistAttr",
    "Kernel",
    "LocalContext",
    "Vjp",
    "array",
    "arrays",
    "cotangent",
    "get_kernel",
    "get_vjp",
    "list_kernels",
    "list_vjps",
    "np",
    "register_kernel",
    "register_vjp",
]
