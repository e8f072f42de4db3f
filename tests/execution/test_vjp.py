"""Every registered VJP against numerical derivatives of its serial kernel.

For each case a one-op graph is built in float64; with random cotangents ``g`` for its float
outputs, ``<VJP(g), v>`` must equal the derivative of ``sum <g, outputs>`` along a random
direction ``v`` of every float input (central differences with Richardson extrapolation).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from spmdrules import ops
from spmdrules.execution.executor import serial_op, serial_vjp
from spmdrules.execution.local import list_vjps
from spmdrules.execution.vjp.elementwise import DERIVATIVES
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, Tensor

Build = Callable[[Graph], Any]
POSITIVE = {"log", "log1p", "sqrt", "rsqrt", "pow", "reciprocal"}


def _f(g: Graph, name: str, shape: list[int]) -> Tensor:
    return g.input(name, shape, "float64")


def _unary(name: str) -> Build:
    return lambda g: getattr(ops, name)(_f(g, "x", [3, 4]))


def _put_along(reduce: str, include_self: bool) -> Build:
    return lambda g: ops.put_along_axis(_f(g, "x", [3, 4]), g.input("index", [3, 5], "int64"),
                                        _f(g, "value", [3, 5]), axis=1, reduce=reduce,
                                        include_self=include_self)


def _batch_norm(g: Graph, shape: list[int], c: int, **attrs: Any) -> Any:
    return ops.batch_norm(_f(g, "x", shape), _f(g, "mean", [c]), _f(g, "variance", [c]),
                          _f(g, "scale", [c]), _f(g, "bias", [c]), **attrs)


CASES: dict[str, Build] = {
    "pool2d-max": lambda g: ops.pool2d(_f(g, "x", [2, 3, 7, 6]), kernel_size=[3, 2],
                                       strides=[2, 2], paddings=[1, 0, 1, 1], ceil_mode=True),
    "pool2d-avg": lambda g: ops.pool2d(_f(g, "x", [2, 5, 6, 3]), kernel_size=[3, 3],
                                       strides=[2, 1], paddings=[1, 2, 0, 1], exclusive=False,
                                       pooling_type="avg", data_format="NHWC"),
    "pool2d-avg-exclusive": lambda g: ops.pool2d(_f(g, "x", [1, 2, 5, 5]), kernel_size=[2, 3],
                                                 paddings=[1, 1], pooling_type="avg"),
    "pool3d-adaptive-max": lambda g: ops.pool3d(_f(g, "x", [1, 2, 5, 4, 3]),
                                                kernel_size=[2, 3, 2], adaptive=True),
    "pool2d-global-avg": lambda g: ops.pool2d(_f(g, "x", [2, 3, 4, 5]), kernel_size=[1, 1],
                                              global_pooling=True, pooling_type="avg"),
    "nearest_interp": lambda g: ops.nearest_interp(_f(g, "x", [2, 3, 3, 4]), out_h=7, out_w=8,
                                                   align_corners=False),
    "nearest_interp-ncw-corners": lambda g: ops.nearest_interp(
        _f(g, "x", [1, 2, 5]), out_w=9, data_format="NCW", align_corners=True),
    "bilinear_interp-half-pixel": lambda g: ops.bilinear_interp(
        _f(g, "x", [2, 3, 3, 4]), scale=[2.0, 1.5], align_corners=False, align_mode=0),
    "bilinear_interp-corners-nhwc": lambda g: ops.bilinear_interp(
        _f(g, "x", [1, 4, 5, 2]), out_h=7, out_w=3, data_format="NHWC"),
    "conv2d": lambda g: ops.conv2d(_f(g, "x", [2, 3, 6, 5]), _f(g, "w", [4, 3, 3, 2]),
                                   strides=[2, 1], paddings=[1, 0, 2, 1], dilations=[1, 2]),
    "conv2d-nhwc-groups": lambda g: ops.conv2d(_f(g, "x", [2, 5, 4, 4]), _f(g, "w", [6, 2, 2, 2]),
                                               groups=2, data_format="NHWC",
                                               padding_algorithm="SAME", strides=[2, 2]),
    "conv3d": lambda g: ops.conv3d(_f(g, "x", [1, 2, 4, 3, 4]), _f(g, "w", [3, 2, 2, 2, 2]),
                                   paddings=[1, 0, 1]),
    "depthwise_conv2d": lambda g: ops.depthwise_conv2d(_f(g, "x", [2, 3, 5, 4]),
                                                       _f(g, "w", [6, 1, 3, 3]), groups=3,
                                                       paddings=[1, 1]),
    "conv2d_transpose": lambda g: ops.conv2d_transpose(_f(g, "x", [2, 4, 3, 3]),
                                                       _f(g, "w", [4, 3, 3, 2]), strides=[2, 1],
                                                       paddings=[1, 0], output_padding=[1, 0],
                                                       groups=2),
    "matmul": lambda g: ops.matmul(_f(g, "x", [2, 3, 4]), _f(g, "y", [4, 5])),
    "matmul-trans": lambda g: ops.matmul(_f(g, "x", [4, 3]), _f(g, "y", [2, 5, 4]),
                                         trans_x=True, trans_y=True),
    "matmul-vector": lambda g: ops.matmul(_f(g, "x", [4]), _f(g, "y", [2, 4, 3])),
    "matmul-batch-broadcast": lambda g: ops.matmul(_f(g, "x", [2, 1, 3, 4]), _f(g, "y", [5, 4, 6])),
    "bmm": lambda g: ops.bmm(_f(g, "x", [2, 3, 4]), _f(g, "y", [2, 4, 5])),
    "add-broadcast": lambda g: ops.add(_f(g, "x", [2, 3, 4]), _f(g, "y", [4])),
    "subtract-size1": lambda g: ops.subtract(_f(g, "x", [2, 3, 4]), _f(g, "y", [3, 1])),
    "multiply": lambda g: ops.multiply(_f(g, "x", [2, 1, 4]), _f(g, "y", [2, 3, 4])),
    "divide": lambda g: ops.divide(_f(g, "x", [3, 4]), _f(g, "y", [3, 4])),
    # a positive base (below), any real exponent: torch's pow of two tensors (issue 26)
    "elementwise_pow": lambda g: ops.elementwise_pow(_f(g, "x", [3, 4]), _f(g, "y", [3, 4])),
    "maximum": lambda g: ops.maximum(_f(g, "x", [3, 4]), _f(g, "y", [4])),
    "minimum": lambda g: ops.minimum(_f(g, "x", [3, 4]), _f(g, "y", [3, 4])),
    "softmax": lambda g: ops.softmax(_f(g, "x", [2, 3, 5]), axis=-1),
    "softmax-axis0": lambda g: ops.softmax(_f(g, "x", [4, 3]), axis=0),
    "log_softmax": lambda g: ops.log_softmax(_f(g, "x", [2, 5]), axis=1),
    "layer_norm": lambda g: ops.layer_norm(_f(g, "x", [2, 3, 6]), _f(g, "scale", [6]),
                                           _f(g, "bias", [6]), begin_norm_axis=2),
    "layer_norm-bna1": lambda g: ops.layer_norm(_f(g, "x", [2, 3, 4]), _f(g, "scale", [12]),
                                                None, begin_norm_axis=1),
    "embedding": lambda g: ops.embedding(g.input("ids", [2, 5], "int64"),
                                         _f(g, "weight", [7, 3]), padding_idx=2),
    "cross_entropy": lambda g: ops.cross_entropy_with_softmax(
        _f(g, "x", [3, 4, 6]), g.input("label", [3, 4, 1], "int64"), axis=-1, ignore_index=1),
    "cross_entropy-soft": lambda g: ops.cross_entropy_with_softmax(
        _f(g, "x", [3, 6]), _f(g, "label", [3, 6]), soft_label=True),
    "cross_entropy-no-softmax": lambda g: ops.softmax_with_cross_entropy(
        _f(g, "x", [3, 6]), g.input("label", [3, 1], "int64"), use_softmax=False),
    "reshape": lambda g: ops.reshape(_f(g, "x", [2, 3, 4]), shape=[6, 2, 2]),
    "flatten": lambda g: ops.flatten(_f(g, "x", [2, 3, 4]), start_axis=1, stop_axis=2),
    "squeeze": lambda g: ops.squeeze(_f(g, "x", [2, 1, 4]), axis=[1]),
    "unsqueeze": lambda g: ops.unsqueeze(_f(g, "x", [2, 4]), axis=[0, 2]),
    "transpose": lambda g: ops.transpose(_f(g, "x", [2, 3, 4]), perm=[2, 0, 1]),
    "split_with_num": lambda g: ops.split_with_num(_f(g, "x", [2, 6]), num=3, axis=-1),
    "split": lambda g: ops.split(_f(g, "x", [5, 2]), sections=[2, -1], axis=0),
    "unbind": lambda g: ops.unbind(_f(g, "x", [3, 2]), axis=0),
    "concat": lambda g: ops.concat([_f(g, "a", [2, 3]), _f(g, "b", [2, 1])], axis=1),
    "stack": lambda g: ops.stack([_f(g, "a", [2, 3]), _f(g, "b", [2, 3])], axis=1),
    "sum": lambda g: ops.sum(_f(g, "x", [2, 3, 4]), axis=[0, 2], keep_dim=False),
    "sum-keepdim": lambda g: ops.sum(_f(g, "x", [2, 3, 4]), axis=[1], keep_dim=True),
    "squared_l2_norm": lambda g: ops.squared_l2_norm(_f(g, "x", [3, 4])),
    "mean_all": lambda g: ops.mean_all(_f(g, "x", [3, 4])),
    "einsum": lambda g: ops.einsum([_f(g, "a", [2, 3, 4]), _f(g, "b", [4, 5])],
                                   equation="ijk,kl->jil"),
    "einsum-diagonal": lambda g: ops.einsum([_f(g, "a", [3, 3]), _f(g, "b", [3])],
                                            equation="ii,i->i"),
    "swiglu": lambda g: ops.swiglu(_f(g, "x", [2, 4]), _f(g, "y", [2, 4])),
    "swiglu-halves": lambda g: ops.swiglu(_f(g, "x", [2, 6]), None),
    "fused_rms_norm": lambda g: ops.fused_rms_norm(_f(g, "x", [2, 3, 5]), _f(g, "scale", [5])),
    "add_n": lambda g: ops.add_n([_f(g, "a", [2, 3]), _f(g, "b", [2, 3]), _f(g, "c", [2, 3])]),
    "logsumexp": lambda g: ops.logsumexp(_f(g, "x", [2, 3, 4]), axis=[1, 2]),
    "max": lambda g: ops.max(_f(g, "x", [3, 5]), axis=[1]),
    "amin-keepdim": lambda g: ops.amin(_f(g, "x", [3, 5]), axis=[0], keep_dim=True),
    "frobenius_norm": lambda g: ops.frobenius_norm(_f(g, "x", [3, 4]), axis=[0, 1]),
    "full_like": lambda g: ops.full_like(_f(g, "x", [3, 4]), 2.0),
    **{f"p_norm-{name}": (lambda g, a=attrs: ops.p_norm(_f(g, "x", [3, 4, 2]), **a))
       for name, attrs in {
           "2": {}, "1-axis0-keepdims": {"porder": 1.0, "axis": 0, "keepdims": True},
           "3-vector": {"porder": 3.0, "asvector": True}, "1.5": {"porder": 1.5, "axis": 1},
           "0.5-keepdims": {"porder": 0.5, "keepdims": True}, "-2": {"porder": -2.0, "axis": 1},
           "inf": {"porder": float("inf"), "axis": 1},
           "-inf-vector-keepdims": {"porder": float("-inf"), "asvector": True, "keepdims": True},
           "0": {"porder": 0.0}}.items()},
    "slice": lambda g: ops.slice(_f(g, "x", [4, 5, 3]), axes=[0, 2], starts=[1, -2], ends=[3, 9],
                                 decrease_axis=[]),
    "slice-decrease": lambda g: ops.slice(_f(g, "x", [4, 5]), axes=[0], starts=[2], ends=[3],
                                          decrease_axis=[0]),
    "where": lambda g: ops.where(g.input("c", [3, 1], "bool"), _f(g, "x", [3, 4]),
                                 _f(g, "y", [4])),
    "triu": lambda g: ops.triu(_f(g, "x", [2, 4, 5]), diagonal=1),
    "tril_triu": lambda g: ops.tril_triu(_f(g, "x", [4, 4]), diagonal=-1, lower=True),
    "cast": lambda g: ops.cast(_f(g, "x", [3, 4]), "float32"),
    "cumsum": lambda g: ops.cumsum(_f(g, "x", [3, 4]), axis=0, exclusive=True, reverse=True),
    "cumsum-flatten": lambda g: ops.cumsum(_f(g, "x", [3, 4]), flatten=True),
    "lrn": lambda g: ops.lrn(_f(g, "x", [2, 6, 3, 2]), n=5, k=2.0, alpha=0.3, beta=0.75),
    "lrn-nhwc-even": lambda g: ops.lrn(_f(g, "x", [2, 3, 5]), n=4, k=1.0, alpha=0.5, beta=0.6,
                                       data_format="NLC"),
    "cummax": lambda g: ops.cummax(_f(g, "x", [3, 5]), axis=1),
    "cummin": lambda g: ops.cummin(_f(g, "x", [4, 2]), axis=0),
    "topk": lambda g: ops.topk(_f(g, "x", [3, 5]), k=2, axis=1, largest=False),
    "argsort": lambda g: ops.argsort(_f(g, "x", [4, 3]), axis=0, descending=True),
    "gather": lambda g: ops.gather(_f(g, "x", [5, 3]), g.input("index", [4], "int64"), axis=0),
    "index_select": lambda g: ops.index_select(_f(g, "x", [3, 5]), g.input("index", [6], "int64"),
                                               axis=1),
    "gather_nd": lambda g: ops.gather_nd(_f(g, "x", [4, 5, 2]), g.input("index", [3, 2], "int64")),
    "take_along_axis": lambda g: ops.take_along_axis(_f(g, "x", [4, 5]),
                                                     g.input("index", [4, 3], "int64"), axis=1),
    "pad": lambda g: ops.pad(_f(g, "x", [3, 4]), paddings=[1, 2, 0, 1], pad_value=0.5),
    "roll": lambda g: ops.roll(_f(g, "x", [3, 4]), shifts=[1, -5], axis=[0, 1]),
    "roll-flat": lambda g: ops.roll(_f(g, "x", [3, 4]), shifts=[7]),
    "mean": lambda g: ops.mean(_f(g, "x", [3, 4, 2]), axis=[0, 2], keepdim=True),
    "unique": lambda g: ops.unique(_f(g, "x", [6]), size=6),
    "nonzero": lambda g: ops.nonzero(_f(g, "x", [2, 3]), size=6),
    "tile": lambda g: ops.tile(_f(g, "x", [2, 1, 3]), repeat_times=[2, 1, 3, 1]),
    "expand": lambda g: ops.expand(_f(g, "x", [3, 1]), shape=[2, -1, 4]),
    "expand_as": lambda g: ops.expand_as(_f(g, "x", [1, 3]), _f(g, "y", [2, 4, 3])),
    "strided_slice": lambda g: ops.strided_slice(_f(g, "x", [6, 5]), axes=[0, 1], starts=[5, 0],
                                                 ends=[0, 5], strides=[-2, 2]),
    "scatter": lambda g: ops.scatter(_f(g, "x", [5, 3]), g.input("index", [4], "int64"),
                                     _f(g, "updates", [4, 3]), overwrite=True),
    "scatter-add": lambda g: ops.scatter(_f(g, "x", [3, 2]), g.input("index", [5], "int64"),
                                         _f(g, "updates", [5, 2]), overwrite=False),
    "scatter_nd_add": lambda g: ops.scatter_nd_add(_f(g, "x", [4, 3, 2]),
                                                   g.input("index", [2, 3, 2], "int64"),
                                                   _f(g, "updates", [2, 3, 2])),
    **{f"put_along_axis-{reduce}-{int(self)}": _put_along(reduce, self)
       for reduce in ("assign", "add", "mul", "mean", "amin", "amax") for self in (True, False)},
    "index_put": lambda g: ops.index_put(_f(g, "x", [4, 3, 2]), [
        g.input("index0", [5], "int64"), g.input("index1", [5], "int64")], _f(g, "value", [2]),
        accumulate=False),
    "index_put-accumulate": lambda g: ops.index_put(_f(g, "x", [3, 4]), [
        g.input("index", [6], "int64")], _f(g, "value", [6, 1]), accumulate=True),
    "flash_attention": lambda g: ops.flash_attention(
        _f(g, "q", [2, 3, 4, 3]), _f(g, "k", [2, 5, 2, 3]), _f(g, "v", [2, 5, 2, 2]), None,
        _f(g, "attn_mask", [1, 4, 3, 5]), is_test=True),
    "flash_attention-causal": lambda g: ops.flash_attention(
        _f(g, "q", [1, 3, 2, 2]), _f(g, "k", [1, 4, 2, 2]), _f(g, "v", [1, 4, 2, 3]), None,
        _f(g, "attn_mask", [1, 1, 3, 4]), causal=True),
    "fused_rope": lambda g: ops.fused_rotary_position_embedding(
        _f(g, "q", [2, 3, 2, 4]), _f(g, "k", [2, 3, 2, 4]), None, _f(g, "sin", [1, 3, 1, 4]),
        _f(g, "cos", [1, 3, 1, 4]), None, use_neox_rotary_style=False),
    "fused_rope-ids": lambda g: ops.fused_rotary_position_embedding(
        _f(g, "q", [3, 2, 2, 4]), None, _f(g, "v", [3, 2, 2, 4]), _f(g, "sin", [8, 4]),
        _f(g, "cos", [8, 4]), g.input("position_ids", [2, 3], "int64"), time_major=True),
    "fused_rope-computed": lambda g: ops.fused_rotary_position_embedding(
        _f(g, "q", [2, 3, 2, 6]), None, None, None, None, None),
    "moe_combine": lambda g: ops.moe_combine(_f(g, "x", [4, 3]), _f(g, "w", [5, 2]),
                                             g.input("index", [5, 2], "int64")),
    "roi_align": lambda g: ops.roi_align(_f(g, "x", [2, 3, 5, 4]), _f(g, "boxes", [3, 4]),
                                         g.input("boxes_num", [2], "int64"), pooled_height=2,
                                         pooled_width=2, spatial_scale=0.5, sampling_ratio=2,
                                         aligned=True),
    **{f"unary-{name}": _unary(name) for name in sorted(DERIVATIVES)},
    "batch_norm-train": lambda g: _batch_norm(g, [3, 4, 2, 3], 4),
    "batch_norm-global": lambda g: _batch_norm(g, [3, 4, 5], 4, use_global_stats=True),
    "batch_norm-test-nhwc": lambda g: _batch_norm(g, [2, 3, 2, 5], 5, is_test=True,
                                                  data_format="NHWC"),
    "batch_norm-trainable-nhwc": lambda g: _batch_norm(g, [4, 3, 2], 2, is_test=True,
                                                       trainable_statistics=True,
                                                       data_format="NHWC"),
    "group_norm": lambda g: ops.group_norm(_f(g, "x", [2, 6, 3, 2]), _f(g, "scale", [6]),
                                           _f(g, "bias", [6]), groups=3),
    "group_norm-nhwc-no-params": lambda g: ops.group_norm(_f(g, "x", [3, 5, 4]), None, None,
                                                          groups=2, data_format="NHWC"),
    "instance_norm": lambda g: ops.instance_norm(_f(g, "x", [2, 3, 4, 3]), _f(g, "scale", [3]),
                                                 _f(g, "bias", [3])),
    "linear_v2": lambda g: ops.linear_v2(_f(g, "input", [2, 3, 4]), _f(g, "weight", [4, 5]),
                                         _f(g, "bias", [5])),
    "linear_v2-no-bias": lambda g: ops.linear_v2(_f(g, "input", [4]), _f(g, "weight", [4, 3]),
                                                 None),
    "fused_gemm_epilogue": lambda g: ops.fused_gemm_epilogue(
        _f(g, "x", [3, 4]), _f(g, "y", [4, 5]), _f(g, "bias", [5])),
    "fused_gemm_epilogue-trans-gelu": lambda g: ops.fused_gemm_epilogue(
        _f(g, "x", [2, 4, 3]), _f(g, "y", [5, 4]), _f(g, "bias", [5]), trans_x=True,
        trans_y=True, activation="gelu"),
    "fused_gemm_epilogue-relu": lambda g: ops.fused_gemm_epilogue(
        _f(g, "x", [3, 4]), _f(g, "y", [4, 5]), _f(g, "bias", [5]), activation="relu"),
    "label_smooth": lambda g: ops.label_smooth(_f(g, "label", [3, 5]), None, epsilon=0.1),
    "label_smooth-prior": lambda g: ops.label_smooth(_f(g, "label", [2, 3, 5]),
                                                     _f(g, "prior_dist", [1, 5]), epsilon=0.2),
    "label_smooth-prior-rank": lambda g: ops.label_smooth(_f(g, "label", [5]),
                                                          _f(g, "prior_dist", [1, 5]),
                                                          epsilon=0.3),
    "fused_dropout_add": lambda g: ops.fused_dropout_add(_f(g, "x", [4, 5]), _f(g, "y", [4, 5]),
                                                         p=0.3, seed=7),
    "fused_dropout_add-downgrade-test": lambda g: ops.fused_dropout_add(
        _f(g, "x", [3, 2]), _f(g, "y", [3, 2]), p=0.4, is_test=True, mode="downgrade_in_infer"),
    "fused_linear_param_grad_add": lambda g: ops.fused_linear_param_grad_add(
        _f(g, "x", [2, 3, 4]), _f(g, "dout", [2, 3, 5]), _f(g, "dweight", [4, 5]),
        _f(g, "dbias", [5])),
    "fused_linear_param_grad_add-no-bias": lambda g: ops.fused_linear_param_grad_add(
        _f(g, "x", [3, 4]), _f(g, "dout", [3, 2]), None, None, has_bias=False),
    "c_embedding": lambda g: ops.c_embedding(_f(g, "weight", [4, 3]),
                                             g.input("index_ids", [2, 5], "int64"),
                                             start_index=1, vocab_size=6),
    "c_softmax_with_cross_entropy": lambda g: ops.c_softmax_with_cross_entropy(
        _f(g, "x", [2, 3, 5]), g.input("label", [2, 3, 1], "int64"), ignore_index=2),
    "c_softmax_with_multi_label_cross_entropy": lambda g:
        ops.c_softmax_with_multi_label_cross_entropy(
            _f(g, "x", [2, 3, 6]), g.input("label", [2, 3, 4], "int64"),
            _f(g, "smooth_weight", [2, 3, 4]), ignore_index=2),
    "c_softmax_with_multi_label_cross_entropy-per-label": lambda g:
        ops.c_softmax_with_multi_label_cross_entropy(
            _f(g, "x", [3, 7]), g.input("label", [3, 2], "int64"),
            _f(g, "smooth_weight", [3, 2]), sum_multi_label_loss=False),
    "instance_norm-no-scale": lambda g: ops.instance_norm(_f(g, "x", [3, 2, 5]), None,
                                                          _f(g, "bias", [2])),
}
#: float inputs that are constants of their op (Paddle's backward gives them no gradient)
CONSTANT_INPUTS = {("roi_align", "boxes")}
#: ops without operands: nothing to differentiate (their VJP answers no cotangent at all)
SOURCES = {"full", "arange"}
#: ops whose every input is integer: no float input to check (their VJP answers None for it)
INTEGER_ONLY = {"one_hot"}


def _values(op: Op, rng: np.random.Generator) -> dict[str, Any]:
    vals: dict[str, Any] = {}
    for v in op.operands:
        for t in (() if v is None else (v,) if isinstance(v, Tensor) else v):
            if op.type == "roi_align" and t.name in ("boxes", "boxes_num"):
                n = op.operands[0].shape[0]  # type: ignore[union-attr]
                rois = op.operands[1].shape[0]  # type: ignore[union-attr]
                vals[t.name] = (np.asarray([rois - rois // n * (n - 1)] + [rois // n] * (n - 1))
                                if t.name == "boxes_num"
                                # x1, y1 below x2, y2
                                else np.sort(rng.uniform(0.0, 8.0, (rois, 2, 2)), axis=1)
                                .reshape(rois, 4))
            elif t.dtype == "bool":
                vals[t.name] = rng.random(t.shape) > 0.5
            elif t.dtype == "int64":
                hi = 3 if t.name.startswith("index") else (6 if t.name == "label" else 7)
                vals[t.name] = rng.integers(0, hi, size=t.shape)
            elif (op.type in DERIVATIVES and op.type in POSITIVE) or (
                    op.type == "divide" and t.name == "y") or t.name == "variance" or (
                    op.type == "elementwise_pow" and t.name == "x"):
                vals[t.name] = np.abs(rng.standard_normal(t.shape)) + 0.5
            elif op.type.startswith(("softmax_with", "cross_entropy")) and t.name == "x" and \
                    not op.attr_dict.get("use_softmax", True):
                vals[t.name] = rng.uniform(0.2, 1.0, size=t.shape)
            else:
                vals[t.name] = rng.standard_normal(t.shape)
    return vals


def _flat(slots: Any) -> list[Tensor]:
    out: list[Tensor] = []
    for v in slots:
        out.extend(() if v is None else (v,) if isinstance(v, Tensor) else v)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_vjp_matches_numerical_derivative(case: str) -> None:
    rng = np.random.default_rng(zlib.crc32(case.encode()))  # str hashes vary per process
    with Graph(case) as g:
        CASES[case](g)
    [op] = g.ops
    values = _values(op, rng)
    outs = serial_op(op, values)
    cts = {t.name: rng.standard_normal(t.shape) for t in _flat(op.results)
           if np.asarray(outs[t.name]).dtype.kind == "f"}
    grads = serial_vjp(op, {**values, **outs}, cts)

    def objective(vals: dict[str, Any]) -> float:
        got = serial_op(op, vals)
        return float(sum(np.sum(c * got[n]) for n, c in cts.items()))

    checked = 0
    for t in _flat(op.operands):
        if (op.type, t.name) in CONSTANT_INPUTS:
            assert grads.get(t.name) is None, f"{case}: constant {t.name!r} got a cotangent"
            continue
        if np.asarray(values[t.name]).dtype.kind != "f":
            assert t.name not in grads, f"{case}: integer {t.name!r} got a cotangent"
            continue
        v = rng.standard_normal(t.shape)

        def central(h: float, name: str = t.name, v: Any = v) -> float:
            plus, minus = dict(values), dict(values)
            plus[name], minus[name] = values[name] + h * v, values[name] - h * v
            return (objective(plus) - objective(minus)) / (2 * h)

        numerical = (4 * central(5e-5) - central(1e-4)) / 3
        analytic = float(np.sum(grads[t.name] * v))
        scale = float(np.linalg.norm(grads[t.name]) * np.linalg.norm(v)) or 1.0
        assert abs(analytic - numerical) <= 1e-7 * scale, (case, t.name, analytic, numerical)
        checked += 1
    assert checked, f"{case}: no float input was checked"


def test_every_registered_vjp_has_a_case() -> None:
    covered = {g.ops[0].type for g in (_build(c) for c in CASES)}
    aliases = {"expand_as_v2", "matmul_v2", "elementwise_add", "elementwise_mul", "elementwise_div",
               "reshape2", "transpose2", "unsqueeze2", "lookup_table_v2", "reduce_sum", "amax", "min",
               "reduce_max"}
    assert set(list_vjps()) - covered - aliases - SOURCES - INTEGER_ONLY == set()


def test_a_constant_without_operands_returns_no_cotangent() -> None:
    with Graph("c") as g:
        ops.full(shape=[2, 3], value=1.0, name="f")
        ops.arange(end=4.0, name="r")
    for op in g.ops:
        values = serial_op(op, {})
        assert serial_vjp(op, values, {t.name: np.ones(t.shape) for t in op.outputs}) == {}


def _build(case: str) -> Graph:
    with Graph(case) as g:
        CASES[case](g)
    return g


def test_a_layer_norm_takes_the_cotangents_of_its_mean_and_variance() -> None:
    g = _build("layer_norm")
    [op] = g.ops
    rng = np.random.default_rng(3)
    values = _values(op, rng)
    outs = serial_op(op, values)
    out, mean, _ = (t.name for t in _flat(op.results))
    only_out = serial_vjp(op, {**values, **outs}, {out: np.zeros_like(outs[out]),
                                                   mean: np.ones_like(outs[mean])})
    x = values["x"]
    # d(sum of row means)/dx = 1/row size everywhere
    assert np.allclose(only_out["x"], 1.0 / x.shape[-1])
