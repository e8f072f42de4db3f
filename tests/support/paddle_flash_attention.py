"""A model of Paddle 3.3.1's flash_attention rules (FlashAttInferSpmd, FlashAttInferSpmdReverse),
to draw conformance cases beyond the shipped ones, as CI's hidden cases are drawn.

It follows the C++ rules step by step: unshard the sequence and head dims of the merged tensors
(reverse: v's attribute read in out's place), unshard the heads of every tensor when q's and k's
(forward: v's) head counts differ and k's given head shard does not divide k's heads, merge per
letter (one letter on two mesh dims is an error, a mesh dim wanted by two letters goes to the first),
and map every tensor off the letters; the reverse rule hands softmax back as given and answers
seed_offset with fixed_seed_offset's attribute. ``tests/conformance/test_flash_attention_cases.py``
checks that it reproduces every shipped case, and draws more in the shipped cases' distribution.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

Case = dict[str, Any]


class PaddleError(Exception):
    """Where Paddle's rule raises."""


def _merge(pairs: Sequence[tuple[str, Sequence[int]]]) -> dict[str, int]:
    letter: dict[str, int] = {}
    claims: dict[int, str] = {}
    for axes, mapping in pairs:
        for ax, d in zip(axes, mapping, strict=True):
            old = letter.get(ax, -1)
            if -1 not in (old, d) and old != d:
                raise PaddleError(f"Tensor Axis[{ax}] is Sharded by two different mesh dimension")
            letter[ax] = d if d != -1 else old
            m = letter[ax]
            if m != -1 and ax not in claims.setdefault(m, ax):
                claims[m] += ax
    for axes in claims.values():
        for ax in axes[1:]:
            letter[ax] = -1
    return letter


def _map(axes: str, letter: dict[str, int]) -> list[int]:
    return [letter.get(a, -1) for a in axes]


def _unshard(mapping: Sequence[int], dims: set[int]) -> list[int]:
    return [-1 if i in dims else d for i, d in enumerate(mapping)]


def _given(t: dict[str, Any]) -> dict[str, Any]:
    if t.get("absent") == "shape0":
        return {"dims_mapping": [], "partial": {}, "process_mesh": None}
    return {"dims_mapping": list(t["dims_mapping"]), "partial": dict(t.get("partial", {}))}


def _has_mask(mask: dict[str, Any]) -> bool:
    return not mask.get("absent") and mask["shape"] not in ([], [0])


def _uneven_k_heads(case: Case) -> bool:
    k = case["inputs"][1]
    d = k["dims_mapping"][2]
    return d != -1 and k["shape"][2] % case["mesh"]["shape"][d] != 0


def forward(case: Case) -> dict[str, Any]:
    q, k, v, fso, mask = case["inputs"]
    qd, kd = _unshard(q["dims_mapping"], {1, 3}), _unshard(k["dims_mapping"], {1, 3})
    vd = list(kd)  # Paddle reads k's mapping in v's place
    md = _unshard(mask["dims_mapping"], {2, 3}) if _has_mask(mask) else None
    if q["shape"][2] != v["shape"][2] and _uneven_k_heads(case):
        qd, kd, vd = _unshard(qd, {2}), _unshard(kd, {2}), _unshard(vd, {2})
        md = None if md is None else _unshard(md, {1})
    pairs = [("abcd", qd), ("aecd", kd), ("aecf", vd)] + ([("acbe", md)] if md else [])
    letter = _merge(pairs)
    ins = [{"dims_mapping": _map(ax, letter), "partial": {}} for ax in ("abcd", "aecd", "aecf")]
    ins += [_given(fso), _mask(mask, letter)]
    outs = [{"dims_mapping": _map(ax, letter), "partial": {}} for ax in ("abcf", "acbe", "acb")]
    outs.append({"dims_mapping": [-1], "partial": dict(fso.get("partial", {}))})
    return {"inputs": ins, "outputs": outs}


def reverse(case: Case) -> dict[str, Any]:
    q, k, v, fso, mask = case["inputs"]
    _, softmax, lse, _ = case["outputs"]
    od = _unshard(v["dims_mapping"], {1, 3})  # Paddle reads v's mapping in out's place
    ld = _unshard(lse["dims_mapping"], {2})
    if q["shape"][2] != k["shape"][2] and _uneven_k_heads(case):
        od, ld = _unshard(od, {2}), _unshard(ld, {1})
    letter = _merge([("abcf", od), ("acb", ld)])
    ins = [{"dims_mapping": _map(ax, letter), "partial": {}} for ax in ("abcd", "aecd", "aecf")]
    ins += [_given(fso), _mask(mask, letter)]
    outs = [{"dims_mapping": _map("abcf", letter), "partial": {}}, _given(softmax),
            {"dims_mapping": _map("acb", letter), "partial": {}}, _given(fso)]
    return {"inputs": ins, "outputs": outs}


