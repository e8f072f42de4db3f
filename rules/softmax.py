"""softmax / log_softmax: ``a..k..->a..k..`` normalised along one axis ``k``.

The normalised axis is never sharded (every output element needs its whole row); every other dim
keeps its input sharding when it divides evenly, as Paddle does on the output. Partial inputs are
resharded to replicated (the exponential does not distribute over a pending sum).
"""

from __future__ import annotations

from spmdrules.core.attr import MultiDims
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr, normalise_axis

SOFTMAX_OPS = ("softmax", "log_softmax")


def softmax_mapping(t: TensorSpec, axis: int, name: str) -> MultiDims:
    """``t``'s mapping with the normalised axis replicated and uneven shardings dropped."""
    m = t.attr.multi_dims_mapping
    # A 0-d tensor is its own single row: axis -1 or 0 as for a vector.
    ax = normalise_axis("softmax", name, axis, len(m) or 1)
    if m and m[ax]:
        m = (*m[:ax], (), *m[ax + 1 :])
    return m


def softmax_forward(x: TensorSpec, axis: int) -> SpmdInfo:
    m = softmax_mapping(x, axis, "x")
    return SpmdInfo((attr(x, m),), (attr(x, m),))


def softmax_reverse(x: TensorSpec, out: TensorSpec, axis: int) -> SpmdInfo:
    if x.shape != out.shape:
        raise RuleArgumentError(
            f"'x' has shape {list(x.shape)} but 'out' has {list(out.shape)}; softmax keeps the "
            "shape"
        )
    m = softmax_mapping(out, axis, "out")
    return SpmdInfo((attr(x, m),), (attr(out, m),))


for _name in SOFTMAX_OPS:
    register_rule(
        _name, forward=softmax_forward, reverse=softmax_reverse, inputs=[T("x")],
        outputs=[T("out")], attrs=[A("axis", "int", -1)],
        doc="SoftmaxInferSpmd: the normalised axis is replicated; uneven dims are replicated.",
    )
