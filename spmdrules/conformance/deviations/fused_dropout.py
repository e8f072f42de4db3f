"""The deviations of fused_dropout_add from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import register_deviation
from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import SpmdInfo


def _norm(e: dict[str, Any]) -> tuple[Any, Any]:
    mdm = e.get("multi_dims_mapping")
    m = tuple(tuple(d) for d in mdm) if mdm else tuple(() if d < 0 else (d,) for d in e["dims_mapping"])
    return m, tuple(sorted((int(k), v) for k, v in e.get("partial", {}).items()))


def _echoes(case: dict[str, Any], got: Any) -> bool:
    """Every slot where Paddle differs from ours is Paddle handing back the attribute it was given
    (the inputs in forward, the outputs in reverse)."""
    exp = case["expected"]
    if "error" in exp or not isinstance(got, SpmdInfo):
        return False
    given = [*case["inputs"], *case.get("outputs", [])]
    if case["direction"] == "forward":
        given += [None, None]
    want = [*exp["inputs"], *exp["outputs"]]
    ours = [*got.inputs, *got.outputs]
    if not len(given) == len(want) == len(ours):
        return False
    echoed = False
    for g, e, o in zip(given, want, ours, strict=True):
        if not isinstance(o, DistAttr):
            return False
        if _norm(e) == (o.multi_dims_mapping, o.partial_items):
            continue
        if g is None or _norm(e) != _norm(g):
            return False
        echoed = True
    return echoed


register_deviation(
    "fused-dropout-add-echoes-given", {"fused_dropout_add"},
    "Paddle hands back attributes it was given where they disagree with the layout it infers: "
    "forward returns x and y unchanged (another layout than out's, or a pending sum) next to an "
    "out in the merged layout; reverse returns out (a size-1 dim still sharded, a partial) and "
    "seed_offset (a partial) unchanged. Ours lays x, y and out out alike and drops the partials.",
    _echoes,
)
