"""ATen's attention onto the matmul, softmax, elementwise and reduction families: the default
attention of Hugging Face decoders (``attn_implementation="sdpa"``) and its masks.

``scaled_dot_product_attention`` is kept whole by the decomposition (``KEPT_WHOLE``) and written
here as torch's own math kernel computes it, op for op: q and k^T each scaled by sqrt(scale)
before the scores' matmul, a boolean mask (or ``is_causal``'s lower triangle) added as 0 / -inf,
a float mask added as it is, grouped-query k and v heads repeated for the q heads of their group
(``enable_gqa``), a softmax whose rows with no key left give 0 (torch's ``_safe_softmax``), and
the matmul with v. Core ATen's own decomposition of it leaves a layout torch cannot view in
GPT-2's Conv1D (``view`` of a non-contiguous output fails in ``run_decompositions``), and the
4-D matmuls keep their batch dims (see ``KEPT_WHOLE``). Train-mode dropout is refused.

``any`` and ``all`` map onto the reduction family: transformers' mask construction and
decomposed attentions use them.

Registered into ``spmdrules.importers.aten.ATEN`` on import, as ``aten_sort``.
"""

from __future__ import annotations

import math
from typing import Any

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.aten import Ctx, TensorConverter, aten, axis


def _bool_reduction(op_type: str) -> TensorConverter:
    def convert(c: Ctx, a: dict[str, Any]) -> Tensor:
        """``dim`` an int or a list; None reduces every dim (the ``default`` overload too). An
        empty list reduces none: torch gives ``x != 0``, which a cast to bool is."""
        x: Tensor = a["self"]
        dim = a.get("dim")
        if isinstance(dim, list | tuple) and not dim:
            return c.cast(x, "bool")
        axes = [] if dim is None else [axis(d, max(x.ndim, 1)) for d in (
            dim if isinstance(dim, list | tuple) else [dim])]
        return c.call(op_type, x, axis=axes, keep_dim=bool(a.get("keepdim", False)))
    return convert


for _op in ("any", "all"):
    aten(f"{_op}.default", f"{_op}.dim", f"{_op}.dims")(_bool_reduction(_op))


def _grouped(c: Ctx, t: Tensor, heads: int, name: str) -> Tensor:
    """``t`` ([..., hk, s, d]) with each head repeated for the ``heads // hk`` q heads of its
    group, as torch's ``repeat_interleave`` on dim -3."""
    hk = t.shape[-3]
    if hk == heads:
        return t
    if hk == 0 or heads % hk:
        raise c.fail(f"enable_gqa: query has {heads} heads, not a multiple of {name}'s {hk}")
    lead, tail = list(t.shape[:-3]), list(t.shape[-2:])
    u = c.call("unsqueeze", t, axis=[t.ndim - 2], part=f"{name}.heads")
    e = c.call("expand", u, shape=[*lead, hk, heads // hk, *tail],
               part=f"{name}.repeat")
    return c.call("reshape", e, shape=[*lead, heads, *tail], part=f"{name}.group")


def _causal(c: Ctx, lq: int, lk: int) -> Tensor:
    """torch's ``ones(L, S).tril()``: query i sees key j when j <= i (top-left aligned)."""
    rows = c.call("arange", start=0, end=lq, step=1, dtype="int64", part="causal.rows")
    cols = c.call("arange", start=0, end=lk, step=1, dtype="int64", part="causal.cols")
    rows = c.call("unsqueeze", rows, axis=[1], part="causal.column")
    return c.call("greater_equal", rows, cols, part="causal")


@aten("scaled_dot_product_attention.default")
def _sdpa(c: Ctx, a: dict[str, Any]) -> Tensor:
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    if a["dropout_p"] > 0:
        raise c.fail(f"dropout_p={a['dropout_p']} is random; export the model in eval mode")
    if mask is not None and a["is_causal"]:
        raise c.fail("attn_mask and is_causal=True together: torch refuses them; give one")
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise c.fail(f"query, key and value of ranks {q.ndim}, {k.ndim}, {v.ndim}: give them one "
                     "rank, at least 2 ([..., seq, dim])")
    dt = c.dtype
    scale = a["scale"] if a["scale"] is not None else 1 / math.sqrt(q.shape[-1])
    root = math.sqrt(abs(scale))
    if a["enable_gqa"] and q.ndim >= 3:
        k, v = _grouped(c, k, q.shape[-3], "key"), _grouped(c, v, q.shape[-3], "value")
    qs = c.call("multiply", q, c.const(-root if scale < 0 else root, dt, "q.root"), part="q.scale")
    perm = [*range(k.ndim - 2), k.ndim - 1, k.ndim - 2]
    kt = c.call("transpose", k, perm=perm, part="k.t")
    kt = c.call("multiply", kt, c.const(root, dt, "k.root"), part="k.scale")
    s = c.call("matmul", qs, kt, part="scores")
    if a["is_causal"]:
        mask = _causal(c, q.shape[-2], k.shape[-2])
    if mask is not None:
        if mask.dtype == "bool":
            mask = c.call("where", mask, c.const(0.0, dt, "mask.zero"),
                          c.const(-math.inf, dt, "mask.inf"), part="mask")
        s = c.call("add", s, c.cast(mask, dt), part="masked")
    # torch's _safe_softmax: a row with no key left (every score -inf) gives 0, not NaN. Its
    # scores are zeroed before the softmax too, so that no NaN reaches the reverse pass either
    # (torch's gradient there is 0)
    last = s.ndim - 1
    dead = c.call("equal", s, c.const(-math.inf, dt, "dead.inf"), part="dead")
    dead = c.call("all", dead, axis=[last], keep_dim=True, part="dead.rows")
    zero = c.const(0.0, dt, "dead.zero")
    s = c.call("where", dead, zero, s, part="live")
    p = c.call("softmax", s, axis=last, part="softmax")
    p = c.call("where", dead, zero, p, part="probs")
    return c.call("matmul", p, v, part="context")


__all__: list[str] = []
