"""Cases of the generic rules: stand-in ops whose semantics the rule claims to cover."""

from __future__ import annotations

from typing import Final

from spmdrules.verify.cases.case import SIZES, Draft, Rng, ShapeArg, draw_rank, draw_shape, pick
from spmdrules.verify.cases.elementwise import unary

# ---- generic rules: stand-in ops whose semantics the rule claims to cover ------------------------
#: default_data_parallel claims: an op whose every tensor has the batch on dim 0 and computes each
#: sample independently. replicated claims: any op.
DATA_PARALLEL_STAND_INS: Final = ("relu", "exp", "add", "multiply", "softmax", "bmm", "layer_norm",
                                  "concat", "transpose", "sum")


#: replicated, half of the time, runs on one of these (one op of each family but einsum's)
REPLICATED_STAND_INS: Final = ("tanh", "subtract", "split", "max", "matmul", "reshape",
                               "log_softmax", "layer_norm", "embedding",
                               "softmax_with_cross_entropy")


def data_parallel_draft(rng: Rng) -> Draft:
    op = str(pick(rng, DATA_PARALLEL_STAND_INS))
    batch = int(pick(rng, SIZES[1:]))

    def batched(d: Draft) -> Draft:
        return Draft(d.op, tuple(_with_batch(s, batch) for s in d.shapes), d.domains, d.attrs)

    if op in ("relu", "exp"):
        return batched(unary(op, rng))
    if op in ("add", "multiply"):
        s = draw_shape(rng, draw_rank(rng, 0, 2))
        return batched(Draft(op, (s, s), ("real", "real"), {}))
    if op == "softmax":
        s = draw_shape(rng, draw_rank(rng, 1, 2))
        return batched(Draft(op, (s,), ("real",), {"axis": -1 if rng.random() < 0.5 else len(s)}))
    if op == "bmm":
        m, k, n = (int(pick(rng, SIZES)) for _ in range(3))
        return Draft(op, ((batch, m, k), (batch, k, n)), ("real", "real"), {})
    if op == "layer_norm":
        s = draw_shape(rng, draw_rank(rng, 1, 2))
        return batched(Draft(op, (s, None, None), ("real", None, None),
                             {"epsilon": 1e-5, "begin_norm_axis": draw_rank(rng, 1, len(s))}))
    if op == "concat":
        base = draw_shape(rng, draw_rank(rng, 1, 2))
        k = draw_rank(rng, 1, 3)
        shapes = [(batch, *base[:-1], int(pick(rng, SIZES))) for _ in range(k)]
        return Draft(op, (shapes,), (("real",) * k,), {"axis": len(base)})
    if op == "transpose":
        s = draw_shape(rng, draw_rank(rng, 0, 2))
        perm = [0, *(int(p) + 1 for p in rng.permutation(len(s)))]
        return batched(Draft(op, (s,), ("real",), {"perm": perm}))
    s = draw_shape(rng, draw_rank(rng, 1, 2))
    axes = [int(a) + 1 for a in rng.permutation(len(s))[: draw_rank(rng, 1, len(s))]]
    return batched(Draft("sum", (s,), ("real",), {"axis": axes, "keep_dim": rng.random() < 0.5}))


def _with_batch(s: ShapeArg, batch: int) -> ShapeArg:
    if s is None:
        return None
    if isinstance(s, list):
        return [(batch, *t) for t in s]
    return (batch, *s)
