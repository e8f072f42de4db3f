"""One op on the simulated mesh under an answer's attributes: how an answer is proven by execution.

An answer (a rule's ``SpmdInfo``, or Paddle's recorded one) gives every tensor argument of an op
call an attribute. :func:`answer_slots` checks that it gives one of the right rank to every
argument (else the answer is *malformed*: it cannot even be lowered). :func:`execute` then scatters
random global values by the input attributes (a partial becomes pieces that reduce back to the
value), runs the op's local kernel on every mesh coordinate, gathers each output by its output
attribute (replicas must agree; every block must have the shape the attribute gives it, else the
answer is *malformed*: the kernel computes other blocks than it claims) and compares with the
serial kernel (one process, everything replicated).

``spmdrules.verify`` runs the rules' answers on random cases, ``spmdrules.conformance.execution``
Paddle's answers and ours on Paddle's recorded cases; both through this module.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

import numpy as np

from spmdrules.core.attr import DistAttr
from spmdrules.core.dtypes import is_bfloat16, is_inexact
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.shards import Array, ShardMismatch, ShardShapeMismatch, gather, scatter
from spmdrules.core.spec import AttrSlot, SpmdInfo, TensorSpec
from spmdrules.core.tables import OpTable, caller
from spmdrules.engine.registry import TensorParam
from spmdrules.execution import halo
from spmdrules.execution.domains import Arg, Values
from spmdrules.execution.kernels.cross_entropy import (
    c_softmax_cross_entropy,
    cross_entropy,
    multi_label_cross_entropy,
)
from spmdrules.execution.local import Kernel, LocalContext, LocalValue

Rng = np.random.Generator
#: an answered attribute per tensor argument: one, None for an absent optional, a tuple for a list
Slot = DistAttr | None | tuple[DistAttr, ...]
#: comparison tolerance for floating results (float64 inputs; partial pieces add rounding)
RTOL: Final = 1e-7
ATOL: Final = 1e-9
Status = Literal["ok", "malformed", "wrong", "error", "nondeterministic"]


class OpCall(Protocol):
    """What runs: the op whose kernel runs, its mesh, its tensor arguments and outputs (global
    shapes; absent optionals None, lists tuples) and its attributes by Paddle name."""

    @property
    def op(self) -> str: ...
    @property
    def mesh(self) -> ProcessMesh: ...
    @property
    def inputs(self) -> tuple[Arg, ...]: ...
    @property
    def outputs(self) -> tuple[Arg, ...]: ...
    @property
    def attrs(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class OpRun:
    """An :class:`OpCall` and nothing more."""

    op: str
    mesh: ProcessMesh
    inputs: tuple[Arg, ...]
    outputs: tuple[Arg, ...]
    attrs: Mapping[str, Any]


class HarnessError(SpmdError):
    """An answer that does not fit the call (wrong number or rank of attributes): malformed."""


# ---- the answer, one attribute slot per argument ------------------------------------------------
def _side(slots: tuple[AttrSlot, ...], params: tuple[TensorParam, ...], side: str) -> list[AttrSlot]:
    """One slot per param; a side of one list param may be answered flat (split's outs)."""
    if len(params) == 1 and params[0].kind == "list" and not (
        len(slots) == 1 and isinstance(slots[0], tuple)
    ):
        return [tuple(slots)]  # type: ignore[arg-type]
    if len(slots) != len(params):
        raise HarnessError(f"the answer gives {len(slots)} {side} attributes for {len(params)}")
    return list(slots)


def unflatten(args: Sequence[Arg], flat: Sequence[AttrSlot]) -> list[AttrSlot]:
    out: list[AttrSlot] = []
    it = iter(flat)
    for a in args:
        if a is None:
            out.append(None)
        elif isinstance(a, TensorSpec):
            out.append(next(it))
        else:
            out.append(tuple(next(it) for _ in a))  # type: ignore[misc]
    return out


def checked(args: Sequence[Arg], slots: Sequence[AttrSlot], side: str) -> list[Slot]:
    """Every slot is an attribute of the right rank for its argument."""
    if len(slots) != len(args):
        raise HarnessError(f"the answer gives {len(slots)} {side} attributes for {len(args)}")
    out: list[Slot] = []
    for i, (a, s) in enumerate(zip(args, slots, strict=True)):
        if a is None:
            out.append(None)
            continue
        specs = (a,) if isinstance(a, TensorSpec) else a
        got = (s,) if isinstance(a, TensorSpec) else s
        if not isinstance(got, tuple) or len(got) != len(specs):
            raise HarnessError(f"{side} {i}: the answer gives {s!r} for {len(specs)} tensor(s)")
        for t, g in zip(specs, got, strict=True):
            if not isinstance(g, DistAttr) or g.ndim != t.ndim:
                raise HarnessError(f"{side} {i}: {g!r} is not an attribute of rank {t.ndim}")
        out.append(got[0] if isinstance(a, TensorSpec) else got)  # type: ignore[arg-type]
    return out


def answer_slots(call: OpCall, info: SpmdInfo, inputs: Sequence[TensorParam],
                 outputs: Sequence[TensorParam]) -> tuple[list[Slot], list[Slot]]:
    """The answered attribute of every input and output argument of ``call``, whose op takes the
    tensor parameters ``inputs`` and ``outputs`` (raises ``HarnessError`` when the answer does
    not fit)."""
    ins = _side(info.inputs, tuple(inputs), "input")
    outs = _side(info.outputs, tuple(outputs), "output")
    return checked(call.inputs, ins, "input"), checked(call.outputs, outs, "output")


# ---- execution on the simulated mesh --------------------------------------------------------------
def _shapes(args: Sequence[Arg]) -> tuple[Any, ...]:
    return tuple(
        None if a is None else a.shape if isinstance(a, TensorSpec) else tuple(t.shape for t in a)
        for a in args
    )


def _replicated(args: Sequence[Arg], mesh: ProcessMesh) -> list[Slot]:
    def rep(t: TensorSpec) -> DistAttr:
        return DistAttr.replicated(mesh, t.ndim)

    return [
        None if a is None else rep(a) if isinstance(a, TensorSpec) else tuple(rep(t) for t in a)
        for a in args
    ]


def _call(kernel: Kernel, ctx: LocalContext, blocks: Sequence[LocalValue],
          n_out: int) -> tuple[LocalValue, ...]:
    out = tuple(kernel(ctx, blocks))
    if len(out) != n_out:
        raise HarnessError(f"{ctx.op}: the kernel returned {len(out)} outputs, the op has {n_out}")
    return out


SERIAL_MESH: Final = ProcessMesh([0])


def run_serial(case: OpCall, kernel: Kernel, values: Sequence[Values]) -> tuple[LocalValue, ...]:
    """The kernel on a 1-process mesh with every attribute replicated: the reference."""
    ctx = LocalContext(
        op=case.op, mesh=SERIAL_MESH, coord=(0,), input_shapes=_shapes(case.inputs),
        input_attrs=tuple(_replicated(case.inputs, SERIAL_MESH)),
        output_shapes=_shapes(case.outputs),
        output_attrs=tuple(_replicated(case.outputs, SERIAL_MESH)), attrs=dict(case.attrs),
    )
    return _call(kernel, ctx, [v.copy() if isinstance(v, np.ndarray) else v for v in values],
                 len(case.outputs))


@dataclass(frozen=True)
class Collective:
    """An op whose rule allows a layout the op computes with communication inside it (the
    vocab-parallel cross entropy): ``fn(ctx, blocks, allreduce)`` with ``allreduce(local, how)``
    reducing ``local`` over the ranks that differ only on the mesh dims ``group(ctx)``."""

    fn: Callable[..., tuple[LocalValue, ...]]
    group: Callable[[LocalContext], tuple[int, ...]]


def _class_dims(ctx: LocalContext) -> tuple[int, ...]:
    a = ctx.input_attrs[0]
    axis = int(ctx.attrs.get("axis", -1)) % a.ndim
    return tuple(a.multi_dims_mapping[axis])


#: op name -> the in-op communication of its kernel, for ops lowered with collectives inside
#: (``lowering.LOWERINGS``): one op run on the simulated mesh runs it so
COLLECTIVES: Final[OpTable[Collective]] = OpTable("in-op collective")
for _op, _fn in (("cross_entropy_with_softmax", cross_entropy),
                 ("softmax_with_cross_entropy", cross_entropy),
                 ("c_softmax_with_cross_entropy", c_softmax_cross_entropy),
                 ("c_softmax_with_multi_label_cross_entropy", multi_label_cross_entropy)):
    COLLECTIVES.add(_op, Collective(_fn, _class_dims), caller(0))


def collective_for(op: str) -> Collective | None:
    """The in-op communication of ``op``'s kernel, where it has one."""
    return COLLECTIVES.lookup(op)


_ALLREDUCE: Final[dict[str, Callable[[Array], Array]]] = {
    "sum": lambda a: np.sum(a, axis=0), "max": lambda a: np.max(a, axis=0),
    "min": lambda a: np.min(a, axis=0),
}
Coord = tuple[int, ...]


def _run_with_collective(
    col: Collective, work: dict[Coord, tuple[LocalContext, list[LocalValue]]], n_out: int
) -> dict[Coord, tuple[LocalValue, ...]]:
    """Every rank in its own thread, meeting in ``allreduce`` (a barrier, then each rank reduces
    its group's posted arrays); a rank that fails breaks the barrier instead of hanging the rest."""
    coords = list(work)
    barrier = threading.Barrier(len(coords), timeout=30)
    posted: dict[Coord, Array] = {}
    results: dict[Coord, tuple[LocalValue, ...]] = {}
    errors: dict[Coord, BaseException] = {}

    def rank(c: Coord) -> None:
        ctx, blocks = work[c]
        dims = set(col.group(ctx))
        group = [g for g in coords if all(g[i] == c[i] for i in range(len(c)) if i not in dims)]

        def allreduce(local: Array, how: str) -> Array:
            posted[c] = np.asarray(local)
            barrier.wait()
            out = _ALLREDUCE[how](np.stack([posted[g] for g in group]))
            barrier.wait()  # everyone has read before anyone posts again
            return out

        try:
            results[c] = _call(lambda cx, b: col.fn(cx, b, allreduce), ctx, blocks, n_out)
        except BaseException as e:
            errors[c] = e
            barrier.abort()

    threads = [threading.Thread(target=rank, args=(c,)) for c in coords]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        real = [e for e in errors.values() if not isinstance(e, threading.BrokenBarrierError)]
        raise (real or list(errors.values()))[0]
    return results


def run_sharded(
    case: OpCall, kernel: Kernel, values: Sequence[Values], ins: Sequence[Slot],
    outs: Sequence[Slot], rng: Rng, collective: Collective | None = None,
) -> list[Values]:
    """Scatter by ``ins``, run the kernel per coordinate, gather by ``outs`` (raises
    ``ShardMismatch`` when blocks disagree with ``outs``, ``ShardShapeMismatch`` when a block
    has another shape than ``outs`` gives it)."""
    scattered = [_scatter_slot(v, a, rng) for v, a in zip(values, ins, strict=True)]
    in_shapes, out_shapes = _shapes(case.inputs), _shapes(case.outputs)
    work: dict[Coord, tuple[LocalContext, list[LocalValue]]] = {}
    for c in (tuple(int(i) for i in c) for c in np.ndindex(*case.mesh.shape)):
        blocks: list[LocalValue] = [
            None if s is None else [d[c] for d in s] if isinstance(s, list) else s[c]
            for s in scattered
        ]
        ctx = LocalContext(
            op=case.op, mesh=case.mesh, coord=c, input_shapes=in_shapes, input_attrs=tuple(ins),
            output_shapes=out_shapes, output_attrs=tuple(outs), attrs=dict(case.attrs),
        )
        work[c] = (ctx, blocks)
    _exchange_halos(case, work, scattered, ins, outs)
    if collective is not None:
        results = _run_with_collective(collective, work, len(outs))
    else:
        results = {c: _call(kernel, ctx, blocks, len(outs)) for c, (ctx, blocks) in work.items()}
    return [_gather_slot(results, k, arg, a)
            for k, (arg, a) in enumerate(zip(case.outputs, outs, strict=True))]


def _scatter_slot(v: Values, a: Slot, rng: Rng) -> Any:
    """One input's blocks by coordinate (a list of them for a tensor list; None if absent)."""
    if v is None or a is None:
        return None
    if isinstance(v, list):
        assert isinstance(a, tuple)
        return [scatter(x, t, rng) for x, t in zip(v, a, strict=True)]
    assert isinstance(a, DistAttr)
    return scatter(v, a, rng)


def _gather_slot(results: Mapping[Coord, Any], k: int, arg: Arg, a: Slot) -> Values:
    """Output ``k``'s global value from every coordinate's blocks (None: an absent optional
    output, the gradient of an absent input)."""
    if arg is None:
        return None
    if isinstance(arg, TensorSpec):
        assert isinstance(a, DistAttr)
        return gather({c: _block(r[k]) for c, r in results.items()}, arg.shape, a)
    assert isinstance(arg, tuple) and isinstance(a, tuple)
    return [gather({c: _piece(r[k], i) for c, r in results.items()}, t.shape, ta)
            for i, (t, ta) in enumerate(zip(arg, a, strict=True))]


def _exchange_halos(case: OpCall, work: dict[Coord, tuple[LocalContext, list[LocalValue]]],
                    scattered: Sequence[Any], ins: Sequence[Slot], outs: Sequence[Slot]) -> None:
    """A spatially sharded windowed op: each rank's input block becomes its halo-extended slab,
    filled from the neighbours' blocks (what the lowering's HaloExchange does)."""
    if case.op not in halo.HALO_OPS or not isinstance(outs[0], DistAttr) \
            or not isinstance(ins[0], DistAttr):
        return
    shape = case.inputs[0].shape  # type: ignore[union-attr]
    for c, (ctx, blocks) in list(work.items()):
        box = halo.needed_box(case.op, case.attrs, _shapes(case.inputs), tuple(ins),
                              _shapes(case.outputs)[0], outs[0], c)
        if box is None:
            continue
        slab, _ = halo.assemble(box, scattered[0], shape, ins[0])
        attrs = {**ctx.attrs, halo.HALO: True}
        work[c] = (dataclasses.replace(ctx, attrs=attrs), [slab, *blocks[1:]])


def _block(b: LocalValue | np.generic) -> Array:
    if isinstance(b, np.generic):  # a numpy scalar is a 0-d block
        return np.asarray(b)
    if not isinstance(b, np.ndarray):
        raise HarnessError(f"the kernel returned {type(b).__name__} for a tensor output")
    return b


def _piece(b: LocalValue, i: int) -> Array:
    if not isinstance(b, list | tuple) or i >= len(b):
        raise HarnessError(f"the kernel returned {type(b).__name__} for a list output")
    return _block(b[i])


def _comparable(a: Array) -> Array:
    """bfloat16 (numpy's kind 'V', which allclose and equal_nan do not take) as float32, which
    holds each of its values exactly."""
    return a.astype(np.float32) if is_bfloat16(a.dtype) else a


def _differ(got: Array, want: Array) -> str | None:
    """Why two results differ, or None when they agree."""
    got, want = _comparable(np.asarray(got)), _comparable(np.asarray(want))
    if got.shape != want.shape:
        return f"shape {list(got.shape)} instead of {list(want.shape)}"
    if is_inexact(want.dtype):
        # the tolerance scales with the finite values: an infinity must match exactly
        finite = np.abs(want[np.isfinite(want)])
        scale = float(finite.max()) if finite.size else 0.0
        ok = np.allclose(got, want, rtol=RTOL, atol=ATOL * max(1.0, scale), equal_nan=True)
        if not ok:
            err = np.abs(got.astype(want.dtype) - want)
            return f"max abs error {float(np.nanmax(err)):.3g} (values up to {scale:.3g})"
        return None
    if not np.array_equal(got, want):
        return f"{int(np.sum(got != want))} of {want.size} entries differ"
    return None


def compare(got: Sequence[Values], want: Sequence[LocalValue]) -> str | None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if g is None or w is None:
            if g is not w:
                return f"output {k}: absent on one side only"
            continue
        if isinstance(w, list | tuple):
            if not isinstance(g, list) or len(g) != len(w):
                return f"output {k}: {len(w)} pieces expected"
            for i, (gi, wi) in enumerate(zip(g, w, strict=True)):
                why = _differ(gi, _block(wi))
                if why:
                    return f"output {k}[{i}]: {why}"
        else:
            why = _differ(np.asarray(g), _block(w))
            if why:
                return f"output {k}: {why}"
    return None


def same_blocks(a: Sequence[LocalValue], b: Sequence[LocalValue]) -> bool:
    for x, y in zip(a, b, strict=True):
        xs = x if isinstance(x, list | tuple) else [x]
        ys = y if isinstance(y, list | tuple) else [y]
        if len(xs) != len(ys):
            return False
        for p, q in zip(xs, ys, strict=True):
            p, q = _comparable(np.asarray(p)), _comparable(np.asarray(q))
            if p.shape != q.shape or not np.array_equal(p, q, equal_nan=is_inexact(p.dtype)):
                return False
    return True


def check_serial_shapes(case: OpCall, serial: Sequence[LocalValue]) -> str | None:
    for k, (arg, out) in enumerate(zip(case.outputs, serial, strict=True)):
        specs = [arg] if isinstance(arg, TensorSpec) else list(arg or ())
        blocks: list[Any] = [out] if isinstance(arg, TensorSpec) else list(out or [])
        if len(blocks) != len(specs):
            return f"serial output {k}: {len(blocks)} pieces, the op gives {len(specs)}"
        for t, b in zip(specs, blocks, strict=True):
            got = np.shape(b)
            if got != t.shape:
                return (f"serial output {k}: shape {list(got)}, shape inference says "
                        f"{list(t.shape)}")
    return None


@dataclass
class Trial:
    """The verdict of one execution, with the values it ran on and the serial result."""

    status: Status
    detail: str = ""
    serial: tuple[LocalValue, ...] = ()


def format_slots(slots: Sequence[Slot]) -> str:
    def one(s: Slot) -> str:
        if s is None:
            return "None"
        if isinstance(s, tuple):
            return "[" + ", ".join(a.mapping_str() for a in s) + "]"
        return s.mapping_str()

    return ", ".join(one(s) for s in slots)


def execute(call: OpCall, kernel: Kernel, values: Sequence[Values], ins: Sequence[Slot],
            outs: Sequence[Slot], rng: Rng, collective: Collective | None = None,
            serial: tuple[LocalValue, ...] | None = None) -> Trial:
    """Run ``call`` on ``values`` as the answered slots say and judge it against the serial run:
    *ok*, *malformed* (a block of another shape than its attribute gives), *wrong* (another
    result, or replicas that disagree, or a layout the kernel cannot compute), *error* (the kernel
    fails for another reason, or serially) or *nondeterministic*. ``serial``: the serial result
    of these values, when a trial of another answer has computed it (and checked it)."""
    if serial is None:
        try:
            serial = run_serial(call, kernel, values)
            again = run_serial(call, kernel, values)
        except Exception as e:
            return Trial("error", f"serial kernel raised {type(e).__name__}: {e}")
        if not same_blocks(serial, again):
            return Trial("nondeterministic", "two serial runs of the kernel differ")
        bad = check_serial_shapes(call, serial)
        if bad:
            return Trial("error", bad)
    claimed = f"inferred inputs {format_slots(ins)} -> outputs {format_slots(outs)}"
    try:
        got = run_sharded(call, kernel, values, ins, outs, rng, collective)
    except ShardShapeMismatch as e:
        return Trial("malformed", f"{e}; {claimed}")
    except ShardMismatch as e:
        return Trial("wrong", f"{e}; {claimed}")
    except Exception as e:
        return Trial("error", f"kernel raised {type(e).__name__}: {e}; {claimed}")
    why = compare(got, serial)
    if why:
        return Trial("wrong", f"{why}; {claimed}")
    return Trial("ok", serial=serial)
