"""Lowering: a completed graph becomes a program of local kernel calls and collective steps.

Every tensor's mesh and ``DistAttr`` is read as a Cartesian partition (:class:`Layout`): a mesh
dim that shards a tensor dim is a partition dim over it (several mesh dims co-sharding one tensor
dim split it in mixed radix, the first one major), a replicated mesh dim is a broadcast dim, and
a partial mesh dim is a pending reduction of its reduce type. Local blocks follow the runtime's
balanced decomposition, uneven sizes included.

The program (:class:`~spmdrules.execution.program.Program`, with its layouts and instructions) is a
list of instructions in topological order:

- :class:`KernelCall`: the op's local kernel (:mod:`spmdrules.execution.local`) on every process of the
  op's mesh, with the attributes the rule inferred for its operands and results;
- :class:`Collective`: one step of a planned reshard (:mod:`spmdrules.completion.reshard_plans`), run by the
  executor with the matching runtime primitive (see ``PRIMITIVES``);
- :class:`LocalStep`: numpy on each block with no kernel, for ops whose local computation needs
  collectives in the middle (the vocab-parallel cross entropy, lowered as Megatron does).

Every reshard edge of the completion becomes the steps of its plan, in order, between buffers
named after the edge, so an executor's byte count per edge can be compared with the plan's.
Both executors (:mod:`spmdrules.execution.simulated`, :mod:`spmdrules.execution.mpi`) run the same
program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from spmdrules.completion.driver import Completion
from spmdrules.completion.reshard_plans import Step
from spmdrules.completion.result import ReshardEdge
from spmdrules.core.attr import DistAttr
from spmdrules.core.progress import progress
from spmdrules.core.spec import flat_slots
from spmdrules.core.tables import OpTable, caller
from spmdrules.execution import halo
from spmdrules.execution.program import (
    Array,
    Collective,
    Coord,
    EdgePlan,
    HaloStep,
    Instruction,
    KernelCall,
    Layout,
    LocalStep,
    LoweringError,
    Program,
    SlabLayout,
    Slot,
    mesh_coords,
    same_storage,
)
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, Tensor
from spmdrules.graph.storage import Interleaved


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
        # every consumer of a shared reshard finds its edge (``ReshardEdge.shared``)
        self.by_edge: dict[tuple[str, str, str, int], ReshardEdge] = {
            (e.tensor, op, e.side, slot): e for e in result.reshards for op, slot in e.consumers
        }
        #: the buffer each operand reshard wrote, by its edge's (tensor, op, slot)
        self.resharded: dict[tuple[str, str, int], str] = {}
        #: buffers held in another order than the user's: the tensors' (``Tensor.storage``),
        #: and every buffer holding one of them in another layout
        self.storage: dict[str, Interleaved] = {
            t.name: t.storage for t in self.g.tensors if t.storage is not None}

    def layout(self, t: Tensor, attr: DistAttr | None = None) -> Layout:
        return Layout(t.shape, t.dtype, self.r.attr(t) if attr is None else attr)

    def reshard(self, e: ReshardEdge, src: str, dst: str) -> None:
        plan = e.plan(self.r.cost)
        label = f"{e.tensor} {'->' if e.side == 'operand' else '<-'} {e.op}"
        if any(p.label == label for p in self.edges):  # one tensor in two slots: two edges
            label += f" (slot {e.slot})"
        self.edges.append(EdgePlan(label, e, plan, src, dst))
        cur = src
        for k, step in enumerate(plan.steps):
            nxt = dst if k == len(plan.steps) - 1 else f"{dst}#{k}"
            self.buffers[nxt] = Layout(e.shape, e.dtype, step.dst)
            same_storage(self.storage, nxt, src)
            self.code.append(Collective(step.kind, step.mesh_dim, cur, nxt, label,
                                        step.total_bytes, _step_reduce_type(step)))
            cur = nxt

    def operand(self, op: Op, t: Tensor, slot: int) -> tuple[str, Layout]:
        """The buffer operand ``slot`` of ``op`` reads: the tensor's own, or its reshard's, which
        every consumer needing that layout shares: the edge's first consumer (the first op to
        read it) runs the reshard, once."""
        e = self.by_edge.get((t.name, op.name, "operand", slot))
        if e is None:
            return t.name, self.buffers[t.name]
        key = (e.tensor, e.op, e.slot)
        name = self.resharded.get(key)
        if name is None:
            name = f"{t.name}@{e.op}"
            if name in self.buffers:  # the op's other slot took the tensor in another layout
                name += f"#{e.slot}"
            self.resharded[key] = name
            self.buffers[name] = Layout(t.shape, t.dtype, e.dst)
            same_storage(self.storage, name, t.name)
            self.reshard(e, t.name, name)
        return name, self.buffers[name]

    def result(self, op: Op, t: Tensor, slot: int) -> tuple[str, Layout, ReshardEdge | None]:
        e = self.by_edge.get((t.name, op.name, "result", slot))
        if e is None:
            return t.name, self.buffers[t.name], None
        name = f"{t.name}<-{op.name}"
        self.buffers[name] = Layout(t.shape, t.dtype, e.src)
        same_storage(self.storage, name, t.name)
        return name, self.buffers[name], e

    def run(self) -> Program:
        for t in self.g.tensors:
            if self.r.attr(t) is None:
                raise LoweringError(f"tensor {t.name!r} has no attribute; complete the graph first")
            self.buffers[t.name] = self.layout(t)
        for op in progress(self.g.ops, "lower", total=len(self.g.ops)):
            self.lower_op(op)
        feeds = tuple(t.name for t in self.g.tensors if t.producer is None)
        return Program(self.g.name, self.buffers, self.code, feeds,
                       tuple(t.name for t in self.g.tensors), self.edges, self.calls,
                       storage=self.storage)

    def lower_op(self, op: Op) -> None:
        ins, in_shapes, in_attrs = self._operands(op)
        outs, out_shapes, out_attrs, after = self._results(op)
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
        special = LOWERINGS.lookup(op.type)
        if special is None and op.type in halo.HALO_OPS:
            special = _lower_halo
        if special is None or not special(self, call):
            self.code.append(call)
        for e, src, dst in after:
            self.reshard(e, src, dst)

    def _operands(self, op: Op) -> tuple[list[Slot], list[Any], list[Any]]:
        """The buffer names, local shapes and attributes the kernel reads, per operand slot
        (an operand list as a tuple, an absent operand as None)."""
        ins: list[Slot] = []
        shapes: list[Any] = []
        attrs: list[Any] = []
        slot = 0  # the position among op.inputs (flattened, absent ones skipped), as completion
        for v in op.operands:
            if v is None:
                ins.append(None)
                shapes.append(None)
                attrs.append(None)
            elif isinstance(v, Tensor):
                name, lay = self.operand(op, v, slot)
                slot += 1
                ins.append(name)
                shapes.append(lay.shape)
                attrs.append(lay.attr)
            else:
                pairs = [self.operand(op, t, slot + j) for j, t in enumerate(v)]
                slot += len(v)
                ins.append(tuple(n for n, _ in pairs))
                shapes.append(tuple(lay.shape for _, lay in pairs))
                attrs.append(tuple(lay.attr for _, lay in pairs))
        return ins, shapes, attrs

    def _results(self, op: Op) -> tuple[list[Slot], list[Any], list[Any],
                                        list[tuple[ReshardEdge, str, str]]]:
        """As ``_operands`` for the results, with the reshards to run after the kernel."""
        outs: list[Slot] = []
        shapes: list[Any] = []
        attrs: list[Any] = []
        after: list[tuple[ReshardEdge, str, str]] = []
        slot = 0
        for rv in op.results:
            ts = (rv,) if isinstance(rv, Tensor) else rv
            got = []
            for t in ts:
                name, lay, e = self.result(op, t, slot)
                slot += 1
                got.append((name, lay))
                if e is not None:
                    after.append((e, name, t.name))
            if isinstance(rv, Tensor):
                outs.append(got[0][0])
                shapes.append(got[0][1].shape)
                attrs.append(got[0][1].attr)
            else:
                outs.append(tuple(n for n, _ in got))
                shapes.append(tuple(lay.shape for _, lay in got))
                attrs.append(tuple(lay.attr for _, lay in got))
        return outs, shapes, attrs, after


# ---- ops lowered without their kernel ---------------------------------------------------------
# Local steps are module-level callables (not closures) so that a program pickles for MPI ranks.
@dataclass(frozen=True, slots=True)
class _LocalMax:
    axis: int

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        # an uneven split may leave a block no classes: -inf, the max's identity
        return (np.max(b[0], axis=self.axis, keepdims=True, initial=-np.inf),)


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
        if shifted.shape[self.axis] == 0:  # an uneven split left this block no classes
            picked = np.zeros(lab.shape, dtype=x.dtype)
        else:
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


@dataclass(frozen=True, slots=True)
class _MultiLabelLoss:
    """softmax and each label's weighted loss from the reduced row statistics (summed over the
    labels when ``sum_labels``)."""

    ignore_index: int
    sum_labels: bool

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        x, label, weight, gmax, gsum, pick = b
        loss = np.where(np.asarray(label) == self.ignore_index, 0.0,
                        (np.log(gsum) - pick) * weight)
        if self.sum_labels:
            loss = np.sum(loss, axis=-1, keepdims=True)
        return np.exp(x - gmax) / gsum, loss.astype(x.dtype)


def _lower_vocab_parallel_multi_label(lw: _Lowering, call: KernelCall) -> bool:
    """c_softmax_with_multi_label_cross_entropy with its classes sharded: as
    :func:`_lower_vocab_parallel_ce`, the target logits gathered per label (label's layout)."""
    x_attr, label_attr = call.input_attrs[0], call.input_attrs[1]
    assert isinstance(x_attr, DistAttr) and isinstance(label_attr, DistAttr)
    axis, class_dims = class_axis(call)
    if not class_dims:
        return False
    if any(a.partial_items for a in call.input_attrs if isinstance(a, DistAttr)):
        raise LoweringError(f"op {call.op!r} ({call.op_type}): an input arrives partial; the "
                            "rule should have resharded it")
    x_name, label_name, w_name = call.inputs[0], call.inputs[1], call.inputs[2]
    soft_out, loss_out = call.outputs[0], call.outputs[1]
    assert isinstance(x_name, str) and isinstance(label_name, str) and isinstance(w_name, str)
    assert isinstance(soft_out, str) and isinstance(loss_out, str)
    x_lay = lw.buffers[x_name]
    mesh = x_attr.mesh
    stat_shape = tuple(1 if d == axis else n for d, n in enumerate(x_lay.shape))
    stat_mdm = tuple(() if d == axis else ms for d, ms in enumerate(x_attr.multi_dims_mapping))

    def partial(mdm: Any, rt: str) -> DistAttr:
        return DistAttr._make(mesh, mdm, tuple(sorted((m, rt) for m in class_dims)))

    n = {k: f"{call.op}/{k}" for k in ("max_p", "max", "sum_p", "sum", "pick_p", "pick")}
    lw.buffers[n["max_p"]] = Layout(stat_shape, x_lay.dtype, partial(stat_mdm, "max"))
    lw.buffers[n["sum_p"]] = Layout(stat_shape, x_lay.dtype, partial(stat_mdm, "sum"))
    lw.buffers[n["pick_p"]] = Layout(lw.buffers[label_name].shape, x_lay.dtype,
                                     partial(label_attr.multi_dims_mapping, "sum"))
    label = f"{call.op} (vocab-parallel)"
    lw.code.append(LocalStep(call.op, mesh, _LocalMax(axis), (x_name,), (n["max_p"],)))
    all_reduce_chain(lw.buffers, lw.code, n["max_p"], n["max"], class_dims, "max", label, call.op)
    lw.code.append(LocalStep(call.op, mesh, _ExpSumPick(axis, x_lay),
                             (x_name, label_name, n["max"]), (n["sum_p"], n["pick_p"])))
    for k in ("sum", "pick"):
        all_reduce_chain(lw.buffers, lw.code, n[f"{k}_p"], n[k], class_dims, "sum", label,
                         call.op)
    fn = _MultiLabelLoss(int(call.attrs.get("ignore_index", -100)),
                         bool(call.attrs.get("sum_multi_label_loss", True)))
    lw.code.append(LocalStep(call.op, mesh, fn, (x_name, label_name, w_name, n["max"], n["sum"],
                                                 n["pick"]), (soft_out, loss_out)))
    return True


def _lower_halo(lw: _Lowering, call: KernelCall) -> bool:
    """A windowed op over a spatially sharded input: a HaloStep extends every block to the box
    its output block's windows read, then the kernel runs on the slabs."""
    src = call.inputs[0]
    assert isinstance(src, str)
    out_attr = call.output_attrs[0]
    boxes = []
    for coord in mesh_coords(call.mesh).values():
        box = halo.needed_box(call.op_type, call.attrs, call.input_shapes, call.input_attrs,
                              call.output_shapes[0], out_attr, coord)
        if box is not None:
            boxes.append((coord, box))
    if not boxes:
        return False
    lay = lw.buffers[src]
    dst = f"{src}#halo@{call.op}"
    slab = SlabLayout(lay.shape, lay.dtype, lay.attr, tuple(boxes))
    lw.buffers[dst] = slab
    same_storage(lw.storage, dst, src)
    x_attr = lay.attr
    sp = set(halo.spatial_dims(lay.shape, call.attrs))
    mesh_dims = tuple(sorted({m for d in sp for m in x_attr.multi_dims_mapping[d]}))
    lw.code.append(HaloStep(call.op, call.mesh, src, dst, f"halo {src} -> {call.op}", mesh_dims,
                            halo.predicted_bytes(lay, slab, mesh_dims)))
    new = dataclasses.replace(call, inputs=(dst, *call.inputs[1:]),
                              attrs={**call.attrs, halo.HALO: True})
    lw.calls[call.op] = new
    lw.code.append(new)
    return True


#: the public name of the lowering in progress, which a lowering hook receives
Lowering = _Lowering
#: ``hook(lowering, call)``: emit the op's own steps instead of its kernel call and return True,
#: or return False to run the kernel (the vocab-parallel cross entropy: only with classes split)
LoweringHook = Callable[[Lowering, KernelCall], bool]
#: op name -> its lowering hook; an op without one runs as one kernel call (a windowed op of
#: ``halo.HALO_OPS`` with a halo exchange first, where its input is spatially split)
LOWERINGS: Final[OpTable[LoweringHook]] = OpTable("lowering hook")


def register_lowering(names: Sequence[str], hook: LoweringHook, *,
                      origin: str | None = None) -> None:
    """Lower each op of ``names`` with ``hook``; its reverse (``adjoint.register_reverse``)
    undoes the steps it emits."""
    LOWERINGS.add_all(names, hook, origin if origin is not None else caller(1))


register_lowering(("cross_entropy_with_softmax", "softmax_with_cross_entropy",
                   "c_softmax_with_cross_entropy"), _lower_vocab_parallel_ce)
register_lowering(("c_softmax_with_multi_label_cross_entropy",), _lower_vocab_parallel_multi_label)


def lower(result: Completion) -> Program:
    """Lower a completed graph (``spmdrules.completion.complete``) into a :class:`Program`."""
    if not isinstance(result, Completion):
        raise LoweringError(
            f"lower: expected the Completion that complete(graph) returns, got "
            f"{type(result).__name__}"
        )
    return _Lowering(result).run()


__all__ = ["all_reduce_chain", "class_axis", "lower"]
