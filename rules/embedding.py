"""embedding / lookup_table_v2: ``a..,jk -> a..k``, a row gather from the table ``weight[j, k]``.

x's dims and the table's hidden dim k pass to the output. Sharding the vocabulary rows j is vocab
parallelism: each shard looks up only the ids in its row range and writes zeros elsewhere, so the
output is a pending sum over j's mesh dim (Paddle's c_embedding kernel). That kernel has no
padding_idx and no sparse gradient, so row sharding with either is refused. One mesh dim may not
shard two letters (Paddle raises rather than choose). Partial inputs are resharded to replicated.
Both are named fields of the description's policy (``shared_mesh_dim``, ``refused``).
"""

from __future__ import annotations

from spmdrules.core.attr import MultiDims
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.policy import Policy
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr

Shape = tuple[int, ...]

EMBEDDING_OPS = ("embedding", "lookup_table_v2")


def _check_weight(weight: Shape, padding_idx: int) -> None:
    if len(weight) != 2:
        raise RuleArgumentError(
            f"'weight' has rank {len(weight)} but the embedding table must be 2-D "
            "[vocab_size, hidden]"
        )
    vocab = weight[0]
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


def _check_ids(x: Shape, weight: Shape, padding_idx: int, sparse: bool) -> None:
    _check_weight(weight, padding_idx)


def _check_table(weight: Shape, x: Shape, start_index: int, vocab_size: int) -> None:
    _check_weight(weight, -1)


def _letters(x: Shape) -> str:
    return letters(len(x), skip="jk")


def lookup(x: Shape, weight: Shape, padding_idx: int, sparse: bool) -> Description:
    """``a..,jk->a..k``: a vocabulary split ``j`` leaves a pending sum, one mesh dim may not
    split two letters, and the kernels with a padding_idx or a sparse gradient refuse ``j``."""
    refused: tuple[tuple[int, str, str], ...] = ()
    if padding_idx != -1 or sparse:
        why = f"padding_idx={padding_idx}" if padding_idx != -1 else "sparse=True"
        refused = ((1, "j", f"the vocab-parallel kernel does not support it with {why}"),)
    ls = _letters(x)
    return Description((ls, "jk"), (ls + "k",),
                       policy=Policy(shared_mesh_dim="error", refused=refused))


def _check_out(x: Shape, weight: Shape, out: Shape, padding_idx: int, sparse: bool) -> None:
    _check_weight(weight, padding_idx)
    if out != (*x, weight[1]):
        raise RuleArgumentError(
            f"'out' has shape {list(out)} but embedding gives x's shape plus the hidden "
            f"size: {[*x, weight[1]]}"
        )


# Reverse: out's own partial status is dropped; from replicated vocab rows the lookup is complete.
for _name in EMBEDDING_OPS:
    register_described(
        _name, lookup, inputs=[T("x"), T("weight")], outputs=[T("out")],
        attrs=[A("padding_idx", "int", -1), A("sparse", "bool", False)], key=ranks,
        check=_check_ids, check_reverse=_check_out,
        # torch's padding_idx: the row reads as it is and gets no gradient, which a vocab split
        # keeps (each rank drops its own rows' share), so the rule never needs it
        op_attrs=[A("no_grad_idx", "int", -1)],
        doc="EmbeddingInferSpmd: x dims and the hidden dim pass through; vocab rows -> P(sum).",
    )


# ---- c_embedding(weight, x) -> out: the vocab-parallel lookup, rows offset by start_index ------
def c_lookup(weight: Shape, x: Shape) -> Description:
    """embedding's description with the table first: ids ``start_index + r`` read row ``r``,
    others zeros, so row-sharded tables leave a pending sum over the rows' mesh dims."""
    ls = _letters(x)
    return Description(("jk", ls), (ls + "k",), merge=(1, 0),
                       policy=Policy(shared_mesh_dim="error"))


