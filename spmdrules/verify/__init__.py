"""``python -m spmdrules.verify``: every registered rule proven by execution.

For each rule, forward and reverse, on random cases (:mod:`spmdrules.verify.cases`):

1. call the rule on random given attributes (reverse: random output attributes);
2. scatter random global inputs by the rule's inferred *input* attributes (partials become
   pieces that reduce back to the value);
3. run the op's local kernel (:mod:`spmdrules.execution.local`) on every mesh coordinate;
4. gather every output by the rule's inferred *output* attribute (replicas must agree, block
   shapes must match, partials are reduced with their reduce type);
5. compare with the serial result: the same kernel on a 1-process mesh, everything replicated.

A case is **wrong** when the gathered output differs from the serial one (or cannot be gathered:
replica mismatch, bad block shape). A correct case is **over-replicated** when a sharded
alternative also computes the right answer with less communication; see docs/verify.md for the
precise definition and how the alternatives are enumerated.

``<op>_grad`` rules run on their backward op (``bmm_grad``: x, y and the output's cotangent in,
the cotangents of x and y out) on cases drawn for the forward op; generic rules (``default_``,
``default_data_parallel``, ``replicated``) run on stand-in ops whose semantics they claim to cover.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

import numpy as np

import spmdrules as sr
from spmdrules.core.attr import DistAttr
from spmdrules.core.blocks import Array, ShardMismatch, gather, scatter
from spmdrules.core.spec import AttrSlot, SpmdInfo, TensorSpec
from spmdrules.engine.registry import TensorParam
from spmdrules.execution.local import Block, Kernel, LocalContext, get_kernel
from spmdrules.verify.cases import (
    Arg,
    Case,
    Direction,
    DomainArg,
    NoCaseError,
    case_rng,
    draw_case,
    draw_values,
)

Rng = np.random.Generator
KernelLookup = Callable[[str], Kernel]
CaseStatus = Literal["ok", "wrong", "error", "nondeterministic"]

#: draws per case index before the case counts as refused (the rule rejects the given attributes)
MAX_DRAWS: Final = 20
#: sharded alternatives tried per mesh dim of one case (the search stops at the first that verifies)
MAX_ALTERNATIVES: Final = 16
#: comparison tolerance for floating results (float64 inputs; partial pieces add rounding)
RTOL: Final = 1e-7
ATOL: Final = 1e-9
#: examples kept per op and direction in the report
MAX_EXAMPLES: Final = 3


class HarnessError(sr.SpmdError):
    """A rule's answer does not fit the call (wrong number or rank of attributes)."""


# ---- the rule's answer, one attribute slot per argument ------------------------------------------
Slot = DistAttr | None | tuple[DistAttr, ...]


def _side(slots: tuple[AttrSlot, ...], params: tuple[TensorParam, ...], side: str) -> list[AttrSlot]:
    """One slot per param; a side of one list param may be answered flat (split's outs)."""
    if len(params) == 1 and params[0].kind == "list" and not (
        len(slots) == 1 and isinstance(slots[0], tuple)
    ):
        return [tuple(slots)]  # type: ignore[arg-type]
    if len(slots) != len(params):
        raise HarnessError(f"the rule answers {len(slots)} {side} attributes for {len(params)}")
    return list(slots)


def _unflatten(args: Sequence[Arg], flat: Sequence[AttrSlot]) -> list[AttrSlot]:
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


def _checked(args: Sequence[Arg], slots: Sequence[AttrSlot], side: str) -> list[Slot]:
    """Every slot is an attribute of the right rank for its argument."""
    if len(slots) != len(args):
        raise HarnessError(f"the rule answers {len(slots)} {side} attributes for {len(args)}")
    out: list[Slot] = []
    for i, (a, s) in enumerate(zip(args, slots, strict=True)):
        if a is None:
            out.append(None)
            continue
        specs = (a,) if isinstance(a, TensorSpec) else a
        got = (s,) if isinstance(a, TensorSpec) else s
        if not isinstance(got, tuple) or len(got) != len(specs):
            raise HarnessError(f"{side} {i}: the rule answers {s!r} for {len(specs)} tensor(s)")
        for t, g in zip(specs, got, strict=True):
            if not isinstance(g, DistAttr) or g.ndim != t.ndim:
                raise HarnessError(f"{side} {i}: {g!r} is not an attribute of rank {t.ndim}")
        out.append(got[0] if isinstance(a, TensorSpec) else got)  # type: ignore[arg-type]
    return out


