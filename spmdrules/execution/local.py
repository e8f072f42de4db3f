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
from typing import Any, Final, TypeVar

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import RuleArgumentError, SpmdError, UnsupportedError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.shards import ShardMismatch, shard_slices
from spmdrules.core.tables import OpTable, caller

Array = NDArray[Any]
LocalValue = Array | list[Array] | list[Array | None] | None
Block = LocalValue  # the name before issue 25: plugins written with it keep working


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


Kernel = Callable[[LocalContext, Sequence[LocalValue]], tuple[LocalValue, ...]]

#: (context, input blocks, output blocks, output cotangents) -> input cotangents
Vjp = Callable[[LocalContext, Sequence[LocalValue], Sequence[LocalValue], Sequence[LocalValue]],
               tuple[LocalValue, ...]]

_KERNELS: OpTable[Kernel] = OpTable("kernel")
_VJPS: OpTable[Vjp] = OpTable("VJP")
#: the tables themselves, for the registration of a whole op (``spmdrules.register_op``)
KERNELS: Final = _KERNELS
VJPS: Final = _VJPS
_kernel_of: Final = _KERNELS.lookup
_vjp_of: Final = _VJPS.lookup
F = TypeVar("F", Kernel, Vjp)


def _register(table: OpTable[F], names: tuple[str, ...], origin: str | None) -> Callable[[F], F]:
    where = origin if origin is not None else caller(2)

    def deco(fn: F) -> F:
        table.add_all(names, fn, where)
        return fn

    return deco


def array(ctx: LocalContext, blocks: Sequence[LocalValue], i: int, name: str) -> Array:
    """Input block ``i`` (the tensor argument ``name``), which must be one array."""
    b = blocks[i] if i < len(blocks) else None
    if not isinstance(b, np.ndarray):
        raise RuleArgumentError(
            f"{ctx.op}: argument {i} ({name!r}) must be one numpy block, got {type(b).__name__}"
        )
    return b


def arrays(ctx: LocalContext, blocks: Sequence[LocalValue], i: int, name: str) -> list[Array]:
    """Input block ``i`` of a list argument ``name``: one array per tensor of the list."""
    b = blocks[i] if i < len(blocks) else None
    if not isinstance(b, list | tuple) or not all(isinstance(a, np.ndarray) for a in b):
        raise RuleArgumentError(
            f"{ctx.op}: argument {i} ({name!r}) is a list argument; pass a list of numpy blocks, "
            f"got {type(b).__name__}"
        )
    return [a for a in b if a is not None]  # none is None: checked above


def register_kernel(*names: str, origin: str | None = None) -> Callable[[Kernel], Kernel]:
    """Register one kernel function under one or more op names (each new: a second kernel for
    one raises ``DuplicateRegistrationError``)."""
    return _register(_KERNELS, names, origin)


def register_vjp(*names: str, origin: str | None = None) -> Callable[[Vjp], Vjp]:
    """Register one vector-Jacobian product under one or more op names (each new)."""
    return _register(_VJPS, names, origin)


def get_vjp(op: str) -> Vjp:
    fn = _vjp_of(op)
    if fn is None:
        raise UnsupportedError(
            f"{op}: no vector-Jacobian product is registered, so reverse mode cannot pass through "
            f"it; ops with one: {', '.join(sorted(_VJPS))}"
        )
    return fn


def list_vjps() -> list[str]:
    return sorted(_VJPS)


def get_kernel(op: str) -> Kernel:
    fn = _kernel_of(op)
    if fn is None:
        raise UnsupportedError(f"{op}: no local kernel is registered; it cannot be executed")
    return fn


def list_kernels() -> list[str]:
    return sorted(_KERNELS)


def cotangent(cts: Sequence[LocalValue], i: int, like: Array) -> Array:
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


# ---- reading the context: block shapes, outputs, and the checks kernels share ------------------
Shape = tuple[int, ...]


def local_shape(shape: Sequence[int], attr: DistAttr, coord: tuple[int, ...]) -> Shape:
    """The shape of the block of a ``shape`` tensor under ``attr`` at mesh coordinate ``coord``."""
    return tuple(s.stop - s.start for s in shard_slices(shape, attr, coord))


def block_range(ctx: LocalContext, shape: Sequence[int], attr: DistAttr, dim: int) -> range:
    """The global indices along ``dim`` that this rank's block of the tensor holds."""
    s = shard_slices(shape, attr, ctx.coord)[dim]
    return range(s.start, s.stop)


def output(ctx: LocalContext, index: int = 0) -> tuple[Shape, DistAttr]:
    """Global shape and attribute of the op's (non-list) output ``index``."""
    shape, attr = ctx.output_shapes[index], ctx.output_attrs[index]
    if not isinstance(attr, DistAttr):
        raise RuleArgumentError(
            f"{ctx.op}: output {index} has no DistAttr in the context (got {type(attr).__name__})"
        )
    return tuple(shape), attr


def variadic_output(ctx: LocalContext) -> list[tuple[Shape, DistAttr]]:
    """(global shape, attribute) of every tensor of the op's one list output.

    The context holds them either per output (one entry: a tuple of shapes and one of attributes,
    as the graph and ``spmdrules.graph.shapes`` give them) or flat, one entry per tensor (as Paddle's
    rules answer split's outs); both read the same.
    """
    shapes: Sequence[Any] = ctx.output_shapes
    attrs: Sequence[Any] = ctx.output_attrs
    if len(attrs) == 1 and isinstance(attrs[0], list | tuple):
        shapes, attrs = shapes[0], attrs[0]
    if len(shapes) != len(attrs) or not all(isinstance(a, DistAttr) for a in attrs):
        raise RuleArgumentError(
            f"{ctx.op}: the context gives {len(shapes)} output shapes and {len(attrs)} "
            "attributes; give one DistAttr per tensor of the list output"
        )
    return [(tuple(s), a) for s, a in zip(shapes, attrs, strict=True)]


