"""Reverse mode: the gradient program of a lowered program.

:func:`gradient_program` appends to a :class:`~spmdrules.execution.lowering.Program` the instructions that
compute, on the same processes and from the blocks the forward run left behind, the gradient of
the seeded outputs with respect to the requested tensors. Both executors run the result
unchanged.

Every instruction is replaced, in reverse order, by its exact adjoint on the blocks (DistDL's
view: each primitive has a forward and an adjoint):

============================  ===================================================================
forward                       adjoint
============================  ===================================================================
kernel call                   the op's VJP (:mod:`spmdrules.execution.local`) on the same blocks
all-reduce (sum / avg)        all-reduce (sum / avg) of the cotangents
reduce-scatter                all-gather (then / n for an avg)
all-gather                    reduce-scatter (sum)
all-to-all S(i) -> S(j)       all-to-all S(j) -> S(i)
slice R -> S                  local: the block written into zeros (S -> P)
zero-partial R -> P           the same step (one replica keeps the cotangent)
transfer between meshes       the pieces returned to their owners, which add them up
vocab-parallel cross entropy  its own lowering: two all-reduces over the class shards
============================  ===================================================================

A cotangent block is the derivative with respect to the rank's own block, so its layout is the
*dual* of the tensor's (:func:`dual_attr`): shards stay shards, a mesh dim the tensor is
replicated over becomes a pending sum (each replica's use contributes a piece), and a pending sum
becomes replicated. Contributions from several consumers are added locally. With
``reduce_grads`` (the default) each requested gradient is then all-reduced over its pending mesh
dims, so it ends with the tensor's own layout, as data-parallel training reduces gradients.

Each planned reshard's adjoint moves the bytes its plan predicts, so the gradient program's byte
count is checked against the plans like the forward's (edges labelled ``grad[...]``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError, UnsupportedError
from spmdrules.core.spec import flat_slots
from spmdrules.core.tables import OpTable, caller
from spmdrules.execution.lowering import all_reduce_chain, class_axis
from spmdrules.execution.program import (
    Collective,
    EdgePlan,
    HaloStep,
    Instruction,
    KernelCall,
    Layout,
    LocalStep,
    Program,
    SlabLayout,
    Slot,
    counterpart_transfer,
    same_storage,
)
from spmdrules.execution.vjp.cross_entropy import one_hot
from spmdrules.execution.vocab_parallel_reverse import multi_label_reverse
from spmdrules.graph.shapes.shape_rule import INTEGRAL_DTYPES
from spmdrules.runtime.decomposition import relative

Array = NDArray[Any]
Coord = tuple[int, ...]

SEED: Final = "seed:"
GRAD: Final = "grad:"


class GradientError(SpmdError, ValueError):
    """A gradient request that cannot be met: an unknown or non-float tensor, nothing seeded."""


def dual_attr(attr: DistAttr) -> DistAttr:
    """The layout of a cotangent of a tensor laid out as ``attr``.

    Shards stay; a mesh dim that neither shards nor reduces becomes a pending sum; a pending sum
    or avg becomes replicated. (An avg's cotangent blocks hold the cotangent divided by the mesh
    dim's size: the derivative with respect to each block.)"""
    for m, rt in attr.partial_items:
        if rt not in ("sum", "avg"):
            raise UnsupportedError(
                f"reverse mode through a pending {rt} (mesh dim {m}) is not supported: its "
                "derivative picks one block's entries; reduce it before the op that needs it"
            )
    used = attr.sharded_mesh_dims | attr.partial_dims
    pending = tuple((m, "sum") for m in range(attr.mesh.ndim) if m not in used)
    return DistAttr._make(attr.mesh, attr.multi_dims_mapping, pending)


# ---- local steps (module-level callables, so a program pickles for MPI ranks) ----------------
@dataclass(frozen=True, slots=True)
class _Sum:
    """Add the contributions to one cotangent."""

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        out = np.array(b[0], copy=True)
        for other in b[1:]:
            out += other
        return (out,)


@dataclass(frozen=True, slots=True)
class _Scale:
    factor: float

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        return (np.asarray(b[0] * self.factor).astype(b[0].dtype),)


@dataclass(frozen=True, slots=True)
class _Unslice:
    """The adjoint of a local slice: the slice's cotangent written into zeros of the block."""

    whole: Layout
    part: Layout

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        out = np.zeros(self.whole.local_shape(coord), dtype=b[0].dtype)
        out[relative(self.part.box(coord), self.whole.box(coord))] = b[0]
        return (out,)


@dataclass(frozen=True, slots=True)
class _Zeros:
    layout: Layout
    dtype: str

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        return (np.zeros(self.layout.local_shape(coord), dtype=self.dtype),)


@dataclass(frozen=True, slots=True)
class _SoftDot:
    """Per row, this rank's part of sum(softmax cotangent * softmax) over the classes."""

    axis: int

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        prob, g = b
        return (np.sum(g * prob, axis=self.axis, keepdims=True),)


@dataclass(frozen=True, slots=True)
class _VocabParallelGrad:
    """d(logits) of the vocab-parallel cross entropy on this rank's classes: the softmax's
    cotangent through the softmax, plus (softmax - one-hot) times the loss cotangent."""

    axis: int
    x: Layout
    ignore_index: int
    with_softmax_ct: bool
    with_loss_ct: bool

    def __call__(self, coord: Coord, b: Sequence[Array]) -> tuple[Array, ...]:
        prob, label, *rest = b
        dx = np.zeros_like(prob)
        if self.with_softmax_ct:
            g, dot = rest[0], rest[1]
            rest = rest[2:]
            dx += prob * (g - dot)
        if self.with_loss_ct:
            g_loss = rest[0]
            lo, hi = self.x.box(coord)[self.axis]
            hot = one_hot(label, self.axis, prob.shape, self.ignore_index, range(lo, hi))
            dx += (prob - hot) * np.where(np.asarray(label) == self.ignore_index, 0.0, g_loss)
        return (dx,)


# ---- the builder ----------------------------------------------------------------------------
class _Reverse:
    def __init__(self, program: Program, wrt: Sequence[str]) -> None:
        self.p = program
        self.buffers = dict(program.buffers)
        self.code: list[Instruction] = list(program.instructions)
        self.edges = list(program.edges)
        self.plans = {e.label: e for e in program.edges}
        self.feeds = list(program.feeds)
        #: a cotangent is held in its buffer's order (``Program.storage``)
        self.storage = dict(program.storage)
        self.parts: dict[str, list[str]] = {}
        self.final: dict[str, str | None] = {}
        self.live = self._depends_on(wrt)
        self.done_ops: set[str] = set()
        self.done_edges: set[str] = set()

    def _depends_on(self, wrt: Iterable[str]) -> set[str]:
        """Float buffers whose value depends on a requested tensor: only they need cotangents."""
        live = set(wrt)
        for ins in self.p.instructions:
            if isinstance(ins, KernelCall):
                srcs = flat_slots(ins.inputs, str)
                dsts = flat_slots(ins.outputs, str)
            elif isinstance(ins, LocalStep):
                srcs, dsts = list(ins.inputs), list(ins.outputs)
            else:
                srcs, dsts = [ins.src], [ins.dst]
            if any(n in live for n in srcs):
                live.update(n for n in dsts if self._float(n))
        return live

    def _float(self, name: str) -> bool:
        return self.buffers[name].dtype not in INTEGRAL_DTYPES

    # -- cotangent bookkeeping --
    def contribute(self, buf: str) -> str:
        parts = self.parts.setdefault(buf, [])
        name = f"{GRAD}{buf}#{len(parts)}"
        parts.append(name)
        same_storage(self.storage, name, buf)
        lay = self.buffers[buf]
        # a halo-extended slab's cotangent has the slab's boxes
        self.buffers[name] = (dataclasses.replace(lay, attr=dual_attr(lay.attr))
                              if isinstance(lay, SlabLayout)
                              else Layout(lay.shape, lay.dtype, dual_attr(lay.attr)))
        return name

    def cot(self, buf: str) -> str | None:
        """The cotangent of ``buf``, once every consumer has contributed (None: zero)."""
        if buf in self.final:
            return self.final[buf]
        parts = self.parts.pop(buf, [])
        name: str | None = None
        if len(parts) == 1:
            name = parts[0]
        elif parts:
            name = f"{GRAD}{buf}#sum"
            self.buffers[name] = self.buffers[parts[0]]
            same_storage(self.storage, name, buf)
            self.code.append(LocalStep(name, self.buffers[buf].mesh, _Sum(), tuple(parts),
                                       (name,)))
        self.final[buf] = name
        return name

    def slot_cot(self, slot: Slot) -> Slot:
        if slot is None:
            return None
        if isinstance(slot, str):
            return self.cot(slot)
        return tuple(self.cot(n) if n is not None else None for n in slot)

    def slot_contribution(self, slot: Slot) -> Slot:
        if slot is None:
            return None
        if isinstance(slot, str):
            return self.contribute(slot) if slot in self.live else None
        return tuple(self.contribute(n) if n is not None and n in self.live else None
                     for n in slot)

    # -- seeds --
    def seed(self, t: str) -> str:
        lay = self.buffers[t]
        name = f"{SEED}{t}"
        self.buffers[name] = Layout(lay.shape, lay.dtype, dual_attr(lay.attr))
        same_storage(self.storage, name, t)
        self.feeds.append(name)
        avg = [lay.mesh.shape[m] for m, rt in lay.attr.partial_items if rt == "avg"]
        if avg:
            # the derivative of an avg with respect to each block is 1/n of the cotangent
            target = self.contribute(t)
            self.code.append(LocalStep(name, lay.mesh, _Scale(1.0 / math.prod(avg)), (name,),
                                       (target,)))
        else:
            self.parts.setdefault(t, []).append(name)
        return name

    # -- instructions, in reverse --
    def run(self) -> None:
        for ins in reversed(self.p.instructions):
            if isinstance(ins, KernelCall):
                self.kernel(ins)
            elif isinstance(ins, HaloStep):
                self.halo_step(ins)
            elif ins.op is None:
                self.reshard_step(ins)
            elif ins.op not in self.done_ops:  # a local step or reduction of an op's lowering
                self.done_ops.add(ins.op)
                self.own_lowering(self.p.calls[ins.op])

    def kernel(self, call: KernelCall) -> None:
        cts = tuple(self.slot_cot(s) for s in call.outputs)
        if not flat_slots(cts, str):
            return
        grads = tuple(self.slot_contribution(s) for s in call.inputs)
        if not flat_slots(grads, str):
            return
        self.code.append(KernelCall(
            call.op, call.op_type, call.mesh, (*call.inputs, *call.outputs, *cts), grads,
            call.input_shapes, call.input_attrs, call.output_shapes, call.output_attrs,
            call.attrs, mode="vjp"))

    def halo_step(self, step: HaloStep) -> None:
        """The halo's cotangent returned to the owners of the pieces, which add it up."""
        ct = self.cot(step.dst)
        if ct is None or step.src not in self.live:
            return
        target = self.contribute(step.src)
        self.code.append(dataclasses.replace(step, src=ct, dst=target, edge=f"grad[{step.edge}]",
                                             adjoint=True))

    def reshard_step(self, step: Collective) -> None:
        ct = self.cot(step.dst)
        if ct is None or step.src not in self.live:
            return
        target = self.contribute(step.src)
        label = f"grad[{step.edge}]"
        if step.edge in self.plans and step.edge not in self.done_edges:
            self.done_edges.add(step.edge)
            fwd = self.plans[step.edge]
            self.edges.append(EdgePlan(label, fwd.edge, fwd.plan, f"{GRAD}{fwd.dst}",
                                       f"{GRAD}{fwd.src}"))
        m, rt, kind = step.mesh_dim, step.reduce_type or "sum", step.kind
        mesh = self.buffers[step.src].mesh

        def emit(kind_: Any, dst: str, rt_: str | None, adjoint: bool = False) -> None:
            self.code.append(Collective(kind_, m, ct, dst, label, step.predicted_bytes, rt_,
                                        adjoint=adjoint))

        if kind == "all_reduce":
            if rt not in ("sum", "avg"):
                raise UnsupportedError(f"reverse mode through the {rt} all-reduce of {step.edge} "
                                       "is not supported")
            emit("all_reduce", target, rt)
        elif kind == "reduce_scatter":
            if rt == "avg":
                assert m is not None
                gathered = f"{target}/gathered"
                self.buffers[gathered] = self.buffers[target]
                emit("all_gather", gathered, None)
                self.code.append(LocalStep(label, mesh, _Scale(1.0 / mesh.shape[m]), (gathered,),
                                           (target,)))
            elif rt == "sum":
                emit("all_gather", target, None)
            else:
                raise UnsupportedError(f"reverse mode through the {rt} reduce-scatter of "
                                       f"{step.edge} is not supported")
        elif kind == "all_gather":
            emit("reduce_scatter", target, "sum")
        elif kind == "all_to_all":
            emit("all_to_all", target, None)
        elif kind == "slice":
            self.code.append(LocalStep(label, mesh, _Unslice(self.buffers[step.src],
                                                             self.buffers[step.dst]),
                                       (ct,), (target,)))
        elif kind == "zero_partial":
            # product: the other replicas held constants (zero derivative), like a sum's zeros;
            # avg/max/min: every replica kept the value, so every one passes its cotangent on
            emit("zero_partial", target, "sum" if rt in ("sum", "product") else "avg")
        else:  # p2p
            # counterparts send back what they received; otherwise every receiver returns its
            # pieces to their owners, which add them up (the replicas of the destination each
            # hold a piece of the sum)
            counterparts = counterpart_transfer(self.p.buffers[step.src],
                                                self.p.buffers[step.dst])
            emit("p2p", target, None, adjoint=not counterparts)

    def own_lowering(self, call: KernelCall) -> None:
        """Ops the lowering ran without their kernel (``lowering.LOWERINGS``): their reverse
        hook (``REVERSE_LOWERINGS``) undoes the steps the lowering emitted."""
        hook = REVERSE_LOWERINGS.lookup(call.op_type)
        if hook is None:
            raise UnsupportedError(f"op {call.op!r} ({call.op_type}): no reverse mode for its "
                                   "lowering; register one with adjoint.register_reverse")
        hook(self, call)

    def vocab_parallel_ce(self, call: KernelCall) -> None:
        """The reverse of the vocab-parallel cross entropy's lowering."""
        x_name, label_name = call.inputs[0], call.inputs[1]
        prob, loss = call.outputs[0], call.outputs[1]
        assert isinstance(x_name, str) and isinstance(label_name, str)
        assert isinstance(prob, str) and isinstance(loss, str)
        g_prob, g_loss = self.cot(prob), self.cot(loss)
        if (g_prob is None and g_loss is None) or x_name not in self.live:
            return
        axis, class_dims = class_axis(call)
        x_lay = self.buffers[x_name]
        mesh = x_lay.mesh
        label = f"{call.op} (vocab-parallel, reverse)"
        ins: list[str] = [prob, label_name]
        if g_prob is not None:
            dot_p, dot = f"{GRAD}{call.op}/dot_p", f"{GRAD}{call.op}/dot"
            g_lay = self.buffers[g_prob]
            stat_shape = tuple(1 if d == axis else n for d, n in enumerate(x_lay.shape))
            stat_mdm = tuple(() if d == axis else ms
                             for d, ms in enumerate(g_lay.attr.multi_dims_mapping))
            pending = dict(g_lay.attr.partial_items) | {m: "sum" for m in class_dims}
            self.buffers[dot_p] = Layout(stat_shape, x_lay.dtype, DistAttr._make(
                mesh, stat_mdm, tuple(sorted(pending.items()))))
            self.code.append(LocalStep(label, mesh, _SoftDot(axis), (prob, g_prob), (dot_p,)))
            all_reduce_chain(self.buffers, self.code, dot_p, dot, class_dims, "sum", label,
                             label)
            ins += [g_prob, dot]
        if g_loss is not None:
            whole = f"{GRAD}{call.op}/loss"
            all_reduce_chain(self.buffers, self.code, g_loss, whole, class_dims, "sum", label,
                             label)
            ins.append(whole)
        fn = _VocabParallelGrad(axis, x_lay, int(call.attrs.get("ignore_index", -100)),
                                g_prob is not None, g_loss is not None)
        self.code.append(LocalStep(label, mesh, fn, tuple(ins), (self.contribute(x_name),)))

    # -- results --
    def gradient(self, t: str, reduce: bool) -> str:
        lay = self.buffers[t]
        if any(rt == "avg" for _, rt in lay.attr.partial_items):
            raise UnsupportedError(
                f"the gradient of {t!r}, a pending avg, has no layout of its own; ask for the "
                "gradient of the tensor it reduces to"
            )
        g = self.cot(t)
        out = f"{GRAD}{t}"
        same_storage(self.storage, out, t)
        if g is None:  # nothing seeded depends on t: zeros, already in the final layout
            dual = dual_attr(lay.attr)
            final = DistAttr._make(lay.mesh, dual.multi_dims_mapping, ()) if reduce else dual
            self.buffers[out] = Layout(lay.shape, lay.dtype, final)
            self.code.append(LocalStep(out, lay.mesh, _Zeros(self.buffers[out], lay.dtype), (),
                                       (out,)))
            return out
        dims = [m for m, _ in self.buffers[g].attr.partial_items]
        if not reduce or not dims:
            return g
        all_reduce_chain(self.buffers, self.code, g, out, dims, "sum",
                         f"gradient of {t} (all-reduce)", out)
        return out


#: ``reverse(adjoint, call)``: the reverse of an op's lowering hook (``lowering.LOWERINGS``),
#: adding the cotangents of the call's inputs from those of its outputs
ReverseHook = Callable[[_Reverse, KernelCall], None]
#: op name -> the reverse of its lowering hook
REVERSE_LOWERINGS: Final[OpTable[ReverseHook]] = OpTable("reverse lowering hook")


def register_reverse(names: Sequence[str], hook: ReverseHook, *,
                     origin: str | None = None) -> None:
    """Undo the lowering hook of each op of ``names`` with ``hook`` in reverse mode."""
    REVERSE_LOWERINGS.add_all(names, hook, origin if origin is not None else caller(1))


register_reverse(("cross_entropy_with_softmax", "softmax_with_cross_entropy",
                  "c_softmax_with_cross_entropy"), _Reverse.vocab_parallel_ce)
register_reverse(("c_softmax_with_multi_label_cross_entropy",),
                 lambda rev, call: multi_label_reverse(rev, call, GRAD))


def gradient_program(program: Program, outputs: Sequence[str], wrt: Sequence[str] | None = None,
                     *, reduce_grads: bool = True) -> Program:
    """The program that runs ``program`` and then its reverse mode.

    ``outputs`` are the tensors whose cotangents the caller feeds, as ``seed:<name>`` (same
    shape; for a scalar loss, ``1.0``); the result's ``seeds`` maps each to its feed name.
    ``wrt`` are the tensors to differentiate with respect to (default: every float source
    tensor); the result's ``grads`` maps each to the buffer holding its gradient, which
    :meth:`SimResult.fetch <spmdrules.execution.simulated.SimResult.fetch>` or
    :meth:`MPIExecutor.fetch <spmdrules.execution.mpi.MPIExecutor.fetch>` brings back whole,
    in the user's order: a seed or gradient of a tensor held in another order (a chunk-aware
    plan's interleaved weight) carries that tensor's ``storage``.
    With ``reduce_grads`` every gradient ends in its tensor's layout (all-reduced over the mesh
    dims where the tensor is replicated); without, it stays a pending sum there.
    """
    known = set(program.tensors)
    if program.seeds or program.grads:
        raise GradientError(f"gradient_program: {program.name!r} is already a gradient program; "
                            "differentiate the forward program (higher orders are not supported)")
    if not outputs:
        raise GradientError("gradient_program: name at least one output to seed")
    if wrt is None:
        wrt = [n for n in program.feeds
               if program.buffers[n].dtype not in INTEGRAL_DTYPES]
    for role, names in (("output", outputs), ("wrt", wrt)):
        for n in names:
            if n not in known:
                raise GradientError(f"gradient_program: {role} {n!r} is not a tensor of program "
                                    f"{program.name!r}")
            if program.buffers[n].dtype in INTEGRAL_DTYPES:
                raise GradientError(f"gradient_program: {role} {n!r} holds "
                                    f"{program.buffers[n].dtype}; only float tensors have "
                                    "gradients")
    rev = _Reverse(program, wrt)
    seeds = {t: rev.seed(t) for t in outputs}
    rev.run()
    grads = {t: rev.gradient(t, reduce_grads) for t in wrt}
    return Program(f"{program.name} (gradient)", rev.buffers, rev.code, tuple(rev.feeds),
                   program.tensors, rev.edges, dict(program.calls), seeds, grads, rev.storage)


__all__ = ["GRAD", "REVERSE_LOWERINGS", "SEED", "GradientError", "ReverseHook", "dual_attr",
           "gradient_program", "register_reverse"]
