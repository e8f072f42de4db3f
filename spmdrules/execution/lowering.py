"""Lowering: a completed graph becomes a program of local kernel calls and collective steps.

Every tensor's mesh and ``DistAttr`` is read as a Cartesian partition (:class:`Layout`): a mesh
dim that shards a tensor dim is a partition dim over it (several mesh dims co-sharding one tensor
dim split it in mixed radix, the first one major), a replicated mesh dim is a broadcast dim, and
a partial mesh dim is a pending reduction of its reduce type. Local blocks follow the runtime's
balanced decomposition, uneven sizes included.

The program (:class:`Program`) is a list of instructions in topological order:

- :class:`KernelCall`: the op's local kernel (:mod:`spmdrules.execution.local`) on every process of the
  op's mesh, with the attributes the rule inferred for its operands and results;
- :class:`Collective`: one step of a planned reshard (:mod:`spmdrules.completion.planning`), run by the
  executor with the matching runtime primitive (see ``PRIMITIVES``);
- :class:`LocalStep`: numpy on each block with no kernel, for ops whose local computation needs
  collectives in the middle (the vocab-parallel cross entropy, lowered as Megatron does).

Every reshard edge of the completion becomes the steps of its plan, in order, between buffers
named after the edge, so an executor's byte count per edge can be compared with the plan's.
Both executors (:mod:`spmdrules.execution.simulated`, :mod:`spmdrules.execution.mpi`) run the same
program.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from spmdrules.completion import Completion, ReshardEdge
from spmdrules.completion.planning import Plan, Step, StepKind
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import flat_slots
from spmdrules.execution.local import LocalContext
from spmdrules.graph import shapes
from spmdrules.graph.graph import Graph, Op, Tensor
from spmdrules.runtime.decomposition import Box, box_shape, box_volume

Array = NDArray[Any]
Coord = tuple[int, ...]
#: a kernel argument or result: one buffer, a list of buffers, or an absent optional
Slot = str | tuple[str | None, ...] | None

#: the runtime primitive each planned step runs as (docs/execution.md)
PRIMITIVES: Final[dict[str, str]] = {
    "all_reduce": "AllSumReduce (sum; max/min/product/any/all: Allreduce on the mesh-dim group)",
    "reduce_scatter": "reduce-scatter on the mesh-dim group",
    "all_gather": "Repartition's box exchange to replicated blocks",
    "all_to_all": "Repartition's box exchange (S(i) -> S(j))",
    "slice": "local slice",
    "zero_partial": "local: one replica keeps the value, the others the identity",
    "p2p": "box exchange between meshes",
}


class LoweringError(SpmdError, ValueError):
    """A completed graph that cannot be lowered; the message names the tensor or op and the fix."""


# ---- layouts ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Layout:
    """A tensor's global shape, dtype and attribute, read as a Cartesian partition."""

    shape: tuple[int, ...]
    dtype: str
    attr: DistAttr

    @property
    def mesh(self) -> ProcessMesh:
        return self.attr.mesh

    @property
    def partition_shape(self) -> tuple[int, ...]:
        """Parts per tensor dim: the product of the sizes of the mesh dims that split it."""
        return tuple(self.attr.shard_count(d) for d in range(len(self.shape)))

    @property
    def split_mesh_dims(self) -> tuple[tuple[int, ...], ...]:
        """Per tensor dim, the mesh dims splitting it (major first; more than one = co-shard)."""
        return self.attr.multi_dims_mapping

    @property
    def broadcast_mesh_dims(self) -> tuple[int, ...]:
        """Mesh dims along which every process holds the same block."""
        used = self.attr.sharded_mesh_dims | self.attr.partial_dims
        return tuple(m for m in range(self.mesh.ndim) if m not in used)

    @property
    def pending(self) -> tuple[tuple[int, str], ...]:
        """(mesh dim, reduce type) of every pending reduction."""
        return self.attr.partial_items

    def part_index(self, coord: Coord) -> Coord:
        """The process's position in the partition (mixed radix over co-sharding mesh dims)."""
        out = []
        for dims in self.attr.multi_dims_mapping:
            idx = 0
            for m in dims:
                idx = idx * self.mesh.shape[m] + coord[m]
            out.append(idx)
        return tuple(out)

    def box(self, coord: Coord) -> Box:
        """The global box of the block at mesh coordinate ``coord`` (balanced decomposition)."""
        out = []
        for n, parts, i in zip(self.shape, self.partition_shape, self.part_index(coord),
                               strict=True):
            q, r = divmod(n, parts)
            lo = q * i + min(i, r)
            out.append((lo, lo + q + (1 if i < r else 0)))
        return tuple(out)

    def local_shape(self, coord: Coord) -> tuple[int, ...]:
        return box_shape(self.box(coord))

    def local_nbytes(self, coord: Coord) -> int:
        return box_volume(self.box(coord)) * shapes.DTYPE_BYTES[self.dtype]

    def describe(self) -> str:
        """``partition [2, 1, 1] over mesh dims [(0,), (), ()], broadcast (1,), pending ...``."""
        text = (f"partition {list(self.partition_shape)} over mesh dims "
                f"{[list(d) for d in self.split_mesh_dims]}")
        if self.broadcast_mesh_dims:
            text += f", broadcast over {list(self.broadcast_mesh_dims)}"
        if self.pending:
            text += ", pending " + ", ".join(f"{rt} over {m}" for m, rt in self.pending)
        return text