def answer(case: Case, info: SpmdInfo) -> tuple[list[Slot], list[Slot]]:
    """The inferred attribute of every input and output argument of ``case.op``."""
    if case.generic:
        ins = _unflatten(case.inputs, info.inputs)
        outs = _unflatten(case.outputs, info.outputs)
    else:
        rule = sr.get_rule(case.rule)
        answered = list(info.inputs)
        for k in case.unanswered:
            given = case.inputs[k]
            answered.insert(k, None if given is None else given.attr if isinstance(
                given, TensorSpec) else tuple(t.attr for t in given))
        ins = _side(tuple(answered), rule.inputs, "input")
        outs = _side(info.outputs, rule.outputs, "output")
    return _checked(case.inputs, ins, "input"), _checked(case.outputs, outs, "output")


# ---- execution on the simulated mesh --------------------------------------------------------------
Values = Array | list[Array] | None


def _draw(domain: DomainArg, arg: Arg, rng: Rng) -> Values:
    if arg is None or domain is None:
        return None
    if isinstance(arg, TensorSpec):
        assert isinstance(domain, str)
        return draw_values(domain, arg.shape, rng)
    assert isinstance(domain, tuple)
    return [draw_values(d, t.shape, rng) for d, t in zip(domain, arg, strict=True)]


def _shapes(args: Sequence[Arg]) -> tuple[Any, ...]:
    return tuple(
        None if a is None else a.shape if isinstance(a, TensorSpec) else tuple(t.shape for t in a)
        for a in args
    )


def _replicated(args: Sequence[Arg], mesh: sr.ProcessMesh) -> list[Slot]:
    def rep(t: TensorSpec) -> DistAttr:
        return DistAttr.replicated(mesh, t.ndim)

    return [
        None if a is None else rep(a) if isinstance(a, TensorSpec) else tuple(rep(t) for t in a)
        for a in args
    ]


def _call(kernel: Kernel, ctx: LocalContext, blocks: Sequence[Block], n_out: int) -> tuple[Block, ...]:
    out = tuple(kernel(ctx, blocks))
    if len(out) != n_out:
        raise HarnessError(f"{ctx.op}: the kernel returned {len(out)} outputs, the op has {n_out}")
    return out


SERIAL_MESH: Final = sr.ProcessMesh([0])


def run_serial(case: Case, kernel: Kernel, values: Sequence[Values]) -> tuple[Block, ...]:
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

    fn: Callable[..., tuple[Block, ...]]
    group: Callable[[LocalContext], tuple[int, ...]]


def _class_dims(ctx: LocalContext) -> tuple[int, ...]:
    a = ctx.input_attrs[0]
    axis = int(ctx.attrs["axis"]) % a.ndim
    return tuple(a.multi_dims_mapping[axis])


def collective_for(op: str) -> Collective | None:
    """The in-op communication of ``op``'s kernel, where it has one."""
    if op in ("cross_entropy_with_softmax", "softmax_with_cross_entropy"):
        from spmdrules.execution.kernels import nn as kernels_nn

        fn = getattr(kernels_nn, "cross_entropy", None)  # absent: the local kernel's refusal shows
        return None if fn is None else Collective(fn, _class_dims)
    return None


_ALLREDUCE: Final[dict[str, Callable[[Array], Array]]] = {
    "sum": lambda a: np.sum(a, axis=0), "max": lambda a: np.max(a, axis=0),
    "min": lambda a: np.min(a, axis=0),
}
Coord = tuple[int, ...]


