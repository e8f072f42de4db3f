"""The deviations of the concat_split rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdrules.conformance.deviation import register_deviation, rule_module
from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.spec import SpmdInfo

_rules = rule_module("concat_split")


def _norm(e: dict[str, Any]) -> tuple[MultiDims, PartialItems]:
    if "multi_dims_mapping" in e:
        mdm = tuple(tuple(d) for d in e["multi_dims_mapping"])
    else:
        mdm = tuple(() if d == -1 else (d,) for d in e["dims_mapping"])
    return mdm, tuple(sorted((int(k), v) for k, v in e.get("partial", {}).items()))


def _ours(a: object) -> tuple[MultiDims, PartialItems]:
    assert isinstance(a, DistAttr)
    return a.multi_dims_mapping, a.partial_items


def _flat(slots: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for s in slots:
        out.extend(s) if isinstance(s, list | tuple) else out.append(s)
    return out


def _partial_pieces_kept(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Paddle keeps the partial on the returned input but drops it on the output(s); we keep it."""
    if isinstance(got, BaseException) or case["direction"] != "forward":
        return False
    exp_in, exp_out = _flat(case["expected"]["inputs"]), _flat(case["expected"]["outputs"])
    our_in, our_out = _flat(list(got.inputs)), _flat(list(got.outputs))
    if [_norm(e) for e in exp_in] != [_ours(a) for a in our_in] or len(exp_out) != len(our_out):
        return False
    kept = _ours(our_in[0])[1]
    return bool(kept) and all(
        _norm(e) == (_ours(a)[0], ()) and _ours(a)[1] == kept
        for e, a in zip(exp_out, our_out, strict=True)
    )


def _join_reverse_echoes_out(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Paddle returns the given out unchanged (sharded on the op axis / partial) while the inputs it
    returns give a replicated, non-partial op axis; we return the out the inputs produce."""
    if isinstance(got, BaseException) or case["direction"] != "reverse":
        return False
    exp = case["expected"]
    if [_norm(e) for e in _flat(exp["inputs"])] != [_ours(a) for a in _flat(list(got.inputs))]:
        return False
    given = _norm(case["outputs"][0])
    if _norm(exp["outputs"][0]) != given:
        return False
    ours_mdm, ours_part = _ours(got.outputs[0])
    changed = [i for i, (g, o) in enumerate(zip(given[0], ours_mdm, strict=True)) if g != o]
    ndim = len(ours_mdm)
    axis = case["attrs"].get("axis", 0)
    axis = axis + ndim if axis < 0 else axis
    return (bool(changed) or bool(given[1])) and not ours_part and all(
        i == axis and not ours_mdm[i] for i in changed
    )


def _concat_1d_unshared_partial(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """1-D concat: Paddle returns every input with its own partial and a non-partial output; we
    keep only the sum/avg partials that all inputs share (on the output too) and drop the rest."""
    if isinstance(got, BaseException) or case["direction"] != "forward":
        return False
    given = [_norm(t) for t in case["inputs"][0]]
    if any(len(m) != 1 for m, _ in given):
        return False
    shared = set(given[0][1]).intersection(*(set(p) for _, p in given[1:]))
    shared_items = tuple(sorted(p for p in shared if p[1] in _rules.LINEAR_REDUCE))
    exp_in = [_norm(e) for e in case["expected"]["inputs"][0]]
    our_in = [_ours(a) for a in _flat(list(got.inputs))]
    if len(exp_in) != len(our_in) or _norm(case["expected"]["outputs"][0])[1]:
        return False
    return all(
        e[0] == o[0] and e[1] == g[1] and o[1] == shared_items
        for e, o, g in zip(exp_in, our_in, given, strict=True)
    ) and _ours(got.outputs[0]) == (our_in[0][0], shared_items)


register_deviation(
    "concat-1d-unshared-partial", {"concat"},
    "1-D concat: Paddle keeps each input's own partial but returns a non-partial output, so the "
    "ranks hold different concatenations; we keep only the linear partials every input shares "
    "(on the output too) and reshard the others to replicated.",
    _concat_1d_unshared_partial,
)
register_deviation(
    "partial-pieces-kept", {"concat", "unbind"},
    "concat/unbind of partial tensors: Paddle keeps the partial on the inputs but returns a "
    "non-partial output; the pieces of a partial tensor (and the concat of partial pieces) are "
    "partial, so we keep it on the output too.",
    _partial_pieces_kept,
)
register_deviation(
    "join-reverse-echoes-out", {"concat", "stack"},
    "concat/stack reverse: Paddle echoes the given out (sharded on the op axis and/or partial) "
    "while the inputs it returns are replicated and non-partial there; we return the out that "
    "the local concat/stack of those inputs produces.",
    _join_reverse_echoes_out,
)