def counterpart_transfer(a: Layout, b: Layout) -> bool:
    """A transfer between meshes that sends every block to the process at the same coordinate:
    the source holds pieces of a pending reduction, or both sides cut the tensor alike. Any
    other transfer is a box exchange from :func:`owners`."""
    return bool(a.attr.partial_items) or (
        a.mesh.shape == b.mesh.shape and a.attr.multi_dims_mapping == b.attr.multi_dims_mapping)


def owners(lay: Layout, coords: Mapping[int, Coord], spread: Iterable[int]) -> dict[int, Box]:
    """The one process holding each distinct block of ``lay`` (coordinate 0 along every mesh
    dim of ``spread``, over which the processes hold copies or pieces of it), with its box."""
    dims = tuple(spread)
    return {p: lay.box(c) for p, c in coords.items() if not any(c[d] for d in dims)}


def mesh_coords(mesh: ProcessMesh) -> dict[int, Coord]:
    """Process id -> coordinate on ``mesh``."""
    return {pid: c for pid, c in zip(mesh.process_ids, itertools.product(
        *(range(s) for s in mesh.shape)), strict=True)}


def groups(mesh: ProcessMesh, mesh_dim: int) -> list[tuple[int, ...]]:
    """The process ids of every group along ``mesh_dim``, each ordered by its coordinate there."""
    ids = np.asarray(mesh.process_ids).reshape(mesh.shape)
    moved = np.moveaxis(ids, mesh_dim, -1).reshape(-1, mesh.shape[mesh_dim])
    return [tuple(int(p) for p in row) for row in moved]


# ---- instructions -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KernelCall:
    """Run ``op_type``'s local kernel on every process of ``mesh``.

    In ``"vjp"`` mode (reverse mode, :mod:`spmdrules.execution.adjoint`) it runs the op's vector-Jacobian
    product instead: ``inputs`` are the op's inputs, then its outputs, then their cotangents, and
    ``outputs`` are the cotangents of the op's inputs (None where none is wanted). The shapes and
    attributes stay the forward op's, which the VJP reads as the kernel does."""

    op: str
    op_type: str
    mesh: ProcessMesh
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    input_shapes: tuple[Any, ...]
    input_attrs: tuple[Any, ...]
    output_shapes: tuple[Any, ...]
    output_attrs: tuple[Any, ...]
    attrs: dict[str, Any]
    mode: Literal["forward", "vjp"] = "forward"

    def context(self, coord: Coord) -> LocalContext:
        return LocalContext(self.op_type, self.mesh, coord, self.input_shapes, self.input_attrs,
                            self.output_shapes, self.output_attrs, dict(self.attrs))