def _run_with_collective(
    col: Collective, work: dict[Coord, tuple[LocalContext, list[Block]]], n_out: int
) -> dict[Coord, tuple[Block, ...]]:
    """Every rank in its own thread, meeting in ``allreduce`` (a barrier, then each rank reduces
    its group's posted arrays); a rank that fails breaks the barrier instead of hanging the rest."""
    coords = list(work)
    barrier = threading.Barrier(len(coords), timeout=30)
    posted: dict[Coord, Array] = {}
    results: dict[Coord, tuple[Block, ...]] = {}
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
    case: Case, kernel: Kernel, values: Sequence[Values], ins: Sequence[Slot],
    outs: Sequence[Slot], rng: Rng, collective: Collective | None = None,
) -> list[Values]:
    """Scatter by ``ins``, run the kernel per coordinate, gather by ``outs`` (raises
    ``ShardMismatch`` when blocks disagree with ``outs``)."""
    scattered: list[Any] = []
    for v, a in zip(values, ins, strict=True):
        if v is None or a is None:
            scattered.append(None)
        elif isinstance(v, list):
            assert isinstance(a, tuple)
            scattered.append([scatter(x, t, rng) for x, t in zip(v, a, strict=True)])
        else:
            assert isinstance(a, DistAttr)
            scattered.append(scatter(v, a, rng))
    coords = [tuple(int(i) for i in c) for c in np.ndindex(*case.mesh.shape)]
    in_shapes, out_shapes = _shapes(case.inputs), _shapes(case.outputs)
    work: dict[Coord, tuple[LocalContext, list[Block]]] = {}
    for c in coords:
        blocks: list[Block] = [
            None if s is None else [d[c] for d in s] if isinstance(s, list) else s[c]
            for s in scattered
        ]
        ctx = LocalContext(
            op=case.op, mesh=case.mesh, coord=c, input_shapes=in_shapes, input_attrs=tuple(ins),
            output_shapes=out_shapes, output_attrs=tuple(outs), attrs=dict(case.attrs),
        )
        work[c] = (ctx, blocks)
    if collective is not None:
        results = _run_with_collective(collective, work, len(outs))
    else:
        results = {c: _call(kernel, ctx, blocks, len(outs)) for c, (ctx, blocks) in work.items()}
    gathered: list[Values] = []
    for k, (arg, a) in enumerate(zip(case.outputs, outs, strict=True)):
        if isinstance(arg, TensorSpec):
            assert isinstance(a, DistAttr)
            gathered.append(gather({c: _block(r[k]) for c, r in results.items()},
                                            arg.shape, a))
        else:
            assert isinstance(arg, tuple) and isinstance(a, tuple)
            parts = []
            for i, (t, ta) in enumerate(zip(arg, a, strict=True)):
                parts.append(gather({c: _piece(r[k], i) for c, r in results.items()},
                                             t.shape, ta))
            gathered.append(parts)
    return gathered


def _block(b: Block | np.generic) -> Array:
    if isinstance(b, np.generic):  # a numpy scalar is a 0-d block
        return np.asarray(b)
    if not isinstance(b, np.ndarray):
        raise HarnessError(f"the kernel returned {type(b).__name__} for a tensor output")
    return b


def _piece(b: Block, i: int) -> Array:
    if not isinstance(b, list | tuple) or i >= len(b):
        raise HarnessError(f"the kernel returned {type(b).__name__} for a list output")
    return _block(b[i])


