"""The deviations of the fused_rotary_position_embedding rule from Paddle 3.3.1."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import _norm, _ours, register_deviation

_SIN, _COS = 3, 4


def _shards_table_unit_dims(case: dict[str, Any], got: Any) -> bool:
    """Paddle's answer is ours but for sin or cos dims of size 1 that it keeps split."""
    exp = case["expected"]
    if "error" in exp or isinstance(got, BaseException):
        return False
    differs = False
    for slot, ours in (("inputs", got.inputs), ("outputs", got.outputs)):
        for i, (e, g) in enumerate(zip(exp[slot], ours, strict=True)):
            given = case[slot][i] if slot == "inputs" else None
            if given is not None and given.get("absent"):
                continue
            theirs, mine = _norm(e, True), _ours(g)
            if theirs == mine:
                continue
            if slot != "inputs" or i not in (_SIN, _COS) or theirs[1] != mine[1]:
                return False
            for n, t, m in zip(given["shape"], theirs[0], mine[0], strict=True):  # type: ignore[index]
                if t != m and (n != 1 or m):
                    return False
            differs = True
    return differs


register_deviation(
    "rope-table-splits-size-one-dims", {"fused_rotary_position_embedding"},
    "Paddle keeps the given split of sin's and cos's size-1 batch and head dims ([1, seq, 1, "
    "head_dim] broadcast over q's batch and heads; in the sequence-split case cos even takes "
    "sin's): the ranks past the first then hold an empty table and rotate nothing. We replicate "
    "those dims.",
    _shards_table_unit_dims,
)