@dataclass(frozen=True, slots=True)
class Collective:
    """One step of a planned reshard (or of an op's own reduction), from buffer ``src`` to
    ``dst``. ``edge`` names the reshard edge it belongs to; ``predicted_bytes`` is the plan's
    total for the step (None for an op's internal reduction, which no plan predicts)."""

    kind: StepKind
    mesh_dim: int | None
    src: str
    dst: str
    edge: str
    predicted_bytes: int | None
    #: the reduce type of a pending reduction the step resolves or creates
    reduce_type: str | None = None
    #: the op whose own lowering the step belongs to (None for a planned reshard step)
    op: str | None = None
    #: reverse mode: run the adjoint of a layout-changing ``p2p`` (each process returns the
    #: pieces it received to their owners, which add them up), from the cotangent of the
    #: transfer's destination (``src``) to that of its source (``dst``)
    adjoint: bool = False

    @property
    def primitive(self) -> str:
        return PRIMITIVES[self.kind]


#: numpy on one process's blocks: (coordinate, input blocks) -> output blocks
LocalFn = Callable[[Coord, Sequence[Array]], tuple[Array, ...]]


@dataclass(frozen=True, slots=True)
class LocalStep:
    """Plain numpy on every process of ``mesh`` (part of an op lowered without its kernel)."""

    op: str
    mesh: ProcessMesh
    fn: LocalFn
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


Instruction = KernelCall | Collective | LocalStep


@dataclass(frozen=True, slots=True)
class EdgePlan:
    """A reshard edge of the completion, its plan, and the buffer names it moves between."""

    label: str
    edge: ReshardEdge
    plan: Plan
    src: str
    dst: str


@dataclass(slots=True)
class Program:
    """A lowered graph: buffers with their layouts, instructions in order, and the edges."""

    name: str
    buffers: dict[str, Layout]
    instructions: list[Instruction]
    #: source tensors (graph inputs and parameters) the caller feeds, by name
    feeds: tuple[str, ...]
    #: every graph tensor, by name (a buffer of the same name holds it)
    tensors: tuple[str, ...]
    edges: list[EdgePlan] = field(default_factory=list)
    #: every op's call as its kernel would run it, by op name (also for ops lowered otherwise)
    calls: dict[str, KernelCall] = field(default_factory=dict)
    #: reverse mode (:func:`spmdrules.execution.adjoint.gradient_program`): the fed cotangent of each
    #: seeded tensor, and the buffer holding the gradient of each requested tensor
    seeds: dict[str, str] = field(default_factory=dict)
    grads: dict[str, str] = field(default_factory=dict)

    @property
    def predicted_bytes(self) -> int:
        """What the plans of every reshard edge send in total."""
        return sum(e.plan.total_bytes for e in self.edges)

    def process_ids(self) -> tuple[int, ...]:
        """Every process some buffer lives on."""
        return tuple(sorted({p for lay in self.buffers.values() for p in lay.mesh.process_ids}))

    def summary(self) -> str:
        n_k = sum(isinstance(i, KernelCall) for i in self.instructions)
        n_c = sum(isinstance(i, Collective) for i in self.instructions)
        n_l = sum(isinstance(i, LocalStep) for i in self.instructions)
        return (f"program {self.name!r}: {n_k} kernel calls, {n_c} collective steps, "
                f"{n_l} local steps, {len(self.buffers)} buffers, {len(self.edges)} reshard "
                f"edges predicting {self.predicted_bytes} bytes")


# ---- lowering ---------------------------------------------------------------------------------
def _step_reduce_type(step: Step) -> str | None:
    m = step.mesh_dim
    if step.kind in ("all_reduce", "reduce_scatter"):
        return step.src.partial.get(m) if m is not None else None
    if step.kind == "zero_partial" and m is not None:
        return step.dst.partial.get(m)
    return None


