"""The deviations of the slice rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import register_deviation


def _decrease_axis(case: dict[str, Any], got: Any) -> bool:
    return bool(case["attrs"].get("decrease_axis")) and not isinstance(got, BaseException)


def _mappings(entries: list[Any]) -> list[list[int]]:
    return [list(e["dims_mapping"]) for e in entries if isinstance(e, dict)]


def _keeps_a_sliced_shard(case: dict[str, Any], got: Any) -> bool:
    """Paddle keeps the shard of a sliced axis that we replicate; nothing else differs."""
    exp = case["expected"]
    if "error" in exp or isinstance(got, BaseException):
        return False
    ndim = len(case["inputs"][0]["shape"])
    sliced = {a % ndim for a in case["attrs"]["axes"]}
    theirs = _mappings(exp["inputs"]) + _mappings(exp["outputs"])
    ours = [list(a.dims_mapping) for a in (*got.inputs, *got.outputs)]
    if len(theirs) != len(ours) or theirs == ours:
        return False
    return all(
        t == o or (i in sliced and o == -1 and t != -1)
        for tm, om in zip(theirs, ours, strict=True) for i, (t, o) in enumerate(zip(tm, om,
                                                                                   strict=True))
    )


register_deviation(
    "slice-decrease-axis", {"slice"},
    "Paddle's slice rule ignores decrease_axis: forward answers an output attribute of the input's "
    "rank (it does not fit the output), and reverse raises on any decrease_axis; we drop the "
    "decreased dims from the output's mapping.",
    _decrease_axis,
)
register_deviation(
    "strided-slice-keeps-last-axis-shard", {"strided_slice", "strided_slice_grad"},
    "Paddle keeps the shard of a strided slice's last axis when the local size divides the "
    "stride, but an output block then needs input elements other ranks hold (any start, or a "
    "negative stride); we replicate every sliced axis.",
    _keeps_a_sliced_shard,
)