def c_embedding_grad(weight: TensorSpec, x: TensorSpec, out_grad: TensorSpec,
                     start_index: int, echo: bool = False) -> SpmdInfo:
    """CEmbeddingGradInferSpmd: ``w_grad[j, k] = sum over ids == start_index + j of out_grad``.

    x and out_grad share x's letters (out_grad adds the hidden k); one mesh dim may shard only
    one letter. The kernel sizes w_grad from the table (each rank writes a block shaped as its
    block of the table), so the table and w_grad are laid out alike: the table's row shards (each
    rank adds only its rows' ids) and the hidden dim, the table's shard of it or else out_grad's
    (out_grad then takes it too). w_grad is a pending sum over the mesh dims of x's letters (each
    rank adds its ids). The table's values are not read: its pending sums stay pending where they
    fit. ``echo`` is Paddle's answer (w_grad the table's given attribute plus the pending sums,
    x's partial handed back), kept to recognise it."""
    _check_weight(weight.shape, -1)
    if out_grad.shape != (*x.shape, weight.shape[1]):
        raise RuleArgumentError(
            f"'out_grad' has shape {list(out_grad.shape)} but must be x's shape plus the hidden "
            f"size: {[*x.shape, weight.shape[1]]}")
    gm = out_grad.attr.multi_dims_mapping
    owner: dict[int, str] = {}
    merged: list[tuple[int, ...]] = []
    for i, (a, b) in enumerate(zip(x.attr.multi_dims_mapping, gm[:-1], strict=True)):
        if a and b and a != b:
            raise ShardingConflictError(
                f"x dim {i} is sharded on mesh dims {list(a)} but out_grad dim {i} on {list(b)}; "
                "shard them alike")
        dims = a or b
        _claim(owner, dims, f"'x' dim {i}")
        merged.append(dims)
    rows, table_hidden = weight.attr.multi_dims_mapping
    summed = sorted(d for dims in merged for d in dims)
    if echo:
        _claim(owner, gm[-1], "the hidden dim")
        return _c_embedding_grad_echo(weight, x, out_grad, tuple(merged), gm[-1], summed)
    hidden = table_hidden or gm[-1]
    _claim(owner, hidden, "the hidden dim")
    clash = set(rows) & (set(summed) | set(hidden))
    if clash:
        raise ShardingConflictError(
            f"mesh dims {sorted(clash)} shard the table's rows and also x or the hidden dim, so "
            "w_grad would be both split and pending there; replicate the table's rows")
    xm: MultiDims = tuple(merged)
    layout: MultiDims = (rows, hidden)
    used = set(rows) | set(hidden)
    kept = tuple(p for p in weight.attr.partial_items if p[0] not in used)
    return SpmdInfo(
        (attr(weight, layout, kept), attr(x, xm), attr(out_grad, (*xm, hidden))),
        (attr(weight, layout, tuple((d, "sum") for d in summed)),))


register_described(
    "c_embedding", c_lookup, reverse=False, key=ranks, check=_check_table,
    inputs=[T("weight"), T("x")], outputs=[T("out")],
    attrs=[A("start_index", "int", 0), A("vocab_size", "int", -1)],
    doc="CEmbeddingInferSpmd: embedding's rule, the table first; row shards -> P(sum).",
)
register_rule(
    "c_embedding_grad", forward=c_embedding_grad,
    inputs=[T("weight"), T("x"), T("out_grad")], outputs=[T("weight_grad")],
    attrs=[A("start_index", "int", 0)],
    doc="CEmbeddingGradInferSpmd: w_grad is laid out as the table (its rows, the hidden dim the "
    "table or out_grad shards) and is a pending sum over x's mesh dims.",
)


def _c_embedding_grad_echo(weight: TensorSpec, x: TensorSpec, out_grad: TensorSpec, xm: MultiDims,
                           hidden: tuple[int, ...], summed: list[int]) -> SpmdInfo:
    wa = weight.attr
    used = {d for dims in wa.multi_dims_mapping for d in dims}
    pending = dict(wa.partial_items)
    for d in summed:
        if d in used or d in pending:
            raise ShardingConflictError(f"mesh dim {d} is set partial but shards the table")
        pending[d] = "sum"
    return SpmdInfo(
        (wa, attr(x, xm, x.attr.partial_items), attr(out_grad, (*xm, hidden))),
        (attr(weight, wa.multi_dims_mapping, tuple(sorted(pending.items()))),))