def out_block(ctx: LocalContext, index: int = 0) -> Shape:
    """The shape of this rank's block of the op's (non-list) output ``index``."""
    shape, attr = output(ctx, index)
    return local_shape(shape, attr, ctx.coord)


def input_spec(ctx: LocalContext, i: int, name: str) -> tuple[Shape, DistAttr]:
    """Global shape and attribute of the (single-tensor) input ``i``."""
    shape, attr = ctx.input_shapes[i], ctx.input_attrs[i]
    if shape is None or not isinstance(attr, DistAttr):
        raise RuleArgumentError(f"{ctx.op}: the context has no shape or DistAttr for {name!r}")
    return tuple(shape), attr


class KernelInputError(SpmdError, ValueError):
    """A kernel's data lies outside the op's domain (an id past the vocabulary, a bad label)."""


def require_whole(ctx: LocalContext, i: int, name: str) -> None:
    """Refuse a partial input: these ops do not distribute over a pending reduction."""
    a = ctx.input_attrs[i] if i < len(ctx.input_attrs) else None
    if a is not None and a.partial_items:
        raise UnsupportedError(
            f"{ctx.op}: {name!r} is partial on mesh dims {[d for d, _ in a.partial_items]}; the op "
            f"is not linear in it, so reshard {name!r} to replicated (or sharded) first"
        )


def require_full_dims(ctx: LocalContext, i: int, name: str, dims: Sequence[int], why: str) -> None:
    """Refuse a block that holds only part of the ``dims`` of input ``i`` (a cut row)."""
    shape, attr = input_spec(ctx, i, name)
    for d in dims:
        if block_range(ctx, shape, attr, d) != range(shape[d]):
            raise ShardMismatch(
                f"{ctx.op}: {name!r} dim {d} is sharded under {attr.mapping_str()}, but {why}; "
                f"replicate {name!r} dim {d}"
            )


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The dtype a kernel computes a tensor of dtype ``name`` in: every float (bfloat16 and
    float16 too) as float64, as the executors compute floats; integers and bool exactly."""
    if name in ("bool", "int8", "int16", "int32", "int64", "uint8"):
        return np.dtype(name)
    return np.dtype("complex128") if name.startswith("complex") else np.dtype("float64")


# ---- reading positions of a block: ops that move values (slice, tile, expand, gather) ----------
def held(ctx: LocalContext, have: range, want: Sequence[int] | Array, name: str, dim: int
         ) -> Array:
    """The positions in this rank's block (holding global ``have``) of the global ``want``, all
    of which it must hold: else the layout cannot be computed locally (``ShardMismatch``)."""
    w = np.asarray(want, dtype=np.int64)
    if w.size and (w.min() < have.start or w.max() >= have.stop):
        raise ShardMismatch(
            f"{ctx.op}: this rank's result block needs {name!r} dim {dim} positions "
            f"{int(w.min())}..{int(w.max())} but the rank holds {have.start}..{have.stop - 1}; "
            f"replicate {name!r} dim {dim}")
    return w - have.start


def require_aligned(ctx: LocalContext, i: int, name: str) -> None:
    """Input ``i`` broadcasts against the (single) output, right-aligned: each of its dims must
    hold what the output block holds there, and a size-1 dim that broadcasts must be held whole."""
    shape, attr = input_spec(ctx, i, name)
    out_shape, out_attr = output(ctx)
    diff = len(out_shape) - len(shape)
    for d, n in enumerate(shape):
        have = block_range(ctx, shape, attr, d)
        want = block_range(ctx, out_shape, out_attr, d + diff)
        if n == 1 and out_shape[d + diff] != 1:
            want = range(1)  # it broadcasts: every rank needs its one value
        if have != want and not (len(want) == 0 and len(have) == 0):
            raise ShardMismatch(
                f"{ctx.op}: {name!r} dim {d} holds {have.start}..{have.stop - 1} where the result "
                f"block needs {want.start}..{want.stop - 1}; give {name!r} dim {d} the result's "
                "sharding (or replicate it if it broadcasts)")


def take(x: Array, index: Sequence[Any]) -> Array:
    """x at the positions: an integer array per dim (their outer product), an int drops the dim."""
    out = x
    for d in reversed(range(len(index))):
        out = np.take(out, index[d], axis=d)
    return np.asarray(out)


def put(like: Array, g: Array, index: Sequence[Any]) -> Array:
    """The adjoint of ``take``: zeros shaped like ``like``, g added at the positions (repeated
    positions accumulate)."""
    out = np.zeros_like(like, dtype=np.result_type(like, g))
    full = [np.atleast_1d(i) for i in index]
    np.add.at(out, np.ix_(*full), g.reshape([len(i) for i in full]))
    return out


__all__ = [
    "Array",
    "Block",
    "Kernel",
    "KernelInputError",
    "LocalContext",
    "LocalValue",
    "Shape",
    "Vjp",
    "array",
    "arrays",
    "block_range",
    "cotangent",
    "get_kernel",
    "get_vjp",
    "held",
    "input_spec",
    "list_kernels",
    "list_vjps",
    "local_shape",
    "numpy_dtype",
    "out_block",
    "output",
    "put",
    "register_kernel",
    "register_vjp",
    "require_aligned",
    "require_full_dims",
    "require_whole",
    "take",
    "variadic_output",
]
