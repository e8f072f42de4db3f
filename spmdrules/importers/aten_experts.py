"""The ops of Hugging Face's default experts path (``experts_implementation="grouped_mm"``:
Mixtral, Qwen2-MoE, OLMoE, ...), each exactly as registered ops of existing families.

That path sorts the token copies by expert (``sort``), counts them per expert (``histc``, whose
``cumsum`` is each group's end), multiplies each copy by its expert's weights
(``transformers::grouped_mm_fallback`` on CPU in float32; ``aten._grouped_mm``, which it
calls in bfloat16, is not mapped), and restores the order
by the inverse permutation (``empty_permuted`` written whole by ``index_put``).

* ``sort`` is the sort family's ``argsort``. Rows that tie may come in another order than
  torch's (torch's ``stable=False`` leaves it unspecified); the experts path undoes its own
  permutation, so its result does not depend on it.
* ``histc`` counts, per bin, the elements whose bin index ``floor((x - min) * bins / (max -
  min))`` (``max`` itself in the last bin) it is, as a comparison with each bin and a sum: exact
  wherever no element lies within rounding of an inner bin edge, which integer expert ids never
  do.
* A grouped matmul of ``input [S, K]`` by ``weight [E, K, N]`` with group ends ``offs [E]``
  multiplies row ``s`` by ``weight[g]``, ``g`` the number of ends at or before ``s``: the group
  index is a comparison and a sum, the weights are read per row (``index_select``) and
  multiplied row by row (``bmm``), the computation of transformers' ``batched_mm`` experts.
  Rows past the last end are zeros, as transformers' fallback writes them.
* ``empty`` and ``empty_permuted`` are zeros: torch leaves their values undefined, so any
  reader that depends on them is undefined in torch too.

Registered into ``spmdrules.importers.aten.ATEN`` on import, as ``aten_sort``.
"""

from __future__ import annotations

from typing import Any

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.aten import Ctx, aten, axis


@aten("sort.default", "sort.stable")
def _sort(c: Ctx, a: dict[str, Any]) -> tuple[Tensor, ...]:
    """Values and int64 indices along ``dim``, ties by position."""
    x: Tensor = a["self"]
    op = c.call_op("argsort", x, axis=axis(a["dim"], max(x.ndim, 1)),
                   descending=bool(a["descending"]), stable=True)
    return tuple(op.outputs)


@aten("histc.default")
def _histc(c: Ctx, a: dict[str, Any]) -> Tensor:
    """``bins`` counts of the elements of x in [min, max], in x's dtype."""
    x: Tensor = a["self"]
    bins, lo, hi = int(a["bins"]), float(a["min"]), float(a["max"])
    if bins < 1:
        raise c.fail(f"bins={bins}: give at least one bin")
    if not lo < hi:
        raise c.fail(f"min={lo}, max={hi}: with min >= max torch takes the bounds from the "
                     "data at run time, which a static plan cannot; give min < max")
    dt = c.dtype
    flat = _as(c, x, dt, "input_cast")
    if flat.ndim != 1:
        flat = c.call("reshape", flat, shape=[-1], part="flat")
    inside = c.call("logical_and", c.call("greater_equal", flat, c.const(lo, dt, "min"), part="ge_min"),
                    c.call("less_equal", flat, c.const(hi, dt, "max"), part="le_max"), part="inside")
    scaled = c.call("multiply", c.call("subtract", flat, c.const(lo, dt, "min2"), part="from_min"),
                    c.const(bins / (hi - lo), dt, "per_bin"), part="scaled")
    index = c.call("minimum", c.call("floor", scaled, part="floor"), c.const(bins - 1, dt, "last"),
                   part="bin")
    edges = c.call("arange", start=0, end=bins, step=1, dtype=dt, part="bins")
    hit = c.call("logical_and",
                 c.call("equal", c.call("unsqueeze", index, axis=[1], part="bin_col"), edges,
                        part="is_bin"),
                 c.call("unsqueeze", inside, axis=[1], part="inside_col"), part="hit")
    return c.call("sum", c.call("cast", hit, dtype=dt, part="ones"), axis=[0], keep_dim=False)


@aten("empty.memory_format", "empty_permuted.default", "empty_like.default",
      "empty_strided.default", "new_empty.default")
def _empty(c: Ctx, a: dict[str, Any]) -> Tensor:
    return c.call("full", shape=c.shape, value=0, dtype=c.dtype)