class _Lowering:
    def __init__(self, result: Completion) -> None:
        self.r = result
        self.g: Graph = result.graph
        self.buffers: dict[str, Layout] = {}
        self.code: list[Instruction] = []
        self.edges: list[EdgePlan] = []
        self.calls: dict[str, KernelCall] = {}
        self.by_edge: dict[tuple[str, str, str], ReshardEdge] = {
            (e.tensor, e.op, e.side): e for e in result.reshards
        }

    def layout(self, t: Tensor, attr: DistAttr | None = None) -> Layout:
        return Layout(t.shape, t.dtype, self.r.attr(t) if attr is None else attr)

    def reshard(self, e: ReshardEdge, src: str, dst: str) -> None:
        plan = e.plan(self.r.cost)
        label = f"{e.tensor} {'->' if e.side == 'operand' else '<-'} {e.op}"
        self.edges.append(EdgePlan(label, e, plan, src, dst))
        cur = src
        for k, step in enumerate(plan.steps):
            nxt = dst if k == len(plan.steps) - 1 else f"{dst}#{k}"
            self.buffers[nxt] = Layout(e.shape, e.dtype, step.dst)
            self.code.append(Collective(step.kind, step.mesh_dim, cur, nxt, label,
                                        step.total_bytes, _step_reduce_type(step)))
            cur = nxt

    def operand(self, op: Op, t: Tensor) -> tuple[str, Layout]:
        e = self.by_edge.get((t.name, op.name, "operand"))
        if e is None:
            return t.name, self.buffers[t.name]
        name = f"{t.name}@{op.name}"
        if name not in self.buffers:
            self.buffers[name] = Layout(t.shape, t.dtype, e.dst)
            self.reshard(e, t.name, name)
        return name, self.buffers[name]

    def result(self, op: Op, t: Tensor) -> tuple[str, Layout, ReshardEdge | None]:
        e = self.by_edge.get((t.name, op.name, "result"))
        if e is None:
            return t.name, self.buffers[t.name], None
        name = f"{t.name}<-{op.name}"
        self.buffers[name] = Layout(t.shape, t.dtype, e.src)
        return name, self.buffers[name], e

    def run(self) -> Program:
        for t in self.g.tensors:
            if self.r.attr(t) is None:
                raise LoweringError(f"tensor {t.name!r} has no attribute; complete the graph first")
            self.buffers[t.name] = self.layout(t)
        for op in self.g.ops:
            self.lower_op(op)
        feeds = tuple(t.name for t in self.g.tensors if t.producer is None)
        return Program(self.g.name, self.buffers, self.code, feeds,
                       tuple(t.name for t in self.g.tensors), self.edges, self.calls)

    def lower_op(self, op: Op) -> None:
        ins: list[Slot] = []
        in_shapes: list[Any] = []
        in_attrs: list[Any] = []
        for v in op.operands:
            if v is None:
                ins.append(None)
                in_shapes.append(None)
                in_attrs.append(None)
            elif isinstance(v, Tensor):
                name, lay = self.operand(op, v)
                ins.append(name)
                in_shapes.append(lay.shape)
                in_attrs.append(lay.attr)
            else:
                pairs = [self.operand(op, t) for t in v]
                ins.append(tuple(n for n, _ in pairs))
                in_shapes.append(tuple(lay.shape for _, lay in pairs))
                in_attrs.append(tuple(lay.attr for _, lay in pairs))
        outs: list[Slot] = []
        out_shapes: list[Any] = []
        out_attrs: list[Any] = []
        after: list[tuple[ReshardEdge, str, str]] = []
        for rv in op.results:
            ts = (rv,) if isinstance(rv, Tensor) else rv
            got = []
            for t in ts:
                name, lay, e = self.result(op, t)
                got.append((name, lay))
                if e is not None:
                    after.append((e, name, t.name))
            if isinstance(rv, Tensor):
                outs.append(got[0][0])
                out_shapes.append(got[0][1].shape)
                out_attrs.append(got[0][1].attr)
            else:
                outs.append(tuple(n for n, _ in got))
                out_shapes.append(tuple(lay.shape for _, lay in got))
                out_attrs.append(tuple(lay.attr for _, lay in got))
        attrs = flat_slots((*in_attrs, *out_attrs), DistAttr)
        mesh = attrs[0].mesh
        for a in attrs:
            if a.mesh != mesh:
                raise LoweringError(
                    f"op {op.name!r} ({op.type}): its tensors are on different meshes after the "
                    "reshards; completion should have placed them on one mesh"
                )
        call = KernelCall(op.name, op.type, mesh, tuple(ins), tuple(outs), tuple(in_shapes),
                          tuple(in_attrs), tuple(out_shapes), tuple(out_attrs), op.attr_dict)
        self.calls[op.name] = call
        special = _SPECIAL.get(op.type)
        if special is None or not special(self, call):
            self.code.append(call)
        for e, src, dst in after:
            self.reshard(e, src, dst)


