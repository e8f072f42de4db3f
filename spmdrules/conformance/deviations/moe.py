"""The deviations of the moe_combine rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import _norm, register_deviation


def _ours_raised(got: Any) -> bool:
    return isinstance(got, BaseException)


def _x_rows_follow_tokens(case: dict[str, Any], got: Any) -> bool:
    """Paddle gives x's rows (gathered by scatter_index) the tokens' letter: x's given row shard
    spreads to the tokens (or conflicts with theirs), or the tokens' shard spreads to x's rows."""
    if _ours_raised(got):
        return False
    x_given = case["inputs"][0]["dims_mapping"][0] != -1
    exp = case["expected"]
    if "error" in exp:
        return bool(x_given and "Axis[s]" in exp["error"])
    theirs = _norm(exp["inputs"][0], False)[0][0]
    return bool(x_given or theirs != got.inputs[0].multi_dims_mapping[0])


def _partial_on_mesh_dim_1(case: dict[str, Any], got: Any) -> bool:
    """Paddle marks a split k's pending sum on mesh dim 1 whatever mesh dim splits k (quirk 17),
    or raises because mesh dim 1 also splits a dim of y."""
    if _ours_raised(got):
        return False
    exp = case["expected"]
    if "error" in exp:
        return "Set dim 1 as Partial" in exp["error"]
    want = [e for e in exp["outputs"] if e.get("partial")]
    return any(e["partial"] == {"1": "sum"} for e in want) and got.outputs[0].partial_items != (
        (1, "sum"),)


register_deviation(
    "moe-combine-x-rows-follow-tokens", {"moe_combine"},
    "Paddle gives x's rows the tokens' letter, but a token's row of y reads x rows anywhere "
    "(by scatter_index): split alike, a rank lacks the rows it gathers. We give x's rows their "
    "own letter: split, each rank gathers the rows it holds and y is a pending sum.",
    _x_rows_follow_tokens,
)
register_deviation(
    "moe-combine-partial-mesh-dim", {"moe_combine"},
    "Paddle marks y partial on mesh dim 1 whenever k is split, whatever mesh dim splits k "
    "(quirk 17), and raises when mesh dim 1 also splits y; y's pending sum is over k's mesh dims.",
    _partial_on_mesh_dim_1,
)


def _grad_weights_miss_hidden_sum(case: dict[str, Any], got: Any) -> bool:
    """Paddle's grad_combine_weights is complete where ours is a pending sum (the hidden dim is
    contracted on split blocks); every other slot agrees."""
    exp = case["expected"]
    if _ours_raised(got) or "error" in exp or case["direction"] != "reverse":
        return False
    for slot, ours in (("inputs", got.inputs), ("outputs", got.outputs)):
        for i, (e, g) in enumerate(zip(exp[slot], ours, strict=True)):
            mine = (g.multi_dims_mapping, () if (slot, i) == ("outputs", 1) else g.partial_items)
            if _norm(e, True) != mine:
                return False
    return bool(got.outputs[1].partial_items) and not exp["outputs"][1].get("partial")


register_deviation(
    "moe-combine-grad-weights-miss-hidden-sum", {"moe_combine"},
    "Paddle's gradient rule answers grad_combine_weights complete while the hidden dim "
    "(contracted: grad_w[i, k] = sum_h grad_y[i, h] x[index[i, k], h]) is split; each rank then "
    "holds part of the sum. Ours is a pending sum over the hidden dim's mesh dims.",
    _grad_weights_miss_hidden_sum,
)
