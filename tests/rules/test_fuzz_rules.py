"""Fuzz every registered rule: random meshes, shapes, mappings (co-shards, partials) and attributes.

Each call must either return an SpmdInfo whose every attribute is valid for its tensor, or raise a
typed SpmdError. Anything else (IndexError, KeyError, an invalid attribute, ...) fails the test with
the rule, the direction and the arguments.

Budget: 10 examples per direction for each distinct implementation and 2 for each further alias
(about 1,300 calls, a few seconds). ``SPMD_FUZZ_SCALE=N`` multiplies both for a longer hunt.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spmdrules as sr
from spmdrules.core.attr import DistAttr
from spmdrules.core.placements import REDUCE_TYPES
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.registry import AttrParam, Rule, TensorParam

MESH_SHAPES = [
    (1,), (2,), (3,), (4,), (8,),
    (1, 4), (2, 1), (2, 2), (2, 3), (3, 2), (2, 4), (4, 2),
    (1, 2, 4), (2, 2, 1), (2, 2, 2),
]
SIZES = [1, 2, 3, 4, 5, 6, 8, 12]
REDUCES = ["sum", "sum", "sum", "max", "min", "avg", "product", "any", "all"]
STRS = ["", "NCHW", "NHWC", "NCDHW", "SAME", "VALID", "EXPLICIT", "sum", "mean", "bogus"]
DTYPES = ["float32", "float16", "int32", "int64", "bool"]
assert set(REDUCES) <= set(REDUCE_TYPES)


def _all_names() -> list[str]:
    return sr.list_rules()


def _signature(rule: Rule) -> tuple[Any, ...]:
    """Aliases share one implementation; fuzz each implementation deeply, each name lightly."""
    return (
        rule._fwd.fn,
        None if rule._rev is None else rule._rev.fn,
        rule.inputs,
        rule.outputs,
        rule.attrs,
    )


def _distinct_names() -> list[str]:
    seen: dict[tuple[Any, ...], str] = {}
    for name in _all_names():
        seen.setdefault(_signature(sr.get_rule(name)), name)
    return sorted(seen.values())


# ---- strategies ----------------------------------------------------------------------------------
@st.composite
def meshes(draw: st.DrawFn) -> sr.ProcessMesh:
    shape = draw(st.sampled_from(MESH_SHAPES))
    n = 1
    for s in shape:
        n *= s
    ids = list(range(n))
    if draw(st.booleans()):
        ids = draw(st.permutations(ids))
    elif draw(st.booleans()):
        ids = [i + 3 for i in ids]
    return sr.ProcessMesh.from_shape(list(shape), ids)


class Ctx:
    """What one example shares across its tensors: the mesh and a base shape to draw sizes from
    (so that shapes often agree, as an op wants, and sometimes don't)."""

    def __init__(self, mesh: sr.ProcessMesh, base: list[int]) -> None:
        self.mesh = mesh
        self.base = base
        self.first_rank = 0


def _attr(draw: st.DrawFn, mesh: sr.ProcessMesh, rank: int) -> DistAttr:
    free = list(range(mesh.ndim))
    mdm: list[list[int]] = []
    for _ in range(rank):
        choice = draw(st.integers(0, 9))
        dims: list[int] = []
        if choice >= 5 and free:
            dims.append(free.pop(draw(st.integers(0, len(free) - 1))))
            if choice == 9 and free:  # co-shard
                dims.append(free.pop(draw(st.integers(0, len(free) - 1))))
        mdm.append(dims)
    partial = {d: draw(st.sampled_from(REDUCES)) for d in free if draw(st.integers(0, 3)) == 0}
    return DistAttr(mesh, multi_dims_mapping=mdm, partial=partial)


def _tensor(draw: st.DrawFn, ctx: Ctx) -> TensorSpec:
    rank = draw(st.integers(0, 4))
    shape = list(ctx.base[4 - rank :])
    for i in range(rank):
        k = draw(st.integers(0, 9))
        if k == 0:
            shape[i] = 1
        elif k == 1:
            shape[i] = draw(st.sampled_from(SIZES))
    if draw(st.integers(0, 9)) == 0:
        raw = _raw_spec(draw, ctx.mesh, shape)
        if raw is not None:
            return raw
    return TensorSpec(shape, _attr(draw, ctx.mesh, rank))


def _raw_spec(draw: st.DrawFn, mesh: sr.ProcessMesh, shape: list[int]) -> TensorSpec | None:
    """A spec from an unchecked mapping (mesh dims out of range or repeated, partial on a sharding
    mesh dim, wrong length): building it must succeed or raise an SpmdError."""
    n = len(shape) + draw(st.sampled_from([0, 0, 0, -1, 1]))
    dm = [draw(st.integers(-2, mesh.ndim)) for _ in range(max(n, 0))]
    partial = {}
    if draw(st.booleans()):
        partial[draw(st.integers(-1, mesh.ndim))] = draw(st.sampled_from([*REDUCES, "bad"]))
    try:
        return TensorSpec(shape, DistAttr(mesh, dm, partial))
    except sr.SpmdError:
        return None


def _tensor_arg(draw: st.DrawFn, ctx: Ctx, p: TensorParam) -> Any:
    if p.kind == "list":
        return [_tensor(draw, ctx) for _ in range(draw(st.integers(0, 4)))]
    if p.kind == "optional" and draw(st.integers(0, 2)) == 0:
        return None
    return _tensor(draw, ctx)


def _int(draw: st.DrawFn) -> int:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([-100, 100, 2**31, -(2**31) - 1, 0]))
    return draw(st.integers(-6, 6))


