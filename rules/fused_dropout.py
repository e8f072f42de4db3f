"""fused_dropout_add(x, y) -> out = dropout(x) + y, seed_offset: an elementwise op of two tensors
of one shape, plus the 2-entry ``[seed, offset]`` of the dropout's random stream.

x and y are merged letter by letter (one letter sharded two ways is an error; a mesh dim wanted by
two letters goes to the first), and all three tensors take the merged layout, with size-1 dims
replicated (nothing to split). Partial inputs are resharded: a dropout mask times a pending sum
plus a complete y is no piece of the result. ``seed_offset`` is its own tensor, unrelated to x's
dims: the kernel writes the whole pair on every process, so both directions lay it out replicated
(a given shard or pending sum of it is not kept: the kernel computes neither).
"""

from __future__ import annotations

from spmdrules.core.attr import DistAttr, MultiDims
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.description import letters
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr, replicated_like


def _same(x: TensorSpec, y: TensorSpec) -> None:
    if x.shape != y.shape:
        raise RuleArgumentError(
            f"'x' has shape {list(x.shape)} but 'y' has {list(y.shape)}; fused_dropout_add adds "
            "tensors of one shape")


def _layout(*ts: TensorSpec) -> MultiDims:
    xl = letters(ts[0].ndim)
    lm = einsum.resolve_mesh_conflicts(einsum.merge(
        [(xl, t.attr.multi_dims_mapping) for t in ts], names=("x", "y", "out")[: len(ts)]))
    return einsum.mapping_for(xl, lm, ts[0].shape)


def fused_dropout_add_forward(x: TensorSpec, y: TensorSpec) -> SpmdInfo:
    _same(x, y)
    m = _layout(x, y)
    mesh = x.attr.mesh
    return SpmdInfo((attr(x, m), attr(y, m)),
                    (DistAttr._make(mesh, m, ()), DistAttr._make(mesh, ((),), ())))


def fused_dropout_add_reverse(x: TensorSpec, y: TensorSpec, out: TensorSpec,
                              seed_offset: TensorSpec) -> SpmdInfo:
    _same(x, y)
    _same(x, out)
    if seed_offset.shape != (2,):
        raise RuleArgumentError(
            f"'seed_offset' has shape {list(seed_offset.shape)}; it is the [seed, offset] pair, "
            "shape [2]")
    m = _layout(out)
    return SpmdInfo((attr(x, m), attr(y, m)), (attr(out, m), replicated_like(seed_offset)))


register_rule(
    "fused_dropout_add", forward=fused_dropout_add_forward, reverse=fused_dropout_add_reverse,
    inputs=[T("x"), T("y")], outputs=[T("out"), T("seed_offset")],
    op_attrs=[A("p", "float", 0.5), A("is_test", "bool", False),
              A("mode", "str", "upscale_in_train"), A("seed", "int", 0),
              A("fix_seed", "bool", False)],
    doc="FusedDropoutAddSpmdBase: x and y merged elementwise; out takes the merged layout; "
    "seed_offset replicated (the kernel writes the pair whole).",
)
