"""The deviations of the flash_attention rule from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

import math
from typing import Any

from spmdrules.conformance.deviation import _norm, _ours, register_deviation

_OUT, _SOFTMAX, _LSE, _SEED = range(4)


def _count(mesh_shape: list[int], e: dict[str, Any], dim: int) -> int:
    dims = _norm(e, False)[0][dim]
    return math.prod(mesh_shape[d] for d in dims)


def _slots_agree(case: dict[str, Any], got: Any, skip_outputs: set[int]) -> bool:
    """Paddle's answer equals ours on every slot but the skipped outputs (absent inputs: none)."""
    exp = case["expected"]
    for slot, ours in (("inputs", got.inputs), ("outputs", got.outputs)):
        for i, (e, g) in enumerate(zip(exp[slot], ours, strict=True)):
            if slot == "outputs" and i in skip_outputs:
                continue
            if slot == "inputs" and case["inputs"][i].get("absent"):
                continue
            if _norm(e, True) != _ours(g):
                return False
    return True


def _usable(case: dict[str, Any], got: Any) -> bool:
    return "error" not in case["expected"] and not isinstance(got, BaseException)


def _gqa_heads_split(case: dict[str, Any], got: Any) -> bool:
    """Grouped-query heads split by a mesh count that does not divide k's (or v's) heads."""
    if not _usable(case, got):
        return False
    q, k, v = (t["shape"] for t in case["inputs"][:3])
    if q[2] == k[2] == v[2]:
        return False
    mesh = case["mesh"]["shape"]
    n = _count(mesh, case["expected"]["inputs"][0], 2)
    return n > 1 and (k[2] % n or v[2] % n) != 0 and not got.inputs[0].multi_dims_mapping[2]


def _echoes_softmax(case: dict[str, Any], got: Any) -> bool:
    if not _usable(case, got) or case["direction"] != "reverse":
        return False
    given = case["outputs"][_SOFTMAX]
    theirs = case["expected"]["outputs"][_SOFTMAX]
    echoed = _norm(theirs, True) == _norm(given, True)
    return echoed and _norm(theirs, True) != _ours(got.outputs[_SOFTMAX]) and _slots_agree(
        case, got, {_SOFTMAX, _SEED})


def _seed_offset_attr(case: dict[str, Any], got: Any) -> bool:
    if not _usable(case, got) or case["direction"] != "reverse":
        return False
    theirs = case["expected"]["outputs"][_SEED]
    wrong_rank = theirs.get("process_mesh", 0) is None or len(theirs["dims_mapping"]) != len(
        case["outputs"][_SEED]["shape"])
    return wrong_rank and _slots_agree(case, got, {_SEED})


register_deviation(
    "flash-attention-gqa-heads-split", {"flash_attention"},
    "Paddle splits grouped-query heads (q has g times k's heads) by a mesh count that does not "
    "divide k's head count when k's own heads were not split (or a mask or q split them): some "
    "rank then holds q heads without their k and v head. We keep the heads whole there.",
    _gqa_heads_split,
)
register_deviation(
    "flash-attention-reverse-echoes-softmax", {"flash_attention"},
    "Paddle's reverse rule returns the given softmax attribute unchanged (its sequence shards, "
    "its pending sums), which the answered q, k and v do not produce; we answer the softmax "
    "that they produce, split like out on batch and heads.",
    _echoes_softmax,
)
register_deviation(
    "flash-attention-reverse-seed-offset", {"flash_attention"},
    "Paddle's reverse rule answers the seed_offset output with fixed_seed_offset's attribute "
    "(no mesh when it is absent, rank 0 for a rank-1 tensor); we answer it replicated, as the "
    "forward rule does.",
    _seed_offset_attr,
)
