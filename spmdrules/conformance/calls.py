"""A recorded case as a call of our rule, and whether our answer agrees with Paddle's."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance import formats
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


def agrees(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Is ``got`` Paddle's answer, up to the format equivalences of :mod:`formats`?"""
    exp = case["expected"]
    if "error" in exp:
        return isinstance(got, SpmdError)
    if isinstance(got, BaseException):
        return False
    case, got = formats.squeezed(case, got)
    assert isinstance(got, SpmdInfo)
    slots = formats.pairs(case, got)
    return slots is not None and all(formats.same(e, g, how) for e, g, how in slots)
