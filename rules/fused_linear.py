"""Fused linear layers: linear_v2 (``input @ weight + bias``) and fused_gemm_epilogue
(``act(x' @ y' + bias)``, ``'`` a transpose when ``trans_x`` / ``trans_y``).

One notation for both, Paddle's for a matrix product: ``..mk,kn->..mn`` with ``n`` also the bias's
letter. The operands' mesh dims are merged letter by letter (a letter sharded two ways is an error;
a mesh dim wanted by two letters goes to the first that claimed it, x's letters before y's),
partial inputs are resharded, and:

* fused_gemm_epilogue keeps a sharded ``k``: the product is a pending sum over k's mesh dims, and
  the bias takes the same pending sum (each rank adds its share of it once). With an activation
  (``relu``, ``gelu``) the sum must be complete before it, so k is gathered instead (Paddle's rule
  does not see the activation; no recorded case has one). The sum is pending only where x and y
  as computed split k: a size-1 k has nothing to split, both hold it whole and every rank's
  product is the whole one (Paddle marks it pending all the same, deviation
  ``fused-gemm-size-one-k-pending``: the sum then counts the product once per process).
* linear_v2 refuses the pending sum: where k would stay sharded the matrix letters m, k, n are
  all replicated and only the batch letters keep their shards (Paddle: "a fused matmul +
  elementwise op").

Size-1 dims are replicated (nothing to split): those of the operands, as Paddle and matmul do, and
(our deviation ``fused-linear-size-one-output-shard``) the output's batch and ``m`` dims, which
Paddle keeps sharded although the local products, computed from replicated operands, do not
produce such blocks. A size-1 ``n`` stays as Paddle has it: the bias shares its shard and cuts
the product alike (without a bias, linear_v2 replicates it too).

Both answer a second, 0-d output (Paddle's reserve/workspace slot, which its rules lay out as a
rank-0 attribute).
"""

from __future__ import annotations

import importlib
from typing import Any

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.contraction import swap_last2, swapped_letters
from spmdrules.engine.einsum import ALPHABET
from spmdrules.engine.registry import A, Opt, T, register_rule
from spmdrules.engine.rulekit import attr

ACTIVATIONS = ("none", "relu", "gelu")
#: the matmul family's rule module (typed as a package of its own, so read as Any)
_MATMUL: Any = importlib.import_module("spmdrules.rules.matmul")


def notation(x_ndim: int) -> tuple[str, str, str]:
    """(x, y, out) letters for an ``x_ndim``-D x and a 2-D y, untransposed."""
    if x_ndim < 1:
        raise RuleArgumentError("'x' is 0-d; a linear layer needs x of rank >= 1")
    batch = ALPHABET[: x_ndim - 2] if x_ndim >= 2 else ""
    x = batch + "mk" if x_ndim >= 2 else "k"
    return x, "kn", x[:-1] + "n"


def _out_shape(x: tuple[int, ...], y: tuple[int, ...]) -> tuple[int, ...]:
    return (*x[:-1], y[1])


def _out_mapping(ol: str, lm: dict[str, tuple[int, ...]], shape: tuple[int, ...],
                 bias: bool) -> MultiDims:
    """The output's mapping with its size-1 dims replicated: the local products, computed from
    replicated size-1 operand dims, hold them whole. A size-1 ``n`` keeps its shard when a bias
    shares it: the bias block (empty where the output block is) then cuts the product alike."""
    m = einsum.mapping_for(ol, lm, shape)
    return (*m[:-1], lm.get("n", ())) if bias else m


def _merge(x: TensorSpec, xl: str, y: TensorSpec, yl: str) -> dict[str, tuple[int, ...]]:
    lm = einsum.merge(((xl, x.attr.multi_dims_mapping), (yl, y.attr.multi_dims_mapping)),
                      names=("x", "y"))
    return einsum.resolve_mesh_conflicts(lm)


def _check(x: tuple[int, ...], y: tuple[int, ...], bias: tuple[int, ...] | None,
           names: tuple[str, str]) -> None:
    if len(y) != 2:
        raise RuleArgumentError(f"{names[1]!r} has rank {len(y)}; give a 2-D [in, out] matrix")
    if not x:
        raise RuleArgumentError(f"{names[0]!r} is 0-d; a linear layer needs rank >= 1")
    if x[-1] != y[0]:
        raise RuleArgumentError(
            f"{names[0]!r} has {x[-1]} columns but {names[1]!r} has {y[0]} rows; the contracted "
            "sizes must match (check the transposes)")
    if bias is not None and bias != (y[1],):
        raise RuleArgumentError(
            f"'bias' has shape {list(bias)} but must be [{y[1]}] (one per output column); the "
            "ndim of bias should be 1")