def _mask(mask: dict[str, Any], letter: dict[str, int]) -> dict[str, Any]:
    if not _has_mask(mask):
        return _given(mask)
    md = _map("acbe", letter)
    if mask["shape"][1] == 1:
        md[1] = -1
    return {"dims_mapping": md, "partial": {}}


def expected(case: Case) -> dict[str, Any]:
    """Paddle's answer to ``case`` (``{"error": ...}`` where Paddle raises)."""
    try:
        return forward(case) if case["direction"] == "forward" else reverse(case)
    except PaddleError as e:
        return {"error": str(e), "error_type": "NotImplementedError"}


# ---- drawing cases as the shipped ones are drawn ----------------------------------------------
MESHES = ([2], [3], [4], [8], [1, 2], [2, 1], [2, 2], [2, 3], [3, 2], [2, 4], [4, 2], [2, 2, 1],
          [1, 2, 4], [2, 2, 2])


def _attr(rng: random.Random, ndim: int, mesh: Sequence[int]) -> tuple[list[int], dict[str, str]]:
    free = list(range(len(mesh)))
    rng.shuffle(free)
    mapping = [free.pop() if free and rng.random() < 0.4 else -1 for _ in range(ndim)]
    return mapping, {str(d): "sum" for d in free if rng.random() < 0.25}


def _absent(rng: random.Random, name: str) -> dict[str, Any]:
    shape0 = rng.random() < 0.75
    return {"name": name, "shape": [0] if shape0 else [], "dims_mapping": [], "partial": {},
            "absent": "shape0" if shape0 else "rank0"}


def draw(rng: random.Random, direction: str, index: int) -> Case:
    """A case of ``direction`` with Paddle's expected answer: random batch, sequence, head and head
    dim sizes (often uneven on the mesh), grouped-query heads, a mask over all heads or broadcast
    over them (or absent, in either convention), random shards and pending sums."""
    mesh = rng.choice(MESHES)
    b, sq, skv = rng.choice([2, 4, 6, 8]), rng.choice([1, 2, 4, 6, 8]), rng.choice([1, 2, 4, 6])
    h, d, dv = rng.choice([1, 2, 3, 4, 6, 8, 16]), rng.choice([2, 4, 6]), rng.choice([2, 4, 6])
    hk = rng.choice([n for n in (1, 2, 3, 4, 6, 8, 16) if h % n == 0])

    def tensor(name: str, shape: list[int]) -> dict[str, Any]:
        mapping, partial = _attr(rng, len(shape), mesh)
        return {"name": name, "shape": shape, "dims_mapping": mapping, "partial": partial}

    mask = (tensor("attn_mask", [b, rng.choice([h, 1]), sq, skv]) if rng.random() < 0.3
            else _absent(rng, "attn_mask"))
    ins = [tensor("q", [b, sq, h, d]), tensor("k", [b, skv, hk, d]),
           tensor("v", [b, skv, hk, dv]), _absent(rng, "fixed_seed_offset"), mask]
    attrs = {"dropout": rng.choice([0.0, 0.1]), "causal": rng.random() < 0.5,
             "return_softmax": rng.random() < 0.3, "is_test": rng.random() < 0.3}
    n = 1
    for s in mesh:
        n *= s
    case: Case = {"op": "flash_attention", "direction": direction,
                  "mesh": {"shape": list(mesh), "process_ids": list(range(n))},
                  "inputs": ins, "attrs": attrs, "case_id": f"flash_attention/{direction}/drawn{index}"}
    if direction == "forward":
        case["rule"] = "FlashAttInferSpmd"
    else:
        case.update(rule="FlashAttInferSpmdReverse", reverse_kind="reverse", outputs=[
            tensor("out", [b, sq, h, dv]), tensor("softmax", [b, h, sq, skv]),
            tensor("softmax_lse", [b, h, sq]), tensor("seed_offset", [2])])
    case["expected"] = expected(case)
    return case
