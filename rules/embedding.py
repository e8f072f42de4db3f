"""embedding / lookup_table_v2: ``a..,jk -> a..k``, a row gather from the table ``weight[j, k]``.

x's dims and the table's hidden dim k pass to the output. Sharding the vocabulary rows j is vocab
parallelism: each shard looks up only the ids in its row range and writes zeros elsewhere, so the
output is a pending sum over j's mesh dim (Paddle's c_embedding kernel). That kernel has no
padding_idx and no sparse gradient, so row sharding with either is refused. One mesh dim may not
shard two letters (Paddle raises rather than choose). Partial inputs are resharded to replicated.
"""

from __future__ import annotations

from spmdrules.core.attr import MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError, UnsupportedError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr

EMBEDDING_OPS = ("embedding", "lookup_table_v2")


def _check_weight(weight: TensorSpec, padding_idx: int) -> None:
    if len(weight.shape) != 2:
        raise RuleArgumentError(
            f"'weight' has rank {len(weight.shape)} but the embedding table must be 2-D "
            "[vocab_size, hidden]"
        )
    vocab = weight.shape[0]
    if padding_idx != -1 and not -vocab <= padding_idx < vocab:
        raise RuleArgumentError(
            f"padding_idx {padding_idx} is not a row of 'weight' (vocab size {vocab}); use "
            f"{-vocab}..{vocab - 1}, or -1 for none"
        )


def _claim(owner: dict[int, str], dims: tuple[int, ...], who: str) -> None:
    for d in dims:
        prev = owner.setdefault(d, who)
        if prev != who:
            raise ShardingConflictError(
                f"mesh dim {d} shards both {prev} and {who}; an embedding cannot split two dims "
                "on one mesh dim. Replicate one of them"
            )


def embedding_forward(
    x: TensorSpec, weight: TensorSpec, padding_idx: int, sparse: bool
) -> SpmdInfo:
    _check_weight(weight, padding_idx)
    xm = x.attr.multi_dims_mapping
    rows, hidden = weight.attr.multi_dims_mapping
    if rows and (padding_idx != -1 or sparse):
        why = f"padding_idx={padding_idx}" if padding_idx != -1 else "sparse=True"
        raise UnsupportedError(
            f"'weight' dim 0 (the vocabulary) is sharded on mesh dims {list(rows)}, which the "
            f"vocab-parallel kernel does not support with {why}; replicate weight dim 0"
        )
    owner: dict[int, str] = {}
    for i, dims in enumerate(xm):
        _claim(owner, dims, f"'x' dim {i}")
    _claim(owner, rows, "'weight' dim 0")
    _claim(owner, hidden, "'weight' dim 1")
    partial: PartialItems = tuple((d, "sum") for d in sorted(rows))
    out: MultiDims = (*xm, hidden)
    return SpmdInfo(
        (attr(x, xm), attr(weight, (rows, hidden))),
        (attr(x, out, partial),),
    )


def embedding_reverse(
    x: TensorSpec, weight: TensorSpec, out: TensorSpec, padding_idx: int, sparse: bool
) -> SpmdInfo:
    _check_weight(weight, padding_idx)
    if out.shape != (*x.shape, weight.shape[1]):
        raise RuleArgumentError(
            f"'out' has shape {list(out.shape)} but embedding gives x's shape plus the hidden "
            f"size: {[*x.shape, weight.shape[1]]}"
        )
    # out's own partial status is dropped: from replicated vocab rows the lookup is complete.
    om = out.attr.multi_dims_mapping
    return SpmdInfo(
        (attr(x, om[:-1]), attr(weight, ((), om[-1]))),
        (attr(out, om),),
    )


for _name in EMBEDDING_OPS:
    register_rule(
        _name, forward=embedding_forward, reverse=embedding_reverse,
        inputs=[T("x"), T("weight")], outputs=[T("out")],
        attrs=[A("padding_idx", "int", -1), A("sparse", "bool", False)],
        doc="EmbeddingInferSpmd: x dims and the hidden dim pass through; vocab rows -> P(sum).",
    )
