"""What both executors share: byte accounting, feeds, the serial reference and the comparison.

The executors themselves are :mod:`spmdrules.execution.simulated` (every process in one Python process,
messages in memory) and :mod:`spmdrules.execution.mpi` (one MPI rank per process, the runtime's
primitives). Both run a :class:`spmdrules.execution.lowering.Program` and count the bytes every step sends,
so the count can be held against the plan's prediction (:meth:`Traffic.mismatches`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.shards import gather
from spmdrules.execution.local import LocalContext, LocalValue, get_kernel, get_vjp
from spmdrules.execution.program import Collective, KernelCall, Layout, Program
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, Tensor
from spmdrules.graph.shapes.shape_rule import DTYPE_BYTES
from spmdrules.runtime.decomposition import Box, relative

Array = NDArray[Any]
Coord = tuple[int, ...]

_INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")


class ExecutionError(SpmdError, RuntimeError):
    """A program that cannot run as lowered: a missing feed, a kernel answering the wrong blocks,
    a step whose data is not where the layout says."""


@dataclass(slots=True)
class Traffic:
    """Bytes sent, per reshard edge (planned) and per op (an op's own reductions)."""

    per_edge: dict[str, int] = field(default_factory=dict)
    internal: dict[str, int] = field(default_factory=dict)
    messages: int = 0
    #: bytes per element of the data each edge actually moved (the run may use another float
    #: width than the graph declares, e.g. float64 data through a float32 graph)
    itemsize: dict[str, int] = field(default_factory=dict)
    #: bytes of each HaloExchange (by its label; the program's HaloSteps predict them)
    halo: dict[str, int] = field(default_factory=dict)

    def add_halo(self, label: str, nbytes: int, messages: int = 0) -> None:
        self.halo[label] = self.halo.get(label, 0) + int(nbytes)
        self.messages += messages

    def add(self, step: Collective, nbytes: int, messages: int = 0, itemsize: int = 0) -> None:
        book = self.internal if step.predicted_bytes is None else self.per_edge
        book[step.edge] = book.get(step.edge, 0) + int(nbytes)
        self.messages += messages
        if itemsize:
            self.itemsize[step.edge] = itemsize

    def merge(self, other: Traffic) -> None:
        for mine, theirs in ((self.per_edge, other.per_edge), (self.internal, other.internal),
                             (self.halo, other.halo)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
        self.messages += other.messages
        self.itemsize.update(other.itemsize)

    @property
    def planned_bytes(self) -> int:
        return sum(self.per_edge.values())

    @property
    def internal_bytes(self) -> int:
        return sum(self.internal.values())

    def predicted(self, program: Program) -> dict[str, int]:
        """Each edge's planned bytes, scaled to the element width the run actually moved."""
        out = {}
        for e in program.edges:
            declared = DTYPE_BYTES[e.edge.dtype]
            actual = self.itemsize.get(e.label, declared)
            out[e.label] = e.plan.total_bytes * actual // declared
        return out

    def mismatches(self, program: Program) -> list[tuple[str, int, int]]:
        """(edge, counted, predicted) for every reshard edge whose count differs from its plan."""
        out = []
        for label, want in self.predicted(program).items():
            got = self.per_edge.get(label, 0)
            if got != want:
                out.append((label, got, want))
        return out



# ---- feeds ------------------------------------------------------------------------------------
def local_part(inner: Box, outer: Box, where: str) -> tuple[slice, ...]:
    """The slices selecting ``inner`` from a block holding ``outer``, for a local step (a slice,
    a reduce-scatter's piece). Raises when ``inner`` is not inside ``outer``: numpy would clip
    the slices and the rank would hold a block other than the one its layout names."""
    if any(i0 < o0 or i1 > o1 for (i0, i1), (o0, o1) in zip(inner, outer, strict=True)
           if i1 > i0):
        raise ExecutionError(f"{where}: the block {list(inner)} is not inside the block "
                             f"{list(outer)} the process holds; the plan's step cannot be local")
    return relative(inner, outer)


def random_feeds(program: Program, seed: int = 0, *, vocab_limits: Mapping[str, int] | None = None,
                 dtype: str = "float64") -> dict[str, Array]:
    """Random global values for every source tensor: floats from N(0, 1) (as ``dtype``),
    integers in ``[0, vocab_limits[name])`` (default ``[0, 2)``).

    Float data is generated in float64 by default so the pipeline can be checked to 1e-12."""
    rng = np.random.default_rng(seed)
    limits = dict(vocab_limits or {})
    out: dict[str, Array] = {}
    for name in program.feeds:
        lay = program.buffers[name]
        if lay.dtype in _INT_DTYPES:
            out[name] = rng.integers(0, limits.get(name, 2), size=lay.shape).astype(lay.dtype)
        elif lay.dtype == "bool":
            out[name] = rng.integers(0, 2, size=lay.shape) > 0
        else:
            out[name] = rng.standard_normal(lay.shape).astype(dtype)
    return out


def check_feeds(program: Program, feeds: Mapping[str, Array]) -> None:
    for name in program.feeds:
        if name not in feeds:
            raise ExecutionError(f"no value fed for source tensor {name!r}; feed every one of "
                                 f"{list(program.feeds)}")
        got = np.shape(feeds[name])
        want = program.buffers[name].shape
        if tuple(got) != want:
            raise ExecutionError(f"the value fed for {name!r} has shape {list(got)}; the graph "
                                 f"says {list(want)}")


def stored_feeds(program: Program, feeds: Mapping[str, Any]) -> dict[str, Array]:
    """The feeds, checked, as the program holds them. Users feed their own order; a source the
    graph stores in another (``Program.storage``: a chunk-aware plan's interleaved weight) is
    converted here, where it enters, and every executor scatters what this returns."""
    check_feeds(program, feeds)
    return {n: program.stored(n, np.asarray(feeds[n])) for n in program.feeds}


# ---- kernels ----------------------------------------------------------------------------------
def call_kernel(call: KernelCall, coord: Coord, blocks: Sequence[LocalValue],
                layouts: Mapping[str, Layout]) -> dict[str, Array]:
    """Run ``call``'s kernel (or, in ``"vjp"`` mode, its VJP) on one process's blocks; check and
    name each output block."""
    ctx = call.context(coord)
    if call.mode == "vjp":
        n_in, n_out = len(call.input_shapes), len(call.output_shapes)
        outs = get_vjp(call.op_type)(ctx, blocks[:n_in], blocks[n_in:n_in + n_out],
                                     blocks[n_in + n_out:])
    else:
        outs = get_kernel(call.op_type)(ctx, blocks)
    what = "VJP" if call.mode == "vjp" else "kernel"
    if len(outs) != len(call.outputs):
        raise ExecutionError(f"op {call.op!r} ({call.op_type}): the {what} returned {len(outs)} "
                             f"results for {len(call.outputs)} outputs")
    named: dict[str, Array] = {}
    for slot, val in zip(call.outputs, outs, strict=True):
        if slot is None:
            continue  # a cotangent nobody asked for (reverse mode)
        names = (slot,) if isinstance(slot, str) else tuple(slot)
        vals = (val,) if isinstance(slot, str) else tuple(val or ())
        if len(names) != len(vals):
            raise ExecutionError(f"op {call.op!r} ({call.op_type}): the {what} returned "
                                 f"{len(vals)} blocks for the {len(names)} outputs {list(names)}")
        for n, v in zip(names, vals, strict=True):
            if n is None:
                continue
            if v is None:
                raise ExecutionError(f"op {call.op!r} ({call.op_type}): the {what} returned no "
                                     f"block for {n!r}")
            arr = np.asarray(v)
            want = layouts[n].local_shape(coord)
            if arr.shape != want:
                raise ExecutionError(
                    f"op {call.op!r} ({call.op_type}): the {what}'s block of {n!r} at mesh "
                    f"coordinate {coord} has shape {list(arr.shape)}; its layout "
                    f"{layouts[n].attr.mapping_str()} of {list(layouts[n].shape)} needs "
                    f"{list(want)}")
            named[n] = arr
    return named


def gather_global(layout: Layout, blocks: Mapping[int, Array]) -> Array:
    """The global value from every process's block (by process id), reducing pending partials."""
    mesh = layout.mesh
    by_coord = {mesh.coords(pid): b for pid, b in blocks.items()}
    return gather(by_coord, layout.shape, layout.attr)


# ---- the serial reference ---------------------------------------------------------------------
_SERIAL_MESH = ProcessMesh([0], dim_names=["serial"])


def _replicated(v: Tensor | tuple[Tensor, ...] | None) -> Any:
    if v is None:
        return None
    if isinstance(v, Tensor):
        return DistAttr.replicated(_SERIAL_MESH, v.ndim)
    return tuple(DistAttr.replicated(_SERIAL_MESH, t.ndim) for t in v)


def _shape_of(v: Tensor | tuple[Tensor, ...] | None) -> Any:
    if v is None:
        return None
    if isinstance(v, Tensor):
        return v.shape
    return tuple(t.shape for t in v)


def serial_context(op: Op) -> LocalContext:
    """The context of ``op`` on a one-process mesh with everything replicated."""
    return LocalContext(op.type, _SERIAL_MESH, (0,),
                        tuple(_shape_of(v) for v in op.operands),
                        tuple(_replicated(v) for v in op.operands),
                        tuple(_shape_of(v) for v in op.results),
                        tuple(_replicated(v) for v in op.results), op.attr_dict)


def _blocks(slots: Sequence[Tensor | tuple[Tensor, ...] | None], values: Mapping[str, Any]
            ) -> list[LocalValue]:
    blocks: list[LocalValue] = []
    for v in slots:
        if v is None:
            blocks.append(None)
        elif isinstance(v, Tensor):
            blocks.append(values.get(v.name))
        else:
            blocks.append([values.get(t.name) for t in v])
    return blocks


def _named(slots: Sequence[Tensor | tuple[Tensor, ...] | None], results: Sequence[LocalValue]
           ) -> dict[str, Array]:
    """Results by tensor name; a tensor in several slots (``add(h, h)``) gets their sum."""
    named: dict[str, Array] = {}
    for rv, val in zip(slots, results, strict=True):
        if rv is None or val is None:
            continue
        pairs: list[tuple[Tensor, Any]]
        if isinstance(rv, Tensor):
            pairs = [(rv, val)]
        else:
            assert isinstance(val, list | tuple)
            pairs = list(zip(rv, list(val), strict=True))
        for t, b in pairs:
            if b is not None:
                arr = np.asarray(b)
                named[t.name] = named[t.name] + arr if t.name in named else arr
    return named


def serial_op(op: Op, values: Mapping[str, Array]) -> dict[str, Array]:
    """One op on whole arrays: its kernel on a one-process mesh with everything replicated."""
    outs = get_kernel(op.type)(serial_context(op), _blocks(op.operands, values))
    return _named(op.results, outs)


def serial_vjp(op: Op, values: Mapping[str, Array], cotangents: Mapping[str, Array]
               ) -> dict[str, Array]:
    """One op's VJP on whole arrays: the cotangents of its inputs (by tensor name) from
    ``values`` (its inputs and outputs) and the cotangents of its outputs (absent: zero)."""
    outs = get_vjp(op.type)(serial_context(op), _blocks(op.operands, values),
                            _blocks(op.results, values), _blocks(op.results, cotangents))
    return _named(op.operands, outs)


def run_serial(graph: Graph, feeds: Mapping[str, Array]) -> dict[str, Array]:
    """Every tensor of ``graph`` computed serially with numpy (each op's kernel, unsharded).
    Fed and returned in the user's order: a tensor the graph stores in another
    (``Tensor.storage``) is converted where it enters and where it comes back."""
    values: dict[str, Array] = {}
    stored = {t.name: t.storage for t in graph.tensors if t.storage is not None}
    for t in graph.tensors:
        if t.producer is None:
            if t.name not in feeds:
                raise ExecutionError(f"no value fed for source tensor {t.name!r}")
            v = np.asarray(feeds[t.name])
            lay = stored.get(t.name)
            if lay is not None:
                if v.shape != t.shape:
                    raise ExecutionError(f"the value fed for {t.name!r} has shape "
                                         f"{list(v.shape)}; the graph says {list(t.shape)}")
                v = lay.stored(v)
            values[t.name] = v
    for op in graph.ops:
        values.update(serial_op(op, values))
    for name, lay in stored.items():
        values[name] = lay.user(values[name])
    return values


def max_error(got: Mapping[str, Array], want: Mapping[str, Array]) -> tuple[float, str]:
    """The largest difference over the tensors both hold, relative to each tensor's scale
    (``max |got - want| / max(1, max |want|)``), and the tensor where it is."""
    worst, where = 0.0, ""
    for name, w in want.items():
        if name not in got:
            continue
        g = np.asarray(got[name])
        if g.shape != np.shape(w):
            return float("inf"), name
        if g.size == 0:
            continue
        wf = np.asarray(w, dtype=np.float64)
        err = float(np.max(np.abs(g.astype(np.float64) - wf)) / max(1.0, np.max(np.abs(wf))))
        if not err <= worst:  # NaN counts as worst
            worst, where = err, name
    return worst, where


__all__ = [
    "ExecutionError",
    "Traffic",
    "call_kernel",
    "check_feeds",
    "gather_global",
    "local_part",
    "max_error",
    "random_feeds",
    "run_serial",
    "serial_context",
    "serial_op",
    "serial_vjp",
    "stored_feeds",
]