@aten("index_put.default", "index_put_.default")
def _index_put(c: Ctx, a: dict[str, Any]) -> Tensor:
    """``x[i0, i1, ...] = values`` (``+=`` with ``accumulate``): one 1-D integer index per
    leading dim of x."""
    x: Tensor = a["self"]
    indices: list[Tensor | None] = list(a["indices"])
    if not indices or len(indices) > x.ndim or any(
            i is None or i.dtype == "bool" or i.ndim != 1 for i in indices):
        raise c.fail("only 1-D integer index tensors on the leading dims (x[i, j] = v) are "
                     "mapped; a mask or a skipped dim is not")
    if len({i.shape[0] for i in indices if i is not None}) > 1:
        raise c.fail("the index tensors have different lengths; give them one length")
    return c.call("index_put", x, [_as(c, i, "int64", f"index{k}") for k, i in
                                   enumerate(indices) if i is not None],
                  c.operand(a["values"], x.dtype), accumulate=bool(a["accumulate"]))


def _as(c: Ctx, t: Tensor, dtype: str, part: str) -> Tensor:
    """``t`` in ``dtype`` (a ``cast`` named ``part`` where it is not)."""
    return t if t.dtype == dtype else c.call("cast", t, dtype=dtype, part=part)


def _grouped(c: Ctx, x: Tensor, w: Tensor, offs: Tensor | None) -> Tensor:
    if offs is None or x.ndim != 2 or w.ndim != 3 or offs.ndim != 1 or (
            offs.shape[0] != w.shape[0]) or x.shape[1] != w.shape[1]:
        raise c.fail(f"input {list(x.shape)}, weight {list(w.shape)}, offs "
                     f"{None if offs is None else list(offs.shape)}: only a 2-D input [S, K] "
                     "grouped by the ends offs [E] of its rows, times a 3-D weight [E, K, N], "
                     "is mapped")
    rows, groups = x.shape[0], w.shape[0]
    past = c.call("greater_equal",
                  c.call("unsqueeze", c.call("arange", start=0, end=rows, step=1, dtype="int64",
                                             part="rows"), axis=[1], part="row_col"),
                  c.call("unsqueeze", _as(c, offs, "int64", "ends_int"), axis=[0], part="ends"),
                  part="past")
    group = c.call("sum", _as(c, past, "int64", "past_int"), axis=[1], keep_dim=False, part="group")
    valid = c.call("less_than", group, c.const(groups, "int64", "groups"), part="valid")
    which = c.call("minimum", group, c.const(groups - 1, "int64", "last"), part="expert")
    y = _rows_by(c, x, w, which)
    return c.call("where", c.call("unsqueeze", valid, axis=[1], part="valid_col"), y,
                  c.const(0, y.dtype, "zero"))


def _rows_by(c: Ctx, x: Tensor, w: Tensor, which: Tensor) -> Tensor:
    """Row s of ``x [S, K]`` times ``w[which[s]]`` (``w [E, K, N]``): the weights read per row
    (``index_select``: a masked lookup where a mesh dim splits the experts) and multiplied row
    by row (``bmm``)."""
    weights = c.call("index_select", w, which, axis=0, part="weights")
    y = c.call("bmm", c.call("unsqueeze", _as(c, x, w.dtype, "input_cast"), axis=[1], part="row"),
               weights, part="bmm")
    return c.call("reshape", y, shape=[x.shape[0], w.shape[2]], part="mm")


def grouped_by_ids(c: Ctx, x: Tensor, w: Tensor, ids: Tensor) -> Tensor:
    """The grouped matmul of rows whose groups are ``ids [S]`` (each in [0, E)), in any order:
    row s times ``w[ids[s]]`` (``spmdrules.importers.aten_order`` proves the ids and imports
    transformers' sorted rows in their tokens' order)."""
    if x.ndim != 2 or w.ndim != 3 or x.shape[1] != w.shape[1] or ids.shape != x.shape[:1]:
        raise c.fail(f"input {list(x.shape)}, weight {list(w.shape)}, ids {list(ids.shape)}: "
                     "rows [S, K], weights [E, K, N] and one group id per row are needed")
    return _rows_by(c, x, w, _as(c, ids, "int64", "ids_int"))


@aten("transformers.grouped_mm_fallback.default")
def _grouped_mm_fallback(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _grouped(c, a["input"], a["weight"], a["offs"])


__all__ = ["grouped_by_ids"]
