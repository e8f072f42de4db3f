"""The deviations of the elementwise rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import (
    paddle_drops_uneven,
    register_deviation,
    rule_module,
    uneven_dropped,
)
from spmdrules.core.attr import DistAttr, MultiDims
from spmdrules.core.spec import SpmdInfo

_rules = rule_module("elementwise")


def _norm(e: dict[str, Any]) -> MultiDims:
    if "multi_dims_mapping" in e:
        return tuple(tuple(d) for d in e["multi_dims_mapping"])
    return tuple(() if d == -1 else (d,) for d in e["dims_mapping"])


def _swiglu_halves(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Paddle shards the last dim of x (and out) for swiglu without y; we replicate exactly that
    dim, and agree on everything else."""
    if isinstance(got, BaseException) or "error" in case["expected"]:
        return False
    if "absent" not in case["inputs"][1]:
        return False
    exp_x = _norm(case["expected"]["inputs"][0])
    exp_out = _norm(case["expected"]["outputs"][0])
    gx, gout = got.inputs[0], got.outputs[0]
    if not isinstance(gx, DistAttr) or not isinstance(gout, DistAttr):
        return False
    x = case["inputs"][0]["shape"]
    out = (*x[:-1], x[-1] // 2) if x else ()
    mesh = case["mesh"]["shape"]

    def same(ours: MultiDims, theirs: MultiDims, shape: Any) -> bool:
        # Paddle may also replicate an uneven dim that we keep (keeps-uneven-shard)
        return ours == theirs or uneven_dropped(ours, shape, mesh) == theirs

    return (
        bool(exp_out) and bool(exp_out[-1]) and gx.partial_items == () and gout.partial_items == ()
        and same(gx.multi_dims_mapping, _rules.halves_mapping(exp_x), x)
        and same(gout.multi_dims_mapping, _rules.halves_mapping(exp_out), out)
    )


def _reverse_size1_out(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Paddle echoes out's sharded size-1 dims next to inputs that replicate them; we return out
    as those inputs produce it, size-1 dims replicated, and agree on everything else."""
    exp = case["expected"]
    if case.get("direction") != "reverse" or isinstance(got, BaseException) or "error" in exp:
        return False
    if any("absent" in t for t in case["inputs"]):
        return False
    if len(got.inputs) != len(exp["inputs"]) or len(got.outputs) != 1:
        return False
    for g, e in zip(got.inputs, exp["inputs"], strict=True):
        if not isinstance(g, DistAttr) or g.partial_items or g.multi_dims_mapping != _norm(e):
            return False
    out, e_out = got.outputs[0], exp["outputs"][0]
    if not isinstance(out, DistAttr) or out.partial_items or e_out.get("partial"):
        return False
    shape = case["outputs"][0]["shape"]
    paddle = _norm(e_out)
    size1_cleared = tuple(() if n == 1 else d for n, d in zip(shape, paddle, strict=True))
    return paddle != size1_cleared and out.multi_dims_mapping == size1_cleared


register_deviation(
    "binary-reverse-size1-out-replicated",
    {*_rules.BINARY_OPS, "multiply", "swiglu"},
    "binary reverse: Paddle returns out's sharded size-1 dims unchanged next to inputs that "
    "replicate them (blocks the inputs cannot produce); we return out with those dims replicated.",
    _reverse_size1_out,
)

register_deviation(
    "swiglu-halves-replicated",
    {"swiglu"},
    "swiglu without y: x's last dim holds [gate | value]; a block of it is not such a pair, so "
    "we keep that dim (and out's) replicated where Paddle shards it.",
    _swiglu_halves,
)


def _keeps_uneven(case: dict[str, Any], got: Any) -> bool:
    """Every tensor has x's shape: Paddle's answer is ours with uneven dims replicated."""
    return paddle_drops_uneven(case, got)


register_deviation(
    "keeps-uneven-shard",
    {*_rules.UNARY_OPS, "gelu", "swiglu"},
    "A dim that its mesh dims do not divide evenly: Paddle replicates it (quirk 6), we keep the "
    "shard. Correct either way (each block, of any size, is computed whole); ours keeps the "
    "parallelism. The policy of every family (docs/deviations/uneven.md).",
    _keeps_uneven, kind="parallelism",
)