# ---- linear_v2(input, weight, bias?) -> out, reserve ----------------------------------------------
def linear_v2_forward(input: TensorSpec, weight: TensorSpec, bias: TensorSpec | None,
                      transpose_weight: bool) -> SpmdInfo:
    if transpose_weight:
        raise RuleArgumentError(
            "transpose_weight=True is not supported (nor by Paddle's SPMD rule); give the weight "
            "as [in, out] and transpose_weight=False")
    if bias is not None and bias.ndim != 1:
        raise RuleArgumentError(f"the ndim of bias should be 1, but got {bias.ndim}")
    _check(input.shape, weight.shape, None if bias is None else bias.shape, ("input", "weight"))
    xl, yl, ol = notation(input.ndim)
    lm = _merge(input, xl, weight, yl)
    if lm.get("k"):
        # the pending sum is refused: the matrix letters are gathered, the batch letters keep
        # (Paddle's test is on the merge, so a size-1 k gathers them too, and no sum is pending)
        lm = {ch: (() if ch in "mkn" else dims) for ch, dims in lm.items()}
    mesh = input.attr.mesh
    return SpmdInfo(
        (attr(input, einsum.mapping_for(xl, lm, input.shape)),
         attr(weight, einsum.mapping_for(yl, lm, weight.shape)),
         None if bias is None else attr(bias, (lm.get("n", ()),))),
        (DistAttr._make(mesh, _out_mapping(ol, lm, _out_shape(input.shape, weight.shape),
                                           bias is not None), ()),
         DistAttr._make(mesh, (), ())))


register_rule(
    "linear_v2", forward=linear_v2_forward, inputs=[T("input"), T("weight"), Opt("bias")],
    outputs=[T("out"), T("reserve")], attrs=[A("transpose_weight", "bool", False)],
    doc="LinearV2InferSpmd: a matmul merge; where k stays sharded every tensor is replicated.",
)


# ---- fused_gemm_epilogue(x, y, bias) -> out, reserve_space ----------------------------------------
def fused_gemm_epilogue_forward(x: TensorSpec, y: TensorSpec, bias: TensorSpec, trans_x: bool,
                                trans_y: bool, activation: str, merged_k: bool = False
                                ) -> SpmdInfo:
    """``merged_k`` is Paddle's pending sum, read off the merged k rather than off x and y as
    computed (a size-1 k they replicate stays pending), kept to recognise Paddle's answers."""
    if activation not in ACTIVATIONS:
        raise RuleArgumentError(f"activation {activation!r} is not one of {list(ACTIVATIONS)}")
    if x.ndim < 2:
        raise RuleArgumentError(f"'x' has rank {x.ndim}; fused_gemm_epilogue needs rank >= 2")
    xs = swap_last2(x.shape, trans_x)
    ys = swap_last2(y.shape, trans_y) if y.ndim == 2 else y.shape
    _check(xs, ys, bias.shape, ("x", "y"))
    xl, yl, ol = notation(x.ndim)
    xl, yl = swapped_letters(xl, trans_x), swapped_letters(yl, trans_y)
    lm = _merge(x, xl, y, yl)
    if lm.get("k") and activation != "none":
        lm["k"] = ()  # the activation needs the complete sum
    xm: MultiDims = einsum.mapping_for(xl, lm, x.shape)
    ym: MultiDims = einsum.mapping_for(yl, lm, y.shape)
    # pending only where x and y as computed split k: a size-1 k is replicated in both, and
    # every rank's product is then the whole one
    partial: PartialItems = (tuple(sorted((d, "sum") for d in lm.get("k", ()))) if merged_k
                             else einsum.contracted_partial(((xl, xm), (yl, ym)), ol))
    mesh = x.attr.mesh
    return SpmdInfo(
        (attr(x, xm), attr(y, ym), attr(bias, (lm.get("n", ()),), partial)),
        (DistAttr._make(mesh, _out_mapping(ol, lm, _out_shape(xs, ys), True), partial),
         DistAttr._make(mesh, (), ())))


