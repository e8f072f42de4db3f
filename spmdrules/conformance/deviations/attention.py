"""The deviations of the flash_attention rule from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

import math
from typing import Any

from spmdrules.conformance import formats
from spmdrules.conformance.deviation import _norm, register_deviation

_OUT, _SOFTMAX, _LSE, _SEED = range(4)
#: the heads dim of each slot, inputs (q, k, v, fixed_seed_offset, mask) then outputs
_HEADS = (2, 2, 2, None, 1, 2, 1, 1, None)


def _count(mesh_shape: list[int], e: dict[str, Any], dim: int) -> int:
    dims = _norm(e, False)[0][dim]
    return math.prod(mesh_shape[d] for d in dims)


def _usable(case: dict[str, Any], got: Any) -> bool:
    return "error" not in case["expected"] and not isinstance(got, BaseException)


def _same_but(case: dict[str, Any], got: Any, skip: set[int], heads: bool = False) -> bool:
    """Paddle's answer is ours, slot by slot as the comparator reads them (its format
    equivalences), but the skipped slots (inputs then outputs) and, with ``heads``, the heads
    dims Paddle splits."""
    slots = formats.pairs(case, got)
    if slots is None or len(slots) != len(_HEADS):
        return False
    for i, (e, g, how) in enumerate(slots):
        if i in skip:
            continue
        h = _HEADS[i]
        if heads and h is not None and isinstance(e, dict) and e.get("dims_mapping"):
            e = dict(e, dims_mapping=[-1 if p == h else d for p, d in enumerate(e["dims_mapping"])])
            e.pop("multi_dims_mapping", None)
        if not formats.same(e, g, how):
            return False
    return True


def _gqa_heads_split(case: dict[str, Any], got: Any) -> bool:
    """Grouped-query heads split by a mesh count that does not divide k's (or v's) heads."""
    if not _usable(case, got):
        return False
    q, k, v = (t["shape"] for t in case["inputs"][:3])
    if q[2] == k[2] == v[2]:
        return False
    mesh = case["mesh"]["shape"]
    n = _count(mesh, case["expected"]["inputs"][0], 2)
    echo = {len(case["inputs"]) + _SOFTMAX} if case["direction"] == "reverse" else set()
    return n > 1 and (k[2] % n or v[2] % n) != 0 and not got.inputs[0].multi_dims_mapping[2] \
        and _same_but(case, got, echo, heads=True)


def _echoes_softmax(case: dict[str, Any], got: Any) -> bool:
    if not _usable(case, got) or case["direction"] != "reverse":
        return False
    given = case["outputs"][_SOFTMAX]
    theirs = case["expected"]["outputs"][_SOFTMAX]
    echoed = _norm(theirs, True) == _norm(given, True)
    return echoed and _same_but(case, got, {len(case["inputs"]) + _SOFTMAX})


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
    "that they produce, split like out on batch and heads. (Without return_softmax no softmax "
    "is written, and any attribute compares equal: formats.UNWRITTEN.)",
    _echoes_softmax,
)