def _attr_value(draw: st.DrawFn, ctx: Ctx, a: AttrParam) -> Any:
    t = a.type
    if t == "bool":
        return draw(st.booleans())
    if t == "int":
        return _int(draw)
    if t == "float":
        return draw(st.sampled_from([0.0, 1e-5, 0.5, 1.0, 2.0, -1.0, float("inf"), float("nan")]))
    if t == "number":
        return draw(st.sampled_from([0, 2, -3, 2**53 + 1, 0.5, 2.0, float("inf"), float("nan")]))
    if t == "str":
        if a.name == "equation":
            return draw(st.sampled_from(["ij,jk->ik", "bij,bjk->bik", "i->", "ii->i", "ab,cd", "->"]))
        return draw(st.sampled_from(STRS))
    if t == "ints":
        k = draw(st.integers(0, 3))
        if k == 0 and ctx.first_rank:  # a permutation of the first tensor's dims (perm, axes)
            return list(draw(st.permutations(range(ctx.first_rank))))
        if k == 1:  # a shape with the same element count, or -1 for one dim (reshape)
            n = 1
            for s in ctx.base[4 - ctx.first_rank :]:
                n *= s
            return draw(st.sampled_from([[n], [-1], [1, n], [n, 1], [-1, 1], [0, -1], [2, -1]]))
        return [_int(draw) for _ in range(draw(st.integers(0, 4)))]
    if t == "floats":
        return [draw(st.sampled_from([0.0, 1.0, -1.0])) for _ in range(draw(st.integers(0, 3)))]
    return draw(st.sampled_from(DTYPES))


Call = tuple[list[Any], dict[str, Any]]


@st.composite
def calls(draw: st.DrawFn, params: tuple[TensorParam, ...], attrs: tuple[AttrParam, ...]) -> Call:
    ctx = Ctx(draw(meshes()), [draw(st.sampled_from(SIZES)) for _ in range(4)])
    args = [_tensor_arg(draw, ctx, p) for p in params]
    first = next((a for a in args if isinstance(a, TensorSpec)), None)
    ctx.first_rank = first.ndim if first is not None else 0
    kw = {a.name: _attr_value(draw, ctx, a) for a in attrs if draw(st.integers(0, 5))}
    return args, kw


# ---- the property --------------------------------------------------------------------------------
def _problems(attr: Any, mesh: sr.ProcessMesh, rank: int | None, where: str) -> list[str]:
    if not isinstance(attr, DistAttr):
        return [f"{where}: {attr!r} is not a DistAttr"]
    out = []
    if attr.mesh != mesh:
        out.append(f"{where}: on mesh {attr.mesh!r}, not the call's {mesh!r}")
    mdm = attr.multi_dims_mapping
    if rank is not None and len(mdm) != rank:
        out.append(f"{where}: mapping {attr.mapping_str()} has rank {len(mdm)}, the tensor {rank}")
    used: list[int] = [d for dims in mdm for d in dims]
    for d in used:
        if not isinstance(d, int) or not 0 <= d < mesh.ndim:
            out.append(f"{where}: mesh dim {d!r} out of range in {attr.mapping_str()}")
    if len(set(used)) != len(used):
        out.append(f"{where}: a mesh dim shards two tensor dims in {attr.mapping_str()}")
    for d, rt in attr.partial_items:
        if not isinstance(d, int) or not 0 <= d < mesh.ndim:
            out.append(f"{where}: partial mesh dim {d!r} out of range")
        if d in used:
            out.append(f"{where}: mesh dim {d} both partial and sharding in {attr.mapping_str()}")
        if rt not in REDUCE_TYPES:
            out.append(f"{where}: unknown reduce type {rt!r}")
    return out


