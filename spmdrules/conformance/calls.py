"""A recorded case as a call of our rule, and whether our answer agrees with Paddle's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.registry import get_rule


def _spec(mesh: ProcessMesh, t: dict[str, Any]) -> TensorSpec | None:
    if t.get("absent") == "shape0":
        return None  # the contract's absent optional tensor
    partial = {int(k): v for k, v in t.get("partial", {}).items()}
    return TensorSpec(t["shape"], DistAttr(mesh, t["dims_mapping"], partial))


def _arg(mesh: ProcessMesh, a: Any) -> Any:
    if isinstance(a, list):
        return [_spec(mesh, t) for t in a]
    return _spec(mesh, a)


def build_call(case: dict[str, Any]) -> tuple[str, str, list[Any], dict[str, Any]]:
    """(rule name, 'forward' | 'reverse', positional tensor args, attrs) for a case record."""
    m = case["mesh"]
    mesh = ProcessMesh.from_shape(m["shape"], m["process_ids"])
    # Call order is always inputs then outputs; forward records carry outputs only for the
    # generic rules, whose forward takes (ins, outs).
    args = [_arg(mesh, a) for a in (*case["inputs"], *case.get("outputs", []))]
    if case["direction"] == "forward":
        return case["op"], "forward", args, dict(case["attrs"])
    if case.get("reverse_kind") == "grad":
        return case["op"] + "_grad", "forward", args, dict(case["attrs"])
    return case["op"], "reverse", args, dict(case["attrs"])


def call_engine(case: dict[str, Any]) -> SpmdInfo:
    name, direction, args, attrs = build_call(case)
    rule = get_rule(name)
    if direction == "forward":
        return rule.infer_forward(*args, **attrs)
    return rule.infer_reverse(*args, **attrs)


_Norm = tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, str], ...]]


def _norm_expected(e: dict[str, Any]) -> _Norm:
    if "multi_dims_mapping" in e:
        mdm = tuple(tuple(d) for d in e["multi_dims_mapping"])
    else:
        mdm = tuple(() if d == -1 else (d,) for d in e["dims_mapping"])
    part = tuple(sorted((int(k), v) for k, v in e.get("partial", {}).items()))
    return mdm, part


def _norm_ours(a: DistAttr | None) -> _Norm:
    if a is None:
        return (), ()
    return a.multi_dims_mapping, a.partial_items


def _without(n: _Norm, unit: frozenset[int]) -> _Norm:
    """The answer with the mesh dims of size 1 left out: sharding over one process, or a pending
    reduction over one process, is no sharding and no reduction."""
    if not unit:
        return n
    return (tuple(tuple(d for d in dims if d not in unit) for dims in n[0]),
            tuple(p for p in n[1] if p[0] not in unit))


def _replicated(a: DistAttr | None) -> bool:
    return a is None or (not any(a.multi_dims_mapping) and not a.partial_items)


def _slots_equal(expected: list[Any], got: Sequence[Any], absent: frozenset[int] = frozenset(),
                 unit: frozenset[int] = frozenset()) -> bool:
    """``absent``: slots given as a ``rank0`` absent tensor. Paddle answers them a replicated
    1-D attribute, we the given 0-d one replicated (or None): both say "nothing to shard"."""
    if len(expected) != len(got):
        return False
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        if i in absent and isinstance(e, dict) and not isinstance(g, tuple) and _replicated(g) \
                and _norm_expected(e) == (((),) * len(e.get("dims_mapping", [])), ()):
            continue
        if isinstance(e, list):
            if not isinstance(g, list | tuple) or len(e) != len(g):
                return False
            if any(_without(_norm_expected(ei), unit) != _without(_norm_ours(gi), unit)
                   for ei, gi in zip(e, g, strict=True)):
                return False
        else:
            if isinstance(g, tuple):
                return False
            if "process_mesh" in e and e["process_mesh"] is None and g is None:
                continue  # Paddle's mesh-less placeholder for an absent tensor: our None
            if _without(_norm_expected(e), unit) != _without(_norm_ours(g), unit):
                return False
    return True


def agrees(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    exp = case["expected"]
    if "error" in exp:
        return isinstance(got, SpmdError)
    if isinstance(got, BaseException):
        return False
    absent = frozenset(i for i, t in enumerate(case["inputs"])
                       if isinstance(t, dict) and t.get("absent") == "rank0")
    unit = frozenset(d for d, n in enumerate(case["mesh"]["shape"]) if n == 1)
    return _slots_equal(exp.get("inputs", []), got.inputs, absent, unit) and _slots_equal(
        exp.get("outputs", []), got.outputs, frozenset(), unit
    )