# ---- ops lowered without their kernel ---------------------------------------------------------
# Local steps are module-level callables (not closures) so that a program pickles for MPI ranks.
@dataclass(frozen=True, slots=True)
class _LocalMax:
    axis: int

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        return (np.max(b[0], axis=self.axis, keepdims=True),)


@dataclass(frozen=True, slots=True)
class _ExpSumPick:
    """Per block: the sum of exp(x - max) and the target's shifted logit if this block has it."""

    axis: int
    x: Layout

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        x, label, gmax = b
        shifted = x - gmax
        lo, hi = self.x.box(coord)[self.axis]
        lab = np.asarray(label).astype(np.int64)
        mine = (lab >= lo) & (lab < hi)
        picked = np.take_along_axis(shifted, np.where(mine, lab - lo, 0), axis=self.axis)
        return (np.sum(np.exp(shifted), axis=self.axis, keepdims=True),
                np.where(mine, picked, 0).astype(x.dtype))


@dataclass(frozen=True, slots=True)
class _SoftmaxLoss:
    ignore_index: int

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        x, label, gmax, gsum, pick = b
        loss = np.where(np.asarray(label) == self.ignore_index, 0, np.log(gsum) - pick)
        return np.exp(x - gmax) / gsum, loss.astype(x.dtype)


def all_reduce_chain(buffers: dict[str, Layout], code: list[Instruction], src: str, dst: str,
                     dims: Sequence[int], rt: str, label: str, op: str | None) -> None:
    """All-reduce ``src`` over ``dims`` into ``dst``, one mesh dim per step like a plan (an op's
    own reduction: no plan predicts its bytes)."""
    lay = buffers[src]
    cur, left = src, dict(lay.pending)
    for k, m in enumerate(dims):
        left.pop(m, None)
        nxt = dst if k == len(dims) - 1 else f"{dst}#{k}"
        buffers[nxt] = Layout(lay.shape, lay.dtype,
                              DistAttr._make(lay.mesh, lay.attr.multi_dims_mapping,
                                             tuple(sorted(left.items()))))
        code.append(Collective("all_reduce", m, cur, nxt, label, None, rt, op))
        cur = nxt


def class_axis(call: KernelCall) -> tuple[int, tuple[int, ...]]:
    """A cross entropy's class axis and the mesh dims (of size > 1) that split it."""
    x_attr = call.input_attrs[0]
    assert isinstance(x_attr, DistAttr)
    axis = int(call.attrs.get("axis", -1)) % len(call.input_shapes[0])
    return axis, tuple(m for m in x_attr.multi_dims_mapping[axis] if x_attr.mesh.shape[m] > 1)


