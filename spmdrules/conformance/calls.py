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


def _slots_equal(expected: list[Any], got: Sequence[Any]) -> bool:
    if len(expected) != len(got):
        return False
    for e, g in zip(expected, got, strict=True):
        if isinstance(e, list):
            if not isinstance(g, list | tuple) or len(e) != len(g):
                return False
            if any(_norm_expected(ei) != _norm_ours(gi) for ei, gi in zip(e, g, strict=True)):
                return False
        else:
            if isinstance(g, tuple):
                return False
            if "process_mesh" in e and e["process_mesh"] is None and g is None:
                continue  # Paddle's mesh-less placeholder for an absent tensor: our None
            if _norm_expected(e) != _norm_ours(g):
                return False
    return True


def agrees(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    exp = case["expected"]
    if "error" in exp:
        return isinstance(got, SpmdError)
    if isinstance(got, BaseException):
        return False
    return _slots_equal(exp.get("inputs", []), got.inputs) and _slots_equal(
        exp.get("outputs", []), got.outputs
    )