def _differ(got: Array, want: Array) -> str | None:
    """Why two results differ, or None when they agree."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {list(got.shape)} instead of {list(want.shape)}"
    if want.dtype.kind in "fc":
        scale = float(np.nanmax(np.abs(want))) if want.size else 0.0
        ok = np.allclose(got, want, rtol=RTOL, atol=ATOL * max(1.0, scale), equal_nan=True)
        if not ok:
            err = np.abs(got.astype(want.dtype) - want)
            return f"max abs error {float(np.nanmax(err)):.3g} (values up to {scale:.3g})"
        return None
    if not np.array_equal(got, want):
        return f"{int(np.sum(got != want))} of {want.size} entries differ"
    return None


def _compare(got: Sequence[Values], want: Sequence[Block]) -> str | None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
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


def _same_blocks(a: Sequence[Block], b: Sequence[Block]) -> bool:
    for x, y in zip(a, b, strict=True):
        xs = x if isinstance(x, list | tuple) else [x]
        ys = y if isinstance(y, list | tuple) else [y]
        if len(xs) != len(ys):
            return False
        for p, q in zip(xs, ys, strict=True):
            p, q = np.asarray(p), np.asarray(q)
            if p.shape != q.shape or not np.array_equal(p, q, equal_nan=p.dtype.kind in "fc"):
                return False
    return True


def _check_serial_shapes(case: Case, serial: Sequence[Block]) -> str | None:
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


# ---- over-replication: a sharded alternative with less communication ----------------------------
def _flat_slots(slots: Sequence[Slot]) -> list[tuple[int, int | None, DistAttr]]:
    out: list[tuple[int, int | None, DistAttr]] = []
    for k, s in enumerate(slots):
        if isinstance(s, DistAttr):
            out.append((k, None, s))
        elif isinstance(s, tuple):
            out.extend((k, i, a) for i, a in enumerate(s))
    return out


def _with(slots: Sequence[Slot], k: int, i: int | None, a: DistAttr) -> list[Slot]:
    new = list(slots)
    if i is None:
        new[k] = a
    else:
        cur = new[k]
        assert isinstance(cur, tuple)
        new[k] = (*cur[:i], a, *cur[i + 1 :])
    return new


def _shard_on(a: DistAttr, dim: int, md: int) -> DistAttr:
    mdm = list(a.multi_dims_mapping)
    mdm[dim] = (*mdm[dim], md)
    return DistAttr(a.mesh, multi_dims_mapping=mdm, partial=a.partial)


def _given_dim(spec: TensorSpec, md: int) -> int | None:
    for t, dims in enumerate(spec.attr.multi_dims_mapping):
        if md in dims:
            return t
    return None


def _spec_at(args: Sequence[Arg], k: int, i: int | None) -> TensorSpec:
    a = args[k]
    if i is None:
        assert isinstance(a, TensorSpec)
        return a
    assert isinstance(a, tuple)
    return a[i]


def find_alternative(
    case: Case, kernel: Kernel, values: Sequence[Values], ins: Sequence[Slot],
    outs: Sequence[Slot], serial: Sequence[Block], rng: Rng, collective: Collective | None = None,
) -> str | None:
    """A sharded alternative that verifies and needs less communication, described; or None.

    The *given* side is what the rule was called on (the inputs forward, the outputs reverse),
    the *derived* side what it inferred from them. For each mesh dim ``m`` that every derived
    attribute leaves replicated: restore ``m`` on every given-side dim that the call shards on
    ``m`` and the rule freed (so no all-gather over ``m`` is needed there), and try sharding
    derived-side dims on ``m`` (at least one; dims of the restored dims' sizes first). The first
    combination that computes the serial answer is the evidence.
    """
    forward = case.direction == "forward"
    given_args, derived_args = (case.inputs, case.outputs) if forward else (case.outputs, case.inputs)
    given0, derived0 = (ins, outs) if forward else (outs, ins)
    flat_derived = _flat_slots(derived0)
    for m in range(case.mesh.ndim):
        if case.mesh.shape[m] == 1 or any(
            m in a.sharded_mesh_dims or a.is_partial(m) for _, _, a in flat_derived
        ):
            continue
        given, restored = list(given0), []
        for k, i, a in _flat_slots(given0):
            dim = _given_dim(_spec_at(given_args, k, i), m)
            if dim is None or m in a.sharded_mesh_dims or a.is_partial(m):
                continue
            given = _with(given, k, i, _shard_on(a, dim, m))
            restored.append((k, i, dim))
        if not restored:
            continue
        sizes = {_spec_at(given_args, k, i).shape[d] for k, i, d in restored}
        choices: list[list[int | None]] = []
        for k, i, _ in flat_derived:
            shape = _spec_at(derived_args, k, i).shape
            dims = sorted((d for d in range(len(shape)) if shape[d] > 1),
                          key=lambda d: shape[d] not in sizes)
            choices.append([*dims, None])
        combos = (c for c in itertools.product(*choices) if any(d is not None for d in c))
        for combo in itertools.islice(combos, MAX_ALTERNATIVES):
            derived = list(derived0)
            for (k, i, a), d in zip(flat_derived, combo, strict=True):
                if d is not None:
                    derived = _with(derived, k, i, _shard_on(a, d, m))
            new_ins, new_outs = (given, derived) if forward else (derived, given)
            try:
                got = run_sharded(case, kernel, values, new_ins, new_outs, rng, collective)
            except Exception:  # an alternative that cannot even run is not one
                continue
            if _compare(got, serial) is None:
                side = "input" if forward else "output"
                return _describe_alternative(side, m, restored, new_ins, new_outs)
    return None


def _fmt_slots(slots: Sequence[Slot]) -> str:
    def one(s: Slot) -> str:
        if s is None:
            return "None"
        if isinstance(s, tuple):
            return "[" + ", ".join(a.mapping_str() for a in s) + "]"
        return s.mapping_str()

    return ", ".join(one(s) for s in slots)


def _describe_alternative(
    side: str, m: int, restored: Sequence[tuple[int, int | None, int]], ins: Sequence[Slot],
    outs: Sequence[Slot],
) -> str:
    kept = ", ".join(f"{side} {k}{'' if i is None else f'[{i}]'} dim {d}" for k, i, d in restored)
    return (f"keeping {kept} sharded on mesh dim {m} also verifies: inputs {_fmt_slots(ins)} -> "
            f"outputs {_fmt_slots(outs)}")


# ---- one case ------------------------------------------------------------------------------------
@dataclass
class CaseResult:
    status: CaseStatus
    detail: str = ""
    alternative: str | None = None


def run_case(case: Case, info: SpmdInfo, kernel: Kernel, rng: Rng, *,
             alternatives: bool = True, collective: Collective | None = None) -> CaseResult:
    """Execute one answered case; see the module doc for the steps."""
    # Blocks may be empty (uneven splits) and values extreme: numpy's warnings are noise here,
    # the comparison with the serial result is the check.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return _run_case(case, info, kernel, rng, alternatives, collective)


def _run_case(case: Case, info: SpmdInfo, kernel: Kernel, rng: Rng,
              alternatives: bool, collective: Collective | None) -> CaseResult:
    try:
        ins, outs = answer(case, info)
    except HarnessError as e:
        return CaseResult("wrong", f"malformed answer {info!r}: {e}")
    values = [_draw(d, a, rng) for d, a in zip(case.domains, case.inputs, strict=True)]
    try:
        serial = run_serial(case, kernel, values)
        again = run_serial(case, kernel, values)
    except Exception as e:
        return CaseResult("error", f"serial kernel raised {type(e).__name__}: {e}")
    if not _same_blocks(serial, again):
        return CaseResult("nondeterministic", "two serial runs of the kernel differ")
    bad = _check_serial_shapes(case, serial)
    if bad:
        return CaseResult("error", bad)
    claimed = f"inferred inputs {_fmt_slots(ins)} -> outputs {_fmt_slots(outs)}"
    try:
        got = run_sharded(case, kernel, values, ins, outs, rng, collective)
    except ShardMismatch as e:
        return CaseResult("wrong", f"{e}; {claimed}")
    except Exception as e:
        return CaseResult("error", f"kernel raised {type(e).__name__}: {e}; {claimed}")
    why = _compare(got, serial)
    if why:
        return CaseResult("wrong", f"{why}; {claimed}")
    alt = (find_alternative(case, kernel, values, ins, outs, serial, rng, collective)
           if alternatives else None)
    return CaseResult("ok", alternative=alt)


# ---- per op --------------------------------------------------------------------------------------
@dataclass
class DirectionReport:
    cases: int = 0
    wrong: int = 0
    over_replicated: int = 0
    errors: int = 0
    refused: int = 0
    no_kernel: int = 0
    nondeterministic: int = 0
    examples: list[str] = field(default_factory=list)


OpStatus = Literal["verified", "wrong", "error", "no kernel", "skipped", "no cases"]


@dataclass
class OpReport:
    op: str
    family: str
    status: OpStatus
    reason: str = ""
    forward: DirectionReport | None = None
    reverse: DirectionReport | None = None
    seconds: float = field(default=0.0, compare=False)

    def directions(self) -> list[DirectionReport]:
        return [d for d in (self.forward, self.reverse) if d is not None]


def verify_direction(
    name: str, direction: Direction, *, cases: int, seed: int, alternatives: bool = True,
    kernels: KernelLookup = get_kernel,
) -> DirectionReport:
    rep = DirectionReport()
    for index in range(cases):
        rng = case_rng(seed, name, direction, index)
        for _ in range(MAX_DRAWS):
            case = draw_case(name, direction, rng)
            try:
                info = case.call()
                break
            except sr.SpmdError:
                rep.refused += 1
        else:
            continue
        try:
            kernel = kernels(case.op)
        except sr.UnsupportedError:
            rep.no_kernel += 1
            continue
        # The registered kernels' in-op communication is simulated; a custom lookup has none.
        col = collective_for(case.op) if kernels is get_kernel else None
        res = run_case(case, info, kernel, rng, alternatives=alternatives, collective=col)
        rep.cases += 1
        where = f"[{direction} seed={seed} case={index}] {case.describe()}"
        if res.status == "wrong":
            rep.wrong += 1
        elif res.status == "error":
            rep.errors += 1
        elif res.status == "nondeterministic":
            rep.nondeterministic += 1
        if res.status != "ok" and len(rep.examples) < MAX_EXAMPLES:
            rep.examples.append(f"{res.status.upper()} {where}: {res.detail}")
        if res.alternative:
            rep.over_replicated += 1
            if len(rep.examples) < MAX_EXAMPLES:
                rep.examples.append(f"OVER-REPLICATED {where}: {res.alternative}")
    return rep


def verify_op(
    name: str, *, cases: int = 20, seed: int = 0, alternatives: bool = True,
    kernels: KernelLookup = get_kernel,
) -> OpReport:
    """Verify rule ``name`` in both directions on ``cases`` random cases each."""
    rule = sr.get_rule(name)
    start = time.perf_counter()
    directions: list[Direction] = ["forward", "reverse"] if rule.has_reverse else ["forward"]
    reps: dict[str, DirectionReport] = {}
    try:
        for d in directions:
            reps[d] = verify_direction(name, d, cases=cases, seed=seed,
                                       alternatives=alternatives, kernels=kernels)
    except NoCaseError as e:
        return OpReport(name, rule.family, "no cases", str(e))
    report = OpReport(name, rule.family, "verified", forward=reps["forward"],
                      reverse=reps.get("reverse"), seconds=time.perf_counter() - start)
    ds = report.directions()
    if any(d.wrong for d in ds):
        report.status = "wrong"
    elif any(d.errors for d in ds):
        report.status = "error"
    elif not any(d.cases for d in ds):
        no_kernel = any(d.no_kernel for d in ds)
        report.status = "no kernel" if no_kernel else "no cases"
        report.reason = (f"no local kernel for {name!r} yet" if no_kernel
                         else "the rule refused every drawn case")
    if not rule.has_reverse and not report.reason:
        report.reason = "no reverse rule (Paddle registers none)"
    return report


def verify(
    names: Iterable[str], *, cases: int = 20, seed: int = 0, alternatives: bool = True,
    kernels: KernelLookup = get_kernel, progress: Callable[[OpReport], None] | None = None,
) -> list[OpReport]:
    out = []
    for n in names:
        r = verify_op(n, cases=cases, seed=seed, alternatives=alternatives, kernels=kernels)
        out.append(r)
        if progress is not None:
            progress(r)
    return out


# ---- totals and output ---------------------------------------------------------------------------
_COUNTS: Final = ("cases", "wrong", "over_replicated", "errors", "refused", "no_kernel",
                  "nondeterministic")


def totals(reports: Sequence[OpReport]) -> dict[str, dict[str, int]]:
    """Per family (and ``"all"``): op counts by status and case counts over both directions."""
    fams: dict[str, dict[str, int]] = {}
    for r in reports:
        for key in (r.family, "all"):
            t = fams.setdefault(
                key, {"ops": 0, **dict.fromkeys(_STATUS_KEYS.values(), 0), **dict.fromkeys(_COUNTS, 0)}
            )
            t["ops"] += 1
            t[_STATUS_KEYS[r.status]] += 1
            for d in r.directions():
                for c in _COUNTS:
                    t[c] += getattr(d, c)
    return dict(sorted(fams.items(), key=lambda kv: (kv[0] == "all", kv[0])))


_STATUS_KEYS: Final[dict[str, str]] = {
    "verified": "ops_verified", "wrong": "ops_wrong", "error": "ops_error",
    "no kernel": "ops_no_kernel", "skipped": "ops_skipped", "no cases": "ops_no_cases",
}


def to_json(reports: Sequence[OpReport], *, seed: int, cases: int) -> dict[str, Any]:
    return {
        "seed": seed,
        "cases_per_direction": cases,
        "ops": {r.op: asdict(r) for r in reports},
        "families": totals(reports),
    }


def _row(r: OpReport) -> str:
    def d(x: DirectionReport | None) -> str:
        if x is None:
            return f"{'-':>17}"
        return f"{x.cases:>5} {x.wrong:>3} {x.over_replicated:>3} {x.errors:>3}"

    return f"{r.op:<28} {r.family:<18} {d(r.forward)}  {d(r.reverse)}  {r.status}"


HEADER: Final = (f"{'op':<28} {'family':<18} {'fwd':>5} {'bad':>3} {'ovr':>3} {'err':>3}  "
                 f"{'rev':>5} {'bad':>3} {'ovr':>3} {'err':>3}  status")


def format_text(reports: Sequence[OpReport]) -> str:
    lines = [HEADER]
    lines += [_row(r) for r in reports]
    lines.append("")
    lines.append(f"{'family':<20} {'ops':>4} {'ok':>4} {'nokrn':>5} {'skip':>4} {'cases':>6} "
                 f"{'wrong':>5} {'over':>5} {'err':>4}")
    for fam, t in totals(reports).items():
        lines.append(f"{fam:<20} {t['ops']:>4} {t['ops_verified']:>4} {t['ops_no_kernel']:>5} "
                     f"{t['ops_skipped']:>4} {t['cases']:>6} {t['wrong']:>5} "
                     f"{t['over_replicated']:>5} {t['errors']:>4}")
    examples = [(r.op, e) for r in reports for d in r.directions() for e in d.examples]
    if examples:
        lines.append("")
        lines += [f"{op}: {e}" for op, e in examples]
    return "\n".join(lines)


def markdown_table(reports: Sequence[OpReport]) -> str:
    """The per-family totals as the Markdown table docs/verify.md shows."""
    lines = ["| family | ops | verified | cases | wrong | over-replicated | errors |",
             "|---|---|---|---|---|---|---|"]
    for fam, t in totals(reports).items():
        name = "**all**" if fam == "all" else fam
        lines.append(f"| {name} | {t['ops']} | {t['ops_verified']} | {t['cases']} | "
                     f"{t['wrong']} | {t['over_replicated']} | {t['errors']} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spmdrules.verify",
        description="Prove every registered SPMD rule by execution on a simulated mesh.",
    )
    p.add_argument("--ops", nargs="+", metavar="NAME", help="verify only these ops")
    p.add_argument("--json", action="store_true", help="print per-op and per-family totals as JSON")
    p.add_argument("--markdown", action="store_true",
                   help="print only the per-family totals, as docs/verify.md's table")
    p.add_argument("--cases", type=int, default=20, metavar="N",
                   help="random cases per op and direction (default 20)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="the random seed (default 0)")
    p.add_argument("--no-alternatives", action="store_true",
                   help="skip the search for sharded alternatives (over-replication)")
    args = p.parse_args(argv)
    if args.cases < 1:
        p.error("--cases must be >= 1")
    try:
        for n in args.ops or ():
            sr.get_rule(n)
    except sr.UnknownOpError as e:
        p.error(str(e))
    names: list[str] = list(args.ops) if args.ops else sr.list_rules()
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(names), unit="op", file=sys.stderr)

    def progress(r: OpReport) -> None:
        if bar is not None:
            bar.set_postfix_str(r.op)
            bar.update()
        elif not (args.json or args.markdown):
            print(_row(r), file=sys.stderr, flush=True)

    reports = verify(names, cases=args.cases, seed=args.seed,
                     alternatives=not args.no_alternatives, progress=progress)
    if bar is not None:
        bar.close()
    if args.json:
        print(json.dumps(to_json(reports, seed=args.seed, cases=args.cases), indent=1))
    elif args.markdown:
        print(markdown_table(reports))
    else:
        print(format_text(reports))
    return 1 if any(r.status in ("wrong", "error") for r in reports) else 0