def _slot_problems(
    slot: Any, given: Any, p: TensorParam, mesh: sr.ProcessMesh, where: str, ranked: bool
) -> list[str]:
    """``ranked``: the slot answers for a tensor that was passed in, so its rank is known."""
    if p.kind == "list":
        if not isinstance(slot, tuple):
            return [f"{where}: a list argument needs a tuple of attributes, got {slot!r}"]
        return _flat_problems(slot, given if ranked else None, mesh, where)
    if slot is None:
        if ranked and given is not None:
            return [f"{where}: None for a tensor that was passed"]
        return []
    if ranked and given is None:
        return _problems(slot, mesh, 0, where) if isinstance(slot, DistAttr) else []
    return _problems(slot, mesh, given.ndim if ranked else None, where)


def _flat_problems(
    slots: tuple[Any, ...], given: list[TensorSpec] | None, mesh: sr.ProcessMesh, where: str
) -> list[str]:
    if given is not None and len(slots) != len(given):
        return [f"{where}: {len(slots)} attributes for {len(given)} tensors"]
    out = []
    for i, a in enumerate(slots):
        out += _problems(a, mesh, None if given is None else given[i].ndim, f"{where}[{i}]")
    return out


def _side_problems(
    slots: tuple[Any, ...],
    params: tuple[TensorParam, ...],
    given: list[Any] | None,
    mesh: sr.ProcessMesh,
    side: str,
) -> list[str]:
    """One side (inputs or outputs) of the answer; ``given``: the tensors passed for it, if any.

    A side made of one variadic param may be answered flat, one attribute per tensor, as Paddle's
    records do (split's outs, default_'s ins and outs)."""
    if len(params) == 1 and params[0].kind == "list" and not (
        len(slots) == 1 and isinstance(slots[0], tuple)
    ):
        return _flat_problems(slots, None if given is None else given[0], mesh, f"{side} {params[0].name!r}")
    if len(slots) != len(params):
        return [f"{len(slots)} {side} attributes for {len(params)} {side} tensors"]
    out = []
    for i, p in enumerate(params):
        g = None if given is None else given[i]
        out += _slot_problems(slots[i], g, p, mesh, f"{side} {p.name!r}", given is not None)
    return out


def check(name: str, direction: str, call: Call) -> None:
    rule = sr.get_rule(name)
    args, kw = call
    fn: Callable[..., SpmdInfo] = rule.infer_forward if direction == "forward" else rule.infer_reverse
    try:
        info = fn(*args, **kw)
    except sr.SpmdError:
        return
    except Exception as e:
        tb = "".join(traceback.format_exception(e)[-3:])
        pytest.fail(
            f"{name} {direction} raised {type(e).__name__}: {e}\n  args={args!r}\n  attrs={kw!r}\n{tb}"
        )
    mesh = next(
        (t.attr.mesh for a in args for t in (a if isinstance(a, list) else [a]) if t is not None),
        None,
    )
    problems: list[str] = []
    if not isinstance(info, SpmdInfo):
        problems.append(f"returned {info!r}, not an SpmdInfo")
    elif mesh is not None:
        n_in = len(rule.inputs)
        ins, outs = rule.inputs, rule.outputs
        given_in: list[Any] = args[:n_in]
        given_out: list[Any] | None = args[n_in:] if direction == "reverse" else None
        if not outs and len(ins) == 2 and all(p.kind == "list" for p in ins):
            # Paddle's (ins, outs) rules: both lists are arguments, answered as inputs, outputs.
            ins, outs = ins[:1], ins[1:]
            given_in, given_out = args[:1], args[1:]
        problems += _side_problems(info.inputs, ins, given_in, mesh, "input")
        problems += _side_problems(info.outputs, outs, given_out, mesh, "output")
    if problems:
        pytest.fail(
            f"{name} {direction} returned invalid attributes: {'; '.join(problems)}\n"
            f"  args={args!r}\n  attrs={kw!r}\n  got={info!r}"
        )


def _property(
    name: str,
    direction: str,
    params: tuple[TensorParam, ...],
    attrs: tuple[AttrParam, ...],
    examples: int,
) -> Callable[[], None]:
    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(calls(params, attrs))
    def prop(call: Call) -> None:
        check(name, direction, call)

    return prop


def _fuzz(name: str, examples: int) -> None:
    rule = sr.get_rule(name)
    _property(name, "forward", rule.inputs, rule._fwd.attrs, examples)()
    if rule._rev is not None:
        params = (*rule.inputs, *rule.outputs)
        _property(name, "reverse", params, rule._rev.attrs, examples)()


# SPMD_FUZZ_SCALE=20 runs twenty times the examples (a longer hunt than the default < 60 s run).
SCALE = max(1, int(os.environ.get("SPMD_FUZZ_SCALE", "1")))


@pytest.mark.parametrize("name", _distinct_names())
def test_fuzz_each_rule_implementation(name: str) -> None:
    _fuzz(name, 10 * SCALE)


@pytest.mark.parametrize("name", sorted(set(_all_names()) - set(_distinct_names())))
def test_fuzz_every_alias(name: str) -> None:
    _fuzz(name, 2 * SCALE)
