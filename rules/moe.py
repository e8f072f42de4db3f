"""moe_combine: a mixture-of-experts combine, ``rh,sk,sk->sh`` with a gather by index.

``y[i, j] = sum_k x[scatter_index[i, k], j] * combine_weights[i, k]``: x holds the experts' output
rows (``r``), combine_weights and scatter_index one row per token (``s``) and one column per chosen
expert (``k``), y one row per token. A row of y reads x rows anywhere, so x's rows are their own
letter: split, a rank gathers only the rows it holds (the others count 0) and y is a pending sum
over their mesh dims, as a vocab-parallel embedding; a split ``k`` leaves y a pending sum too
(and, as Paddle, the hidden dim whole). Written by hand on the einsum merge: which letters stay
depends on whether ``k`` is split, which a Description (a function of the shapes) cannot say.

Paddle's MoECombineInferSpmd gives x's rows y's letter ``s`` (deviation
``moe-combine-x-rows-follow-tokens``), marks a split ``k``'s sum on mesh dim 1 whatever mesh dim
splits it (quirk 17, ``moe-combine-partial-mesh-dim``) and replicates ``h`` when ``k`` is split.

moe_combine_grad (MoECombineGradInferSpmd, Paddle's backward slot): x, combine_weights,
scatter_index and grad_y merge; ``k`` is whole (as Paddle); grad_x (``rh``) is a pending sum
over the tokens' mesh dims (rows of x are scattered into from every token), grad_combine_weights
(``sk``) one over ``h``'s and ``r``'s (the hidden dim is contracted, x's rows are gathered);
grad_scatter_index (integers) takes the layout of scatter_index.
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.description import ShapeArg
from spmdrules.engine.registry import T, register_rule
from spmdrules.engine.rulekit import attr


def check_moe(x: ShapeArg, w: ShapeArg, idx: ShapeArg, grad_y: ShapeArg = None) -> None:
    for name, s in (("x", x), ("combine_weights", w), ("scatter_index", idx), ("grad_y", grad_y)):
        if name == "grad_y" and s is None:
            continue
        if not isinstance(s, tuple) or len(s) != 2:
            raise RuleArgumentError(f"{name!r} must be 2-D, got shape {s}")
    if w != idx:
        raise RuleArgumentError(
            f"'combine_weights' has shape {w} but 'scatter_index' has {idx}; both are "
            "[tokens, k]: one weight per chosen row of x"
        )
    if grad_y is not None and grad_y != (w[0], x[1]):  # type: ignore[index]
        raise RuleArgumentError(
            f"'grad_y' has shape {grad_y} but y is [tokens, hidden] = "
            f"{(w[0], x[1])}"  # type: ignore[index]
        )


def _merged(*pairs: tuple[str, TensorSpec], names: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    return einsum.resolve_mesh_conflicts(einsum.merge(
        [(ls, t.attr.multi_dims_mapping) for ls, t in pairs], names=names))


def moe_combine_forward(x: TensorSpec, combine_weights: TensorSpec, scatter_index: TensorSpec
                        ) -> SpmdInfo:
    check_moe(x.shape, combine_weights.shape, scatter_index.shape)
    lm = _merged(("rh", x), ("sk", combine_weights), ("sk", scatter_index),
                 names=("x", "combine_weights", "scatter_index"))
    if lm.get("k"):
        lm.pop("h", None)  # as Paddle: a split k leaves the hidden dim whole
    xm, sk = einsum.mapping_for("rh", lm), einsum.mapping_for("sk", lm)
    return SpmdInfo(
        [attr(x, xm), attr(combine_weights, sk), attr(scatter_index, sk)],
        [attr(x, einsum.mapping_for("sh", lm), einsum.contracted_partial((("rh", xm), ("sk", sk)),
                                                                         "sh"))],
    )


register_rule(
    "moe_combine", forward=moe_combine_forward,
    inputs=[T("x"), T("combine_weights"), T("scatter_index")], outputs=[T("y")],
    doc="MoECombineInferSpmd: y rows follow the tokens; split x rows or k leave y a pending sum.",
)


def moe_combine_grad(x: TensorSpec, combine_weights: TensorSpec, scatter_index: TensorSpec,
                     grad_y: TensorSpec) -> SpmdInfo:
    check_moe(x.shape, combine_weights.shape, scatter_index.shape, grad_y.shape)
    lm = _merged(("rh", x), ("sk", combine_weights), ("sk", scatter_index), ("sh", grad_y),
                 names=("x", "combine_weights", "scatter_index", "grad_y"))
    lm.pop("k", None)  # as Paddle: k merges (it claims its mesh dim), then is whole
    xm, sk, gm = (einsum.mapping_for(ls, lm) for ls in ("rh", "sk", "sh"))
    # grad_x scatters grad_y's rows by the weights; grad_combine_weights contracts x with grad_y
    x_pending = einsum.contracted_partial((("sk", sk), ("sh", gm)), "rh")
    w_pending = einsum.contracted_partial((("rh", xm), ("sh", gm)), "sk")
    return SpmdInfo(
        [attr(x, xm), attr(combine_weights, sk), attr(scatter_index, sk), attr(grad_y, gm)],
        [attr(x, xm, x_pending), attr(combine_weights, sk, w_pending), attr(scatter_index, sk)],
    )


register_rule(
    "moe_combine_grad", forward=moe_combine_grad,
    inputs=[T("x"), T("combine_weights"), T("scatter_index"), T("grad_y")],
    outputs=[T("grad_x"), T("grad_combine_weights"), T("grad_scatter_index")],
    doc="MoECombineGradInferSpmd: k whole; grad_x pending over the tokens' mesh dims, "
    "grad_combine_weights over the hidden dim's and x rows'.",
)
