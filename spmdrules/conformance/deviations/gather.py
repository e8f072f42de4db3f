"""The deviations of the gather rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import register_deviation


def _maps(entries: list[Any]) -> list[list[int]]:
    return [list(e["dims_mapping"]) for e in entries if isinstance(e, dict)]


def _index_keeps_its_shard(case: dict[str, Any], got: Any) -> bool:
    """Only the index's attribute differs: Paddle hands the index back as given, sharded on mesh
    dims that the result's index dims are not."""
    exp = case["expected"]
    if "error" in exp or isinstance(got, BaseException):
        return False
    theirs_in, theirs_out = _maps(exp["inputs"]), _maps(exp["outputs"])
    ours_in = [list(a.dims_mapping) for a in got.inputs]
    ours_out = [list(a.dims_mapping) for a in got.outputs]
    return (theirs_out == ours_out and theirs_in[0] == ours_in[0]
            and theirs_in[1] != ours_in[1] and any(d != -1 for d in theirs_in[1]))


register_deviation(
    "gather-index-keeps-its-shard", {"gather", "index_select"},
    "Paddle returns the index's attribute as given even when the result does not shard the index's "
    "dims that way (x's dims took the mesh dim), so a rank gathers only its block of positions "
    "where the result claims all of them; we give the index the layout of the result's index dims.",
    _index_keeps_its_shard,
)


def _keeps_out_partial(case: dict[str, Any], got: Any) -> bool:
    """Reverse: Paddle hands the result back with its pending reduction, from complete inputs."""
    exp = case["expected"]
    if case["direction"] != "reverse" or "error" in exp or isinstance(got, BaseException):
        return False
    out = exp["outputs"][0]
    return (bool(out.get("partial")) and _maps(exp["outputs"]) == [list(a.dims_mapping) for a in
                                                                  got.outputs]
            and _maps(exp["inputs"]) == [list(a.dims_mapping) for a in got.inputs])


def _invalid_result(case: dict[str, Any], got: Any) -> bool:
    """Paddle's result attribute is no attribute of the result: one mesh dim on two of its dims,
    or the wrong rank (a 0-d result answered as 1-d)."""
    exp = case["expected"]
    if "error" in exp or isinstance(got, BaseException):
        return False
    for theirs, ours in zip(_maps(exp["outputs"]), got.outputs, strict=False):
        used = [d for d in theirs if d != -1]
        if len(theirs) != ours.ndim or len(used) != len(set(used)):
            return True
    return False


register_deviation(
    "gather-reverse-keeps-partial", {"gather", "gather_nd"},
    "In reverse Paddle returns the result's attribute as given, pending reduction included, though "
    "complete inputs make a complete result (a pending sum of full copies would count them once "
    "per rank); we return it complete.",
    _keeps_out_partial,
)
register_deviation(
    "gather-nd-invalid-result", {"gather_nd"},
    "Paddle's gather_nd answers a result attribute that shards two dims on one mesh dim (the "
    "index's and x's trailing dims are not merged), or a 1-d attribute for a 0-d result; we "
    "resolve the mesh dim (x's dim keeps it) and answer the result's rank.",
    _invalid_result,
)


def _negative_axis(case: dict[str, Any], got: Any) -> bool:
    return (case["attrs"].get("axis", 0) < 0 and "error" in case["expected"]
            and not isinstance(got, BaseException))


def _grad_misses_partial(case: dict[str, Any], got: Any) -> bool:
    """Ours differs only in x_grad's pending sum over the mesh dims that shard the cotangent's
    axis (each rank scatters its positions only)."""
    exp = case["expected"]
    if "error" in exp or isinstance(got, BaseException):
        return False
    ours = got.outputs[0]
    return (bool(ours.partial) and not exp["outputs"][0].get("partial")
            and _maps(exp["outputs"]) == [list(a.dims_mapping) for a in got.outputs])


register_deviation(
    "take-along-axis-negative-axis", {"take_along_axis"},
    "Paddle fails with a raw std::out_of_range on a negative axis (quirk 22); we normalise it.",
    _negative_axis,
)
register_deviation(
    "take-along-axis-grad-misses-partial", {"take_along_axis"},
    "Paddle's gradient rule lays x_grad out complete though each rank scatters only the positions "
    "of its block of the cotangent's (sharded) axis; we mark x_grad a pending sum over those mesh "
    "dims.",
    _grad_misses_partial,
)


def _masked_lookup(case: dict[str, Any], got: Any) -> bool:
    """Forward, x's axis split (by one mesh dim or several): Paddle gathers the axis whole; ours
    keeps it split and makes the result a pending sum over those mesh dims."""
    exp = case["expected"]
    if case["direction"] != "forward" or "error" in exp or isinstance(got, BaseException):
        return False
    x = case["inputs"][0]
    ndim = len(x["shape"])
    if not ndim or len(case["inputs"][1]["shape"]) != 1:
        return False
    axis = case["attrs"].get("axis", 0)
    axis = axis + ndim if axis < 0 else axis
    given = x.get("dims_mapping", [])[axis]
    if given == -1 or _maps(exp["inputs"])[0][axis] != -1:
        return False
    ours_x, ours_out = got.inputs[0], got.outputs[0]
    kept = ours_x.multi_dims_mapping[axis]
    return bool(kept) and set(kept) <= ours_out.partial_dims


register_deviation(
    "index-select-masked-lookup", {"gather", "index_select"},
    "Paddle gathers x's indexed axis whole before gather or index_select by a 1-D index; ours "
    "keeps its split and looks up masked, as a vocab-parallel embedding: each rank reads the rows "
    "it holds and zeros for the others, so the result is a pending sum over the axis' mesh dims "
    "(masked by the index's dim where one mesh dim splits the axis): no table is gathered.",
    _masked_lookup, kind="parallelism",
)
