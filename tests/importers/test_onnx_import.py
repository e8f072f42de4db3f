"""spmdrules.importers.onnx: every mapped op equals ONNX's reference evaluator; names, constants,
input_shapes and the shape cross-check; typed refusals; the CLI; the documented op list."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx extra (make test installs it)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_cases import EXPORT_CASES, N, check, model, r  # noqa: E402

import spmdrules as sr  # noqa: E402
from spmdrules.cli import main  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.execution.executor import run_serial  # noqa: E402
from spmdrules.graph.exchange import load as load_json  # noqa: E402
from spmdrules.importers import errors  # noqa: E402
from spmdrules.importers import onnx as onnx_import  # noqa: E402
from spmdrules.importers.onnx_ops import OPS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
F = TensorProto.FLOAT


CASES: dict[str, tuple[list[Any], dict[str, Any], list[str], dict[str, np.ndarray], int]] = {
    "conv-bias-pads-stride-group": (
        [N("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 2, 1], strides=[2, 1], group=2)],
        {"x": r(1, 4, 7, 6)}, ["y"], {"w": r(6, 2, 3, 3), "b": r(6)}, 13),
    "conv-same-dilated": (
        [N("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", dilations=[2, 1], strides=[2, 2])],
        {"x": r(2, 3, 7, 8)}, ["y"], {"w": r(4, 3, 3, 2)}, 13),
    "conv3d": ([N("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1, 1, 1])],
               {"x": r(1, 2, 4, 5, 3)}, ["y"], {"w": r(3, 2, 3, 3, 3)}, 13),
    # onnx 1.23's reference ConvTranspose with group > 1 slices the weight by output channels
    # and fails: test_conv_transpose_groups_equal_torch checks groups against torch instead
    "convtranspose-bias-kernel-eq-stride": (
        [N("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], kernel_shape=[2, 2])],
        {"x": r(2, 4, 5, 6)}, ["y"], {"w": r(4, 3, 2, 2), "b": r(3)}, 13),
    "convtranspose-pads-dilated-output-padding": (
        [N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 1], pads=[1, 0, 0, 1],
           dilations=[1, 2], output_padding=[1, 0])],
        {"x": r(1, 2, 5, 4)}, ["y"], {"w": r(2, 3, 3, 3)}, 13),
    "convtranspose-output-shape-same-upper": (
        [N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], auto_pad="SAME_UPPER",
           output_shape=[9, 8])], {"x": r(1, 2, 5, 4)}, ["y"], {"w": r(2, 3, 3, 3)}, 13),
    "convtranspose-same-lower": (
        [N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], auto_pad="SAME_LOWER")],
        {"x": r(1, 2, 5, 4)}, ["y"], {"w": r(2, 3, 3, 3)}, 13),
    "convtranspose-valid": (
        [N("ConvTranspose", ["x", "w"], ["y"], strides=[3, 1], auto_pad="VALID")],
        {"x": r(1, 2, 5, 4)}, ["y"], {"w": r(2, 3, 3, 3)}, 13),
    "maxpool-asym-ceil": (
        [N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[0, 0, 1, 1], strides=[2, 2],
           ceil_mode=1)], {"x": r(1, 3, 8, 9)}, ["y"], {}, 13),
    "avgpool-exclusive": (
        [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
        {"x": r(1, 2, 5, 5)}, ["y"], {}, 13),
    "avgpool-count-pad": (
        [N("AveragePool", ["x"], ["y"], kernel_shape=[2, 3], pads=[1, 1, 1, 1], strides=[2, 1],
           count_include_pad=1)], {"x": r(1, 2, 5, 5)}, ["y"], {}, 13),
    "global-pools": ([N("GlobalAveragePool", ["x"], ["a"]), N("GlobalMaxPool", ["x"], ["m"])],
                     {"x": r(2, 3, 4, 5)}, ["a", "m"], {}, 13),
    # onnx 1.23's reference LRN loops over range(N) as channels: N == C keeps it right
    "lrn": ([N("LRN", ["x"], ["y"], size=3, alpha=1e-2, beta=0.75, bias=2.0)],
            {"x": r(5, 5, 3, 3)}, ["y"], {}, 13),
    # (onnx 1.23's reference BatchNormalization before opset 14 does not give the inference
    # formula; opset 15's does, and the mapping is the same)
    "batchnorm": ([N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
                  {"x": r(2, 3, 4, 4)}, ["y"],
                  {"s": r(3), "b": r(3), "m": r(3), "v": np.abs(r(3)) + 0.5}, 15),
    "batchnorm-rank2": ([N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
                        {"x": r(4, 3)}, ["y"],
                        {"s": r(3), "b": r(3), "m": r(3), "v": np.abs(r(3)) + 0.5}, 15),
    "gemm-alpha-beta-transA": (
        [N("Gemm", ["a", "w", "c"], ["y"], transA=1, alpha=0.5, beta=2.0)],
        {"a": r(4, 3)}, ["y"], {"w": r(4, 5), "c": r(5)}, 13),
    "gemm-transB": ([N("Gemm", ["a", "w", "c"], ["y"], transB=1)],
                    {"a": r(3, 4)}, ["y"], {"w": r(5, 4), "c": r(5)}, 9),
    "matmul": ([N("MatMul", ["a", "b"], ["y"])], {"a": r(2, 3, 4), "b": r(4, 5)}, ["y"], {},
               13),
    "elementwise": (
        [N("Add", ["a", "b"], ["s"]), N("Mul", ["s", "a"], ["p"]), N("Sub", ["p", "b"], ["d"]),
         N("Div", ["d", "c"], ["q"]), N("Sum", ["q", "a", "s"], ["y"]), N("Relu", ["y"], ["r"]),
         N("Sigmoid", ["r"], ["z"]), N("Tanh", ["z"], ["t"]), N("Neg", ["t"], ["n"]),
         N("Max", ["n", "a"], ["mx"]), N("Min", ["mx", "b"], ["mn"]),
         N("LeakyRelu", ["mn"], ["lk"], alpha=0.1), N("Exp", ["lk"], ["e"]),
         N("Abs", ["e"], ["ab"]), N("Sqrt", ["ab"], ["sq"]), N("Log", ["sq"], ["lg"])],
        {"a": r(2, 3), "b": r(3)}, ["lg"], {"c": np.full((1, 3), 2.0, np.float32)}, 13),
    "unary": ([N(op, ["x"], [op]) for op in ("Softplus", "Softsign", "Reciprocal", "Erf",
                                              "Floor", "Ceil")],
              {"x": r(2, 3)}, ["Softplus", "Softsign", "Reciprocal", "Erf", "Floor", "Ceil"],
              {}, 13),
    "softmax-opset13": ([N("Softmax", ["x"], ["y"], axis=1)], {"x": r(2, 3, 4)}, ["y"], {}, 13),
    "dropout-identity-flatten": (
        [N("Dropout", ["x"], ["d", "mask"], ratio=0.3), N("Identity", ["d"], ["i"]),
         N("Flatten", ["i"], ["y"], axis=2)], {"x": r(2, 3, 4, 2)}, ["y"], {}, 9),
    "shapes-opset9": (
        [N("Unsqueeze", ["x"], ["u"], axes=[0, 3]), N("Transpose", ["u"], ["t"]),
         N("Squeeze", ["t"], ["s"], axes=[0]), N("Reshape", ["s", "shape"], ["r"]),
         N("Concat", ["r", "r"], ["y"], axis=1)],
        {"x": r(2, 3)}, ["y"], {"shape": np.array([0, -1], np.int64)}, 9),
    "shapes-opset13": (
        [N("Unsqueeze", ["x", "ax"], ["u"]), N("Squeeze", ["u", "ax"], ["y"])],
        {"x": r(2, 3)}, ["y"], {"ax": np.array([1], np.int64)}, 13),
    # Resize (issue 26): the modes torch.onnx.export emits and the others Paddle's kernels share
    "resize-nearest-scales": (
        [N("Resize", ["x", "", "s"], ["y"], mode="nearest", nearest_mode="floor",
           coordinate_transformation_mode="asymmetric")],
        {"x": r(2, 3, 5, 4)}, ["y"], {"s": np.array([1, 1, 2, 3], np.float32)}, 19),
    "resize-nearest-sizes-1d": (
        [N("Resize", ["x", "", "", "sz"], ["y"], mode="nearest", nearest_mode="floor",
           coordinate_transformation_mode="asymmetric")],
        {"x": r(2, 3, 7)}, ["y"], {"sz": np.array([2, 3, 12], np.int64)}, 13),
    "resize-nearest-align-corners": (
        [N("Resize", ["x", "", "", "sz"], ["y"], mode="nearest", nearest_mode="round_prefer_ceil",
           coordinate_transformation_mode="align_corners")],
        {"x": r(1, 2, 4, 5)}, ["y"], {"sz": np.array([1, 2, 9, 7], np.int64)}, 13),
    "resize-linear-half-pixel": (
        [N("Resize", ["x", "", "s"], ["y"], mode="linear",
           coordinate_transformation_mode="half_pixel")],
        {"x": r(2, 3, 5, 4)}, ["y"], {"s": np.array([1, 1, 2, 2], np.float32)}, 19),
    "resize-linear-pytorch-half-pixel-down": (
        [N("Resize", ["x", "", "", "sz"], ["y"], mode="linear",
           coordinate_transformation_mode="pytorch_half_pixel")],
        {"x": r(1, 2, 9, 6)}, ["y"], {"sz": np.array([1, 2, 4, 1], np.int64)}, 13),
    "resize-linear-align-corners": (
        [N("Resize", ["x", "", "", "sz"], ["y"], mode="linear",
           coordinate_transformation_mode="align_corners")],
        {"x": r(1, 2, 4, 5)}, ["y"], {"sz": np.array([1, 2, 7, 11], np.int64)}, 13),
    "resize-linear-asymmetric": (
        [N("Resize", ["x", "", "s"], ["y"], mode="linear",
           coordinate_transformation_mode="asymmetric")],
        {"x": r(1, 2, 4, 6)}, ["y"], {"s": np.array([1, 1, 1.5, 0.5], np.float32)}, 13),
    "constants": (
        [N("ConstantOfShape", ["shape"], ["c"],
           value=numpy_helper.from_array(np.array([0.5], np.float32))),
         N("Constant", [], ["k"], value=numpy_helper.from_array(r(2, 3))),
         N("Add", ["x", "c"], ["s"]), N("Mul", ["s", "k"], ["y"])],
        {"x": r(2, 3)}, ["y"], {"shape": np.array([2, 3], np.int64)}, 13),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mapped_ops_equal_onnx_reference(case: str) -> None:
    nodes, feeds, outs, inits, opset = CASES[case]
    check(model(nodes, {k: v.shape for k, v in feeds.items()}, outs, inits, opset), feeds)


def test_conv_transpose_groups_equal_torch() -> None:
    """ConvTranspose with group = 2, strides, asymmetric pads and output_padding: torch's
    conv_transpose2d (no pads, cropped: torch pads both sides alike)."""
    torch = pytest.importorskip("torch", reason="needs the torch extra")
    x, w, b = r(2, 4, 5, 3), r(4, 3, 3, 2), r(6)
    m = model([N("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 3], group=2,
                  pads=[1, 0, 0, 1], output_padding=[1, 2])], {"x": x.shape}, ["y"],
               {"w": w, "b": b})
    im = onnx_import.import_model(m)
    got = run_serial(im.graph, {**im.values, "x": x})[im.outputs[0]]
    want = torch.nn.functional.conv_transpose2d(
        torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=(2, 3),
        output_padding=(1, 2), groups=2).numpy()[:, :, 1:, :-1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_transpose_keeps_the_spatial_split_and_refuses_what_it_cannot_map() -> None:
    """With the spatial opt-in, a ConvTranspose's H/W split passes to its output (a halo where
    the windows overlap; none at kernel = stride). A 3-D one, and an output_shape longer than
    the transpose gives, are refused naming the node."""
    m = model([N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], name="up")],
               {"x": (2, 4, 8, 8)}, ["y"], {"w": r(4, 3, 2, 2)})
    im = onnx_import.import_model(m, spatial_sharding=True)
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])
    sr.shard(im.graph.tensor("x"), mesh, [-1, -1, "h", "w"])
    c = complete(im.graph)
    assert c.attr("y").dims_mapping == (-1, -1, 0, 1)
    assert not c.reshards
    m = model([N("ConvTranspose", ["x", "w"], ["y"], name="up3")], {"x": (1, 2, 3, 3, 3)},
               ["y"], {"w": r(2, 2, 2, 2, 2)})
    with pytest.raises(errors.UnmappedOpError, match=r"node 'up3': op ConvTranspose .* rank 5"):
        onnx_import.load(m)
    m = model([N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_shape=[12, 12],
                  name="long")], {"x": (1, 2, 5, 5)}, ["y"], {"w": r(2, 2, 2, 2)})
    with pytest.raises(errors.UnmappedOpError, match=r"node 'long'.*output_padding"):
        onnx_import.load(m)


def test_softmax_before_opset_13_flattens_at_axis() -> None:
    """Opset < 13 Softmax normalises the input coerced to 2-D at ``axis`` (default 1): over
    C*H*W of an NCHW tensor, as SqueezeNet's shipped output (0.001 everywhere) shows. onnx 1.23's
    reference evaluator normalises the last axis only, so numpy is the reference here."""
    x = r(2, 3, 2, 1)
    m = model([N("Softmax", ["x"], ["y"]), N("LogSoftmax", ["x"], ["z"])], {"x": x.shape},
               ["y", "z"], opset=9)
    im = onnx_import.import_model(m)
    got = run_serial(im.graph, {"x": x})
    flat = x.reshape(2, 6).astype(np.float64)
    want = np.exp(flat) / np.exp(flat).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got["y"], want.reshape(x.shape), rtol=1e-6)
    np.testing.assert_allclose(got["z"], np.log(want).reshape(x.shape), rtol=1e-6)


@pytest.mark.parametrize(("value", "dtype"), [
    (2**53 + 1, np.int64), (-(2**62) - 1, np.int64), (2**63 - 1, np.int64),
    (2**31 - 1, np.int32), (255, np.uint8), (True, np.bool_), (0.1, np.float64)])
def test_integer_constants_stay_exact(value: Any, dtype: Any, tmp_path: Path) -> None:
    """ConstantOfShape's value and Neg's -1 went through a float64: 2**53 + 1 came out 2**53.
    Each result equals ONNX's reference exactly (``==``), in its dtype, also once the graph has
    been through a model file."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [N("ConstantOfShape", ["s"], ["c"],
               value=numpy_helper.from_array(np.array([value], dtype)))]
    outs = ["c"]
    if np.dtype(dtype).kind == "i":
        nodes.append(N("Neg", ["c"], ["n"]))
        outs.append("n")
    g = helper.make_graph(nodes, "t", [], [helper.make_tensor_value_info(o, elem, [2, 3])
                                           for o in outs],
                          [numpy_helper.from_array(np.array([2, 3], np.int64), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    want = ReferenceEvaluator(m).run(None, {})
    im = onnx_import.import_model(m)
    assert main(["import", _saved(m, tmp_path), "-o", str(tmp_path / "m.json")]) == 0
    for graph in (im.graph, load_json(tmp_path / "m.json")):
        got = run_serial(graph, {})
        for name, w in zip(outs, want, strict=True):
            assert got[name].dtype == w.dtype and np.array_equal(got[name], w), (name, got[name])


def _saved(m: Any, folder: Path) -> str:
    path = folder / "m.onnx"
    onnx.save(m, str(path))
    return str(path)


def test_the_tested_cases_cover_every_mapped_op() -> None:
    used = {n.op_type for nodes, *_ in (*CASES.values(), *EXPORT_CASES.values()) for n in nodes}
    assert set(OPS) <= used | {"Softmax", "LogSoftmax"}


def test_names_initializers_and_constants() -> None:
    m = model([N("Gemm", ["x", "fc/w", "fc/b"], ["out"], transB=1)], {"x": (2, 4)}, ["out"],
               {"fc/w": r(3, 4), "fc/b": r(3)})
    im = onnx_import.import_model(m)
    g = im.graph
    assert {t.name for t in g.params} == {"fc/w", "fc/b"}
    assert im.inputs == ["x"] and im.outputs == ["out"]
    assert g.tensor("out").producer is not None
    np.testing.assert_array_equal(im.values["fc/w"], numpy_helper.to_array(m.graph.initializer[0]))


def test_input_shapes_widen_and_are_checked() -> None:
    m = model([N("Relu", ["x"], ["y"])], {"x": (1, 3)}, ["y"])
    assert onnx_import.load(m, input_shapes={"x": [4, 3]}).tensor("y").shape == (4, 3)
    with pytest.raises(errors.ImporterError, match="rank 3"):
        onnx_import.load(m, input_shapes={"x": [4, 3, 1]})
    with pytest.raises(errors.ImporterError, match="not inputs of the model; its inputs are"):
        onnx_import.load(m, input_shapes={"data": [4, 3]})


def test_a_batch_fixed_by_a_reshape_is_refused_or_followed() -> None:
    m = model([N("Reshape", ["x", "shape"], ["y"])], {"x": (1, 2, 3)}, ["y"],
               {"shape": np.array([1, 6], np.int64)}, 9)
    with pytest.raises(errors.ImporterError, match=r"'y' \(Reshape\).*follow_batch=True"):
        onnx_import.load(m, input_shapes={"x": [4, 2, 3]})
    assert onnx_import.load(m, input_shapes={"x": [4, 2, 3]},
                            follow_batch=True).tensor("y").shape == (4, 6)


def test_dynamic_shapes_are_refused() -> None:
    m = model([N("Relu", ["x"], ["y"])], {"x": ("batch", 3)}, ["y"])
    with pytest.raises(errors.DynamicShapeError, match=r"'x'.*input_shapes"):
        onnx_import.load(m)
    assert onnx_import.load(m, input_shapes={"x": [2, 3]}).tensor("y").shape == (2, 3)
    runtime_shape = helper.make_model(helper.make_graph(
        [N("Reshape", ["x", "s"], ["y"])], "t",
        [helper.make_tensor_value_info("x", F, [2, 3]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", F, ["a", "b"])]),
        opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(errors.DynamicShapeError, match="computed at run time"):
        onnx_import.load(runtime_shape)


def test_control_flow_is_refused() -> None:
    branch = helper.make_graph([N("Relu", ["x"], ["z"])], "b", [],
                               [helper.make_tensor_value_info("z", F, None)])
    g = helper.make_graph(
        [N("If", ["c"], ["y"], then_branch=branch, else_branch=branch, name="gate")], "t",
        [helper.make_tensor_value_info("x", F, [2]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", F, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(errors.ControlFlowError, match="'gate': If is control flow"):
        onnx_import.load(m)


def test_unmapped_ops_and_attributes_name_the_node() -> None:
    m = model([N("Resize", ["x", "", "s"], ["y"], name="up")], {"x": (1, 1, 2, 2)}, ["y"],
               {"s": np.array([1, 1, 2, 2], np.float32)})
    with pytest.raises(errors.UnmappedOpError, match=r"node 'up': op Resize cannot be mapped"):
        onnx_import.load(m)
    m = model([N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                  training_mode=1)], {"x": (2, 3, 2, 2)}, ["y"],
               {k: np.ones(3, np.float32) for k in "sbmv"}, 15)
    with pytest.raises(errors.UnmappedOpError, match="training mode"):
        onnx_import.load(m)
    m = model([N("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])], {"x": (1, 1, 4, 4)}, ["y"])
    with pytest.raises(errors.UnmappedOpError, match="Indices"):
        onnx_import.load(m)


def test_inference_batch_norm_keeps_the_spatial_split() -> None:
    """Inference BatchNormalization is a per-channel affine map of the [C] parameters (which keep
    their names), so a Conv's H/W split passes through it, as through the Relu after it."""
    inits = {"w": r(4, 3, 3, 3), "s": r(4), "b": r(4), "m": r(4), "v": np.abs(r(4)) + 0.5}
    m = model([N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                N("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"]),
                N("Relu", ["y"], ["r"])], {"x": (1, 3, 8, 8)}, ["r"], inits, 15)
    im = onnx_import.import_model(m, spatial_sharding=True)
    g = im.graph
    assert {t.name for t in g.params} == set(inits)
    assert "batch_norm" not in {op.type for op in g.ops}
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])
    sr.shard(g.tensor("x"), mesh, [-1, -1, "h", "w"])
    c = complete(g)
    assert [c.attr(t).dims_mapping for t in ("c", "y", "r")] == [(-1, -1, 0, 1)] * 3
    assert not c.reshards
    check(m, {"x": r(1, 3, 8, 8)})


def test_errors_are_spmd_errors_and_a_missing_extra_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert issubclass(errors.UnmappedOpError, sr.SpmdError)
    with pytest.raises(errors.ImporterError, match="no such ONNX file"):
        onnx_import.load("/nonexistent/model.onnx")
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(errors.MissingExtraError, match=r"pip install -e '\.\[onnx\]'"):
        onnx_import.load("model.onnx")


def test_cli_imports_an_onnx_file(tmp_path: Path) -> None:
    src = LIGHT / "light_squeezenet.onnx"
    out = tmp_path / "squeezenet.json"
    assert main(["import", str(src), "-o", str(out)]) == 0
    assert load_json(out) == onnx_import.load(src)


def test_docs_list_the_mapped_ops() -> None:
    text = (REPO / "docs" / "importers.md").read_text()
    section = text.split("The ONNX ops mapped")[1].split("\n\n")[1]
    assert sorted(re.findall(r"`([A-Za-z]+)`", section)) == sorted(OPS)
