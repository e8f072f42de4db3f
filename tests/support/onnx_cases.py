"""ONNX models of a few nodes and their check against onnx.reference (the reference evaluator):
the helpers of tests/importers/test_onnx_import.py and test_onnx_export_ops.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from spmdrules.execution.executor import run_serial
from spmdrules.importers import onnx as onnx_import

F = TensorProto.FLOAT
N = helper.make_node
RNG = np.random.default_rng(0)


def r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def model(nodes: Sequence[Any], inputs: dict[str, Any], outputs: Sequence[str],
          inits: dict[str, np.ndarray] | None = None, opset: int = 13) -> Any:
    """A model of ``nodes``; an input is a shape (float32) or an array (its shape and type). Its
    outputs declare the shapes ONNX infers (``onnx.checker`` wants a shape on every graph
    output)."""
    def info(name: str, v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        return helper.make_tensor_value_info(name, F, list(v))

    g = helper.make_graph(
        list(nodes), "t", [info(k, v) for k, v in inputs.items()], [],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    m = shape_inference.infer_shapes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))
    inferred = {vi.name: vi for vi in m.graph.value_info}
    m.graph.output.extend(inferred.get(o, helper.make_tensor_value_info(o, F, None))
                          for o in outputs)
    return m


def check(m: Any, feeds: dict[str, np.ndarray], rtol: float = 1e-5) -> None:
    """Our import of ``m`` run serially equals onnx.reference: in value, and in type."""
    want = ReferenceEvaluator(m).run(None, feeds)
    im = onnx_import.import_model(m)
    got = run_serial(im.graph, {**im.values, **feeds})
    for name, w in zip(im.outputs, want, strict=True):
        w = np.asarray(w)
        assert got[name].shape == w.shape, (name, got[name].shape, w.shape)
        # the serial executor computes floats in float64; any other type is ONNX's
        assert got[name].dtype == w.dtype or got[name].dtype.kind == w.dtype.kind == "f", (
            name, got[name].dtype, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(got[name], w, rtol=rtol, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], w, err_msg=name)


def i64(*values: Any) -> np.ndarray:
    return np.array(values, np.int64)


def ids(*shape: int, high: int = 5, low: int = 0) -> np.ndarray:
    return RNG.integers(low, high, shape).astype(np.int64)


#: the ops torch.onnx.export emits for Hugging Face models, each with the attribute variants and
#: opsets the exporter (and the spec) give it: (nodes, feeds, outputs, initializers, opset)
EXPORT_CASES: dict[str, tuple[list[Any], dict[str, np.ndarray], list[str],
                              dict[str, np.ndarray], int]] = {
    # an embedding lookup (a [V, H] table on axis 0) with run-time ids, some counting from the
    # end; a 3-D table on a negative axis with a constant index of rank 2 holding negatives; a
    # rank-0 index removes the axis (a CLS token)
    "gather-embedding-negative-ids": (
        [N("Gather", ["w", "i"], ["y"])], {"i": ids(2, 3, low=-5)}, ["y"], {"w": r(5, 4)}, 13),
    "gather-negative-axis-constant-index": (
        [N("Gather", ["x", "k"], ["y"], axis=-1), N("Gather", ["x", "s"], ["z"], axis=1)],
        {"x": r(2, 3, 4)}, ["y", "z"], {"k": i64([0, -1], [-4, 2]), "s": np.array(-2, np.int64)},
        13),
    "gather-runtime-index-axis-1": (
        [N("Gather", ["x", "i"], ["y"], axis=1)], {"x": r(2, 4, 3), "i": ids(3, 2, high=4, low=-4)},
        ["y"], {}, 11),
    # the dynamo exporter's mask indexing: the index's last axis names data's leading dims
    "gather-nd": (
        [N("GatherND", ["x", "k"], ["y"]), N("GatherND", ["x", "i"], ["z"])],
        {"x": r(3, 4, 2), "i": np.stack([ids(2, 5, high=3, low=-3), ids(2, 5, high=4, low=-4)],
                                        axis=-1)},
        ["y", "z"], {"k": i64([[0], [-1]], [[2], [-3]])}, 13),
    # (onnx 1.23's reference GatherElements fails on a negative axis and on an index shorter
    # than x on another axis: test_gather_elements_of_a_shorter_index_equals_numpy has those)
    "gather-elements": (
        [N("GatherElements", ["x", "k"], ["y"], axis=1),
         N("GatherElements", ["x", "i"], ["z"], axis=1)],
        {"x": r(3, 4), "i": ids(3, 2, high=4, low=-4)}, ["y", "z"],
        {"k": i64([0, -1, 2], [3, -4, 1], [1, 1, 1])}, 13),
    # steps, negative axes, starts and ends past either end, a negative step to the front
    "slice-steps-negative-axes": (
        [N("Slice", ["x", "s", "e", "a", "k"], ["y"]),
         N("Slice", ["x", "s2", "e2", "a2", "k2"], ["z"]),
         N("Slice", ["x", "s3", "e3"], ["w"])],
        {"x": r(4, 6, 5)}, ["y", "z", "w"],
        {"s": i64(1, -100), "e": i64(100, -1), "a": i64(-1, 0), "k": i64(2, 1),
         "s2": i64(100, 4), "e2": i64(-100, 0), "a2": i64(1, -1), "k2": i64(-2, -1),
         "s3": i64(0), "e3": i64(2**62)}, 13),
    "slice-opset9-attributes": (
        [N("Slice", ["x"], ["y"], starts=[1, -3], ends=[3, 100], axes=[0, 2])],
        {"x": r(4, 3, 5)}, ["y"], {}, 9),
    "split-input-attribute-num-outputs": (
        [N("Split", ["x", "p"], ["a", "b"], axis=1),
         N("Split", ["x"], ["c", "d", "e"], axis=-1, num_outputs=3),
         N("Split", ["x"], ["f", "g"], axis=1, num_outputs=2)],
        {"x": r(2, 5, 6)}, ["a", "b", "c", "d", "e", "f", "g"], {"p": i64(2, 3)}, 18),
    "split-opset11-attribute-opset13-equal": (
        [N("Split", ["x"], ["a", "b"], axis=0, split=[1, 3]), N("Split", ["x"], ["c", "d"])],
        {"x": r(4, 3)}, ["a", "b", "c", "d"], {}, 11),
    "split-opset13-equal": (
        [N("Split", ["x"], ["c", "d"], axis=1)], {"x": r(4, 6)}, ["c", "d"], {}, 13),
    # (onnx 1.23's reference Pad refuses negative pads: test_negative_pads_crop has those)
    "pad-constant-value-axes": (
        [N("Pad", ["x", "p", "v"], ["y"]), N("Pad", ["x", "q", "", "ax"], ["z"])],
        {"x": r(2, 3, 4)}, ["y", "z"],
        {"p": i64(0, 1, 2, 1, 1, 0), "v": np.array([1.5], np.float32), "q": i64(2, 1, 0, 3),
         "ax": i64(-1, 1)}, 18),
    "pad-reflect-edge-wrap": (
        [N("Pad", ["x", "p"], ["re"], mode="reflect"), N("Pad", ["x", "e"], ["ed"], mode="edge"),
         N("Pad", ["x", "q", "", "ax"], ["wr"], mode="wrap")],
        {"x": r(2, 3, 4)}, ["re", "ed", "wr"],
        {"p": i64(1, 2, 0, 0, 1, 3), "e": i64(2, 0, 1, 1, 3, 0), "q": i64(0, 3, 1, 2),
         "ax": i64(-1, 1)}, 19),
    "pad-opset2-attributes": (
        [N("Pad", ["x"], ["y"], pads=[1, 0, 2, 1], value=-2.0)], {"x": r(3, 4)}, ["y"], {}, 9),
    "reduce-mean-axes-attribute": (
        [N("ReduceMean", ["x"], ["y"], axes=[-1]), N("ReduceMean", ["x"], ["z"], keepdims=0),
         N("ReduceMax", ["x"], ["m"], axes=[0, 2], keepdims=0),
         N("ReduceMin", ["x"], ["n"], axes=[1]), N("ReduceProd", ["x"], ["p"], axes=[-2])],
        {"x": r(2, 3, 4)}, ["y", "z", "m", "n", "p"], {}, 13),
    "reduce-axes-input-opset18": (
        [N("ReduceMean", ["x", "a"], ["y"], keepdims=0), N("ReduceSum", ["x", "b"], ["z"]),
         N("ReduceSum", ["x"], ["s"], keepdims=0),
         N("ReduceMean", ["x"], ["i"], noop_with_empty_axes=1)],
        {"x": r(2, 3, 4)}, ["y", "z", "s", "i"], {"a": i64(0, -1), "b": i64(1)}, 18),
    "layer-norm": (
        [N("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-3),
         N("LayerNormalization", ["x", "g2"], ["z"], axis=1)],
        {"x": r(2, 3, 4)}, ["y", "z"], {"g": r(4), "b": r(4), "g2": r(3, 4)}, 17),
    "where-compare-logical-cast": (
        [N("Less", ["x", "y"], ["lt"]), N("LessOrEqual", ["x", "y"], ["le"]),
         N("Greater", ["x", "y"], ["gt"]), N("GreaterOrEqual", ["x", "y"], ["ge"]),
         N("Equal", ["i", "j"], ["eq"]), N("And", ["lt", "eq"], ["an"]),
         N("Or", ["le", "gt"], ["o"]), N("Xor", ["ge", "an"], ["xo"]), N("Not", ["xo"], ["no"]),
         N("Where", ["no", "x", "y"], ["w"]), N("Cast", ["w"], ["ci"], to=TensorProto.INT64),
         N("Cast", ["no"], ["cf"], to=F), N("Cast", ["x"], ["same"], to=F)],
        {"x": r(2, 3), "y": r(3), "i": ids(2, 3, high=2), "j": ids(3, high=2)},
        ["an", "o", "no", "w", "ci", "cf", "same"], {}, 13),
    # torch.onnx.export's sdpa: the softmax of a fully masked row (all -inf) is NaN, which
    # IsNaN and Where set to 0; IsNaN of the infinities, zeros and finite values is false
    "isnan-sdpa-masked-row": (
        [N("Softmax", ["s"], ["p"], axis=-1), N("IsNaN", ["p"], ["nan"]),
         N("Where", ["nan", "zero", "p"], ["y"]), N("IsNaN", ["v"], ["vn"])],
        {"s": np.array([[0.5, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]], np.float32),
         "v": np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5], np.float32)},
        ["nan", "y", "vn"], {"zero": np.array(0.0, np.float32)}, 20),
    "pow-expand-tile": (
        [N("Pow", ["x", "two"], ["sq"]), N("Pow", ["a", "x"], ["p"]),
         N("Pow", ["x", "n"], ["pi"]), N("Expand", ["c", "s"], ["e"]),
         N("Expand", ["c", "one"], ["e1"]), N("Tile", ["x", "t"], ["tl"])],
        {"x": r(2, 3), "a": np.abs(r(2, 3)) + 0.5, "c": r(3, 1)},
        ["sq", "p", "pi", "e", "e1", "tl"],
        {"two": np.array(2.0, np.float32), "n": i64(3, 2, 1), "s": i64(2, 1, 4),
         "one": i64(1), "t": i64(2, 1)}, 13),
    "gelu-cos-sin-cumsum-topk": (
        [N("Gelu", ["x"], ["g"]), N("Gelu", ["x"], ["gt"], approximate="tanh"),
         N("Cos", ["x"], ["cos"]), N("Sin", ["x"], ["sin"]),
         N("CumSum", ["x", "ax"], ["cs"]), N("CumSum", ["x", "ax"], ["cx"], exclusive=1, reverse=1),
         N("TopK", ["x", "k"], ["v", "ix"], axis=0, largest=0)],
        {"x": r(3, 4)}, ["g", "gt", "cos", "sin", "cs", "cx", "v", "ix"],
        {"ax": np.array(-1, np.int64), "k": i64(2)}, 20),
    # the exporter's shape arithmetic, computed at import: Shape (with start, end), Gather of a
    # dim, Unsqueeze, Concat, Range, a small ConstantOfShape, Equal and Where over shape vectors
    "shape-arithmetic-folded": (
        [N("Shape", ["x"], ["sh"]), N("Shape", ["x"], ["tail"], start=-2),
         N("Gather", ["sh", "zero"], ["b"]), N("Unsqueeze", ["b", "ax0"], ["bv"]),
         N("Concat", ["bv", "minus1"], ["target"], axis=0), N("Reshape", ["x", "target"], ["y"]),
         N("Size", ["x"], ["n"]), N("Range", ["zero", "n", "six"], ["pos"]),
         N("ConstantOfShape", ["tail"], ["ones"], value=numpy_helper.from_array(i64(1))),
         N("Equal", ["tail", "ones3"], ["eq"]), N("Where", ["eq", "tail", "ones3"], ["to"]),
         N("Expand", ["pos", "to"], ["posx"]), N("Cast", ["posx"], ["posf"], to=F),
         N("Add", ["y", "bias"], ["out"])],
        {"x": r(2, 3, 4)}, ["y", "posf", "out"],
        {"zero": np.array(0, np.int64), "ax0": i64(0), "minus1": i64(-1),
         "six": np.array(6, np.int64), "ones3": i64(3, 1), "bias": r(12)}, 15),
}