register_rule(
    "fused_gemm_epilogue", forward=fused_gemm_epilogue_forward,
    inputs=[T("x"), T("y"), T("bias")], outputs=[T("out"), T("reserve_space")],
    attrs=[A("trans_x", "bool", False), A("trans_y", "bool", False),
           A("activation", "str", "none")],
    doc="FusedGemmEpilogueInferSpmd: a matmul merge; a sharded k leaves out and bias pending sums "
    "(gathered when an activation follows).",
)


# ---- fused_linear_param_grad_add(x, dout, dweight?, dbias?) -> dweight_out, dbias_out ------------
def _reduce_leading(a: DistAttr, keep: int) -> DistAttr:
    """``a`` summed over all but its last ``keep`` dims: their shards become pending sums."""
    m = a.multi_dims_mapping
    lead = [d for dims in m[: len(m) - keep] for d in dims]
    partial = dict(a.partial_items) | {d: "sum" for d in lead}
    return DistAttr._make(a.mesh, m[len(m) - keep:], tuple(sorted(partial.items())))


def _present(t: TensorSpec | None) -> TensorSpec | None:
    """None for an absent accumulator (None, or Paddle's empty 0-d / size-0 placeholder)."""
    return None if t is None or not t.shape or 0 in t.shape else t


def fused_linear_param_grad_add_forward(
    x: TensorSpec, dout: TensorSpec, dweight: TensorSpec | None, dbias: TensorSpec | None,
    multi_precision: bool, has_bias: bool, even: bool = False, given_dout: bool = False,
) -> SpmdInfo:
    """The weight gradient ``x^T @ dout`` (over every leading dim, laid out as matmul with
    trans_x lays it out, its leading dims summed into pending sums) plus ``dweight``; the bias
    gradient (dout summed over its leading dims) plus ``dbias``. A given accumulator must already
    be in the gradient's layout (its pending sums included), as Paddle requires. ``even`` is
    matmul's Paddle policy (uneven letters replicated) and ``given_dout`` Paddle's bias gradient
    (read off the given dout, not the one the kernel sums), both kept to recognise Paddle's
    answers."""
    if x.ndim < 2 or dout.ndim != x.ndim or x.shape[:-1] != dout.shape[:-1]:
        raise RuleArgumentError(
            f"'x' {list(x.shape)} and 'dout' {list(dout.shape)} must have one rank >= 2 and the "
            "same leading dims (the rows of the linear layer)")
    refusal: RuleArgumentError | None = None
    # our policy keeps an uneven row or contracted letter split; where the given accumulator is
    # laid out as the gradient is with those letters replicated (Paddle's policy), that layout
    # is taken: it executes as well, and the accumulator needs no resharding
    for policy in (True,) if even else (False, True):
        mm = _MATMUL.matmul_forward(x, dout, True, False, policy)
        wgrad = _reduce_leading(mm.outputs[0], 2)
        # from dout as laid out for the product (Paddle reads the given one, pending sums included)
        bgrad = (_reduce_leading(dout.attr if given_dout else mm.inputs[1], 1) if has_bias
                 else DistAttr._make(x.attr.mesh, (), ()))  # no bias: a 0-d placeholder
        for name, given, want in (("dweight", _present(dweight), wgrad),
                                  ("dbias", _present(dbias), bgrad)):
            if given is not None and given.attr != want:
                refusal = refusal or RuleArgumentError(
                    f"{name!r} is laid out {given.attr.mapping_str()} but the gradient it "
                    f"accumulates is {want.mapping_str()}; give {name} that layout (none without "
                    "has_bias)")
                break
        else:
            return SpmdInfo((mm.inputs[0], mm.inputs[1], None if dweight is None else dweight.attr,
                             None if dbias is None else dbias.attr), (wgrad, bgrad))
    assert refusal is not None
    raise refusal


register_rule(
    "fused_linear_param_grad_add", forward=fused_linear_param_grad_add_forward,
    inputs=[T("x"), T("dout"), Opt("dweight"), Opt("dbias")],
    outputs=[T("dweight_out"), T("dbias_out")],
    attrs=[A("multi_precision", "bool", False), A("has_bias", "bool", True)],
    doc="FusedLinearParamGradAddInferSpmd: x^T @ dout laid out as matmul, leading dims summed; "
    "the accumulators must be in the gradients' layouts.",
)