def _lower_vocab_parallel_ce(lw: _Lowering, call: KernelCall) -> bool:
    """Cross entropy whose class axis is sharded: Megatron's vocab-parallel kernel.

    The rule keeps the class axis sharded and promises a complete loss, so the reduction over
    the shards happens inside the op: the global max, the sum of exponentials and the target
    logit each take one all-reduce over the class axis's mesh dims. Returns False (use the
    op's kernel) when the class axis is not split.
    """
    x_attr = call.input_attrs[0]
    assert isinstance(x_attr, DistAttr)
    x_shape = call.input_shapes[0]
    axis, class_dims = class_axis(call)
    if not class_dims:
        return False
    if call.attrs.get("soft_label") or not call.attrs.get("use_softmax", True):
        raise LoweringError(
            f"op {call.op!r} ({call.op_type}): the class axis is sharded but soft_label or "
            "use_softmax=False asks for a kernel that cannot reduce over the shards"
        )
    if x_attr.partial_items:
        raise LoweringError(f"op {call.op!r} ({call.op_type}): logits arrive partial; the rule "
                            "should have resharded them")
    x_name, label_name = call.inputs[0], call.inputs[1]
    assert isinstance(x_name, str) and isinstance(label_name, str)
    soft_out, loss_out = call.outputs[0], call.outputs[1]
    assert isinstance(soft_out, str) and isinstance(loss_out, str)
    x_lay = lw.buffers[x_name]
    stat_shape = tuple(1 if d == axis else n for d, n in enumerate(x_shape))
    stat_mdm = tuple(() if d == axis else ms for d, ms in enumerate(x_attr.multi_dims_mapping))
    mesh = x_attr.mesh

    def stat(rt: str) -> DistAttr:
        return DistAttr._make(mesh, stat_mdm, tuple(sorted((m, rt) for m in class_dims)))

    n = {k: f"{call.op}/{k}" for k in ("max_p", "max", "sum_p", "sum", "pick_p", "pick")}
    lw.buffers[n["max_p"]] = Layout(stat_shape, x_lay.dtype, stat("max"))
    lw.buffers[n["sum_p"]] = Layout(stat_shape, x_lay.dtype, stat("sum"))
    lw.buffers[n["pick_p"]] = Layout(stat_shape, x_lay.dtype, stat("sum"))
    label = f"{call.op} (vocab-parallel)"
    lw.code.append(LocalStep(call.op, mesh, _LocalMax(axis), (x_name,), (n["max_p"],)))
    all_reduce_chain(lw.buffers, lw.code, n["max_p"], n["max"], class_dims,
                     "max", label, call.op)
    lw.code.append(LocalStep(call.op, mesh, _ExpSumPick(axis, x_lay),
                             (x_name, label_name, n["max"]), (n["sum_p"], n["pick_p"])))
    all_reduce_chain(lw.buffers, lw.code, n["sum_p"], n["sum"], class_dims,
                     "sum", label, call.op)
    all_reduce_chain(lw.buffers, lw.code, n["pick_p"], n["pick"], class_dims,
                     "sum", label, call.op)
    lw.code.append(LocalStep(call.op, mesh, _SoftmaxLoss(int(call.attrs.get("ignore_index", -100))),
                             (x_name, label_name, n["max"], n["sum"], n["pick"]),
                             (soft_out, loss_out)))
    return True


_SPECIAL: Final[dict[str, Callable[[_Lowering, KernelCall], bool]]] = {
    "cross_entropy_with_softmax": _lower_vocab_parallel_ce,
    "softmax_with_cross_entropy": _lower_vocab_parallel_ce,
}


def lower(result: Completion) -> Program:
    """Lower a completed graph (``spmdrules.completion.complete``) into a :class:`Program`."""
    if not isinstance(result, Completion):
        raise LoweringError(
            f"lower: expected the Completion that complete(graph) returns, got "
            f"{type(result).__name__}"
        )
    return _Lowering(result).run()


__all__ = [
    "PRIMITIVES",
    "Collective",
    "EdgePlan",
    "Instruction",
    "KernelCall",
    "Layout",
    "LocalFn",
    "LocalStep",
    "LoweringError",
    "Program",
    "all_reduce_chain",
    "class_axis",
    "counterpart_transfer",
    "groups",
    "lower",
    "mesh_coords",
    "owners",
]
