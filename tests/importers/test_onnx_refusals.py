"""spmdrules.importers.onnx on hostile and malformed models: external data never read from outside
one folder; onnx.checker's full check at load; malformed initializers, dims, dtypes, opsets,
cycles: each a typed error of its own (an SpmdError naming the node or tensor), through the API
and as one line from ``spmdrules import``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx extra (make test installs it)")
from onnx import TensorProto, external_data_helper, helper, numpy_helper  # noqa: E402

import spmdrules as sr  # noqa: E402
from spmdrules.cli import main  # noqa: E402
from spmdrules.graph.errors import GraphCycleError  # noqa: E402
from spmdrules.importers import errors  # noqa: E402
from spmdrules.importers import onnx as onnx_import  # noqa: E402

F = TensorProto.FLOAT
N = helper.make_node
W = np.arange(6, dtype=np.float32).reshape(2, 3)
SECRET = np.full(6, 7.0, np.float32)


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any] = (),
           opset: int = 13) -> Any:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, shape: list[Any] | None, elem: int = F) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def _add_w(w: Any) -> Any:
    """x + w, w an initializer of dims [2, 3]."""
    return _model([N("Add", ["x", "w"], ["y"])], [_vi("x", [2, 3])], [_vi("y", [2, 3])], [w])


def _external(location: str) -> Any:
    """x + w, w's 24 bytes in the file ``location``."""
    w = numpy_helper.from_array(W, "w")
    external_data_helper.set_external_data(w, location, offset=0, length=24)
    w.ClearField("raw_data")
    return _add_w(w)


def _refused(source: Any, cls: type[Exception], match: str, **kw: Any) -> None:
    with pytest.raises(cls, match=match) as e:
        onnx_import.import_model(source, **kw)
    assert isinstance(e.value, sr.SpmdError)


def _cli_says(path: Path, match: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``spmdrules import`` prints one line naming the problem and exits 1, writing nothing."""
    out = path.with_suffix(".json")
    assert main(["import", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("spmdrules: error: "), err
    assert match in err, err
    assert "Traceback" not in err and not out.exists()


# ---- item 2: external data ----------------------------------------------------------------------
def test_in_memory_external_data_needs_its_folder(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-memory model's external data was read from the working directory: a file there
    became a parameter. Now it needs external_data_dir, and the caller's model is unchanged."""
    SECRET.tofile(tmp_path / "w.bin")
    monkeypatch.chdir(tmp_path)
    m = _external("w.bin")
    _refused(m, errors.ExternalDataError, r"tensor 'w' keeps its data in the file 'w.bin', outside "
             r"the in-memory model: pass external_data_dir=")
    data = tmp_path / "model"
    data.mkdir()
    W.tofile(data / "w.bin")
    im = onnx_import.import_model(m, external_data_dir=data)
    np.testing.assert_array_equal(im.values["w"], W)
    assert external_data_helper.uses_external_data(m.graph.initializer[0])
    _refused(m, errors.ImporterError, "is not a folder", external_data_dir=tmp_path / "nowhere")
    # a Constant's tensor is data too
    k = numpy_helper.from_array(W, "k")
    external_data_helper.set_external_data(k, "w.bin", offset=0, length=24)
    k.ClearField("raw_data")
    const = _model([N("Constant", [], ["k"], value=k), N("Add", ["x", "k"], ["y"])],
                   [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    _refused(const, errors.ExternalDataError, "tensor 'k' keeps its data in the file 'w.bin'")
    got = onnx_import.import_model(const, external_data_dir=data)
    np.testing.assert_array_equal(got.values["k"], W)


@pytest.mark.parametrize(("location", "length", "says"), [
    ("missing.bin", 24, "not regular file"), ("w.bin", 48, "exceeds available data")])
def test_missing_or_short_external_data_is_refused(location: str, length: int, says: str,
                                                   tmp_path: Path) -> None:
    W.tofile(tmp_path / "w.bin")
    m = _external(location)
    m.graph.initializer[0].external_data[2].value = str(length)
    _refused(m, errors.ExternalDataError, f"tensor 'w': its external data '{location}' is not "
             f"read.*{says}", external_data_dir=tmp_path)


def test_a_model_over_2_gib_is_checked_from_its_file(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Protobuf cannot serialise 2 GiB: such a model is checked from its file (the limit is
    lowered here so that a small model stands for it); in memory it is refused."""
    monkeypatch.setattr(onnx.checker, "MAXIMUM_PROTOBUF", 64)
    m = _add_w(numpy_helper.from_array(W, "w"))
    assert m.ByteSize() > 64
    _refused(m, errors.InvalidModelError, "the model is over 2 GiB in memory: save it with its "
             "weights as external data")
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    checked: list[Any] = []
    real = onnx.checker.check_model

    def spy(model: Any, **kw: Any) -> None:
        checked.append(model)
        real(model, **kw)

    monkeypatch.setattr(onnx.checker, "check_model", spy)
    np.testing.assert_array_equal(onnx_import.import_model(path).values["w"], W)
    assert checked == [str(path)]


def test_a_sparse_initializer_is_refused() -> None:
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.ones(1, np.float32), "w"),
                                       numpy_helper.from_array(np.zeros(1, np.int64), "i"), [6])
    m = _model([N("Add", ["x", "w"], ["y"])], [_vi("x", [6])], [_vi("y", [6])])
    m.graph.sparse_initializer.append(sparse)
    _refused(m, errors.ImporterError, "initializer 'w' is sparse")


def _escape(kind: str, folder: Path, outside: Path) -> str:
    """A location for the model in ``folder`` that reaches the file ``outside`` by ``kind``."""
    if kind == "dotdot":
        return os.path.relpath(outside, folder)
    if kind == "absolute":
        return str(outside)
    if kind == "symlink":
        (folder / "w.bin").symlink_to(outside)
        return "w.bin"
    if kind == "symlinked-dir":
        (folder / "up").symlink_to(outside.parent, target_is_directory=True)
        return f"up/{outside.name}"
    if kind == "hardlink":
        os.link(outside, folder / "w.bin")
        return "w.bin"
    raise AssertionError(kind)


ESCAPES = ["dotdot", "absolute", "symlink", "symlinked-dir", "hardlink"]


@pytest.mark.parametrize("how", ["file", "proto", "cli"])
@pytest.mark.parametrize("kind", ESCAPES)
def test_external_data_never_leaves_the_model_folder(
        kind: str, how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A location out of the folder, by '..', an absolute path, a symbolic link (to the file or
    to a folder on the way) or a hard link, is an ExternalDataError naming the tensor (a '..' was
    onnx's ValidationError): the file outside is never read."""
    outside = tmp_path / "secret.bin"
    SECRET.tofile(outside)
    folder = tmp_path / "models"
    folder.mkdir()
    m = _external(_escape(kind, folder, outside))
    want = "tensor 'w': its external data"
    if how == "proto":
        _refused(m, errors.ExternalDataError, want, external_data_dir=folder)
        return
    path = folder / "m.onnx"
    onnx.save(m, str(path))
    if how == "file":
        _refused(path, errors.ExternalDataError, want)
    else:
        _cli_says(path, want, capsys)


def test_external_data_inside_the_folder_is_read(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    W.tofile(tmp_path / "weights" / "w.bin")
    path = tmp_path / "m.onnx"
    onnx.save(_external("weights/w.bin"), str(path))
    np.testing.assert_array_equal(onnx_import.import_model(path).values["w"], W)
    _refused(path, errors.ImporterError, "external_data_dir is for an in-memory ModelProto",
             external_data_dir=tmp_path)


# ---- item 21: malformed initializers, huge dims -------------------------------------------------
def _tensor(dt: int, dims: list[int], **data: Any) -> Any:
    t = TensorProto(name="w", data_type=dt, dims=dims)
    for field, v in data.items():
        if field == "raw_data":
            t.raw_data = v
        else:
            getattr(t, field).extend(v)
    return t


T = TensorProto
MALFORMED: dict[str, Callable[[], Any]] = {
    "raw-short": lambda: _tensor(T.FLOAT, [2, 3], raw_data=b"\0" * 20),
    "raw-long": lambda: _tensor(T.FLOAT, [2, 3], raw_data=b"\0" * 28),
    "raw-not-whole-elements": lambda: _tensor(T.FLOAT, [2, 3], raw_data=b"\0" * 23),
    "float_data-short": lambda: _tensor(T.FLOAT, [2, 3], float_data=[1.0] * 5),
    "float_data-long": lambda: _tensor(T.FLOAT, [2, 3], float_data=[1.0] * 7),
    "int64_data-short": lambda: _tensor(T.INT64, [2, 3], int64_data=[1] * 5),
    "int32_data-short": lambda: _tensor(T.INT32, [2, 3], int32_data=[1] * 5),
    "double_data-short": lambda: _tensor(T.DOUBLE, [2, 3], double_data=[1.0] * 5),
    "float16-short": lambda: _tensor(T.FLOAT16, [2, 3], int32_data=[1] * 5),
    "no-data": lambda: _tensor(T.FLOAT, [2, 3]),
    "raw-and-float_data": lambda: _tensor(T.FLOAT, [2, 3], raw_data=b"\0" * 24,
                                          float_data=[1.0] * 6),
    "undefined-type": lambda: _tensor(T.UNDEFINED, [2, 3], raw_data=b"\0" * 24),
    "undefined-type-no-data": lambda: _tensor(T.UNDEFINED, [2, 3]),
    "unknown-type-99": lambda: _tensor(99, [2, 3], raw_data=b"\0" * 24),
    "negative-dim": lambda: _tensor(T.FLOAT, [-1, 3], raw_data=b"\0" * 24),
    "dims-overflow": lambda: _tensor(T.FLOAT, [2**40, 2**40], raw_data=b"\0" * 24),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_initializer_is_refused_naming_it(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Data that disagrees with the dims, or an UNDEFINED type, gave a bare ValueError,
    TypeError or KeyError (a traceback from the CLI), or was accepted (a negative dim read as
    -1); now an InvalidModelError naming the initializer, one line from the CLI."""
    m = _add_w(MALFORMED[case]())
    names_it = r"(tensor|initializer) 'w'|tensor name: w"
    _refused(m, errors.InvalidModelError, names_it)
    path = tmp_path / "bad.onnx"
    onnx.save(m, str(path))
    _refused(path, errors.InvalidModelError, names_it)
    _cli_says(path, "'w'", capsys)


def test_the_command_prints_one_line_for_a_malformed_initializer(tmp_path: Path) -> None:
    """The installed entry point, in its own process: one line on stderr, exit 1."""
    path = tmp_path / "bad.onnx"
    onnx.save(_add_w(MALFORMED["raw-long"]()), str(path))
    r = subprocess.run([sys.executable, "-m", "spmdrules.cli", "import", str(path), "-o",
                        str(tmp_path / "out.json")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("spmdrules: error: initializer 'w': its data does not hold its "
                               "dims [2, 3] of FLOAT") and r.stderr.count("\n") == 1, r.stderr


def _relu(dims: list[Any]) -> Any:
    return _model([N("Relu", ["x"], ["y"])], [_vi("x", dims)], [_vi("y", dims)])


@pytest.mark.parametrize("dims", [[2**62, 2], [2, 2**63 - 1]])
def test_dims_of_2_62_and_more_are_refused_at_import(
        dims: list[int], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """They were accepted by the API, then crashed the CLI's writer with a pydantic traceback."""
    _refused(_relu(dims), errors.InvalidDimError, r"input 'x': shape: dim \d of .* is 2\*\*62 "
             "or more")
    path = tmp_path / "huge.onnx"
    onnx.save(_relu(dims), str(path))
    _cli_says(path, "is 2**62 or more", capsys)
    _refused(_relu([2, 3]), errors.InvalidDimError, "input_shapes: dim 0 .* is 2\\*\\*62",
             input_shapes={"x": [2**62, 3]})


def test_a_dim_computed_to_2_62_is_refused_naming_the_node() -> None:
    s = numpy_helper.from_array(np.array([2**62], np.int64), "s")
    m = _model([N("ConstantOfShape", ["s"], ["y"])], [], [_vi("y", [2**62])], [s])
    _refused(m, errors.InvalidDimError, r"node 'y' \(ConstantOfShape\): output 'y': dim 0")
    flat = _model([N("Flatten", ["x"], ["y"], axis=2)], [_vi("x", [2**31, 2**31, 1])],
                  [_vi("y", [2**62, 1])])
    _refused(flat, errors.InvalidDimError, r"node 'y' \(Flatten\): output 'y': dim 0")


# ---- item 22: what the checker refuses, and what the converters refuse themselves --------------
def test_an_empty_or_garbage_file_is_not_a_model(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """An empty .onnx file imported as a 0-op graph (exit 0)."""
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    _refused(empty, errors.InvalidModelError, "empty.onnx: the file is empty, not an ONNX model")
    _cli_says(empty, "the file is empty", capsys)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff" * 64)
    _refused(garbage, errors.InvalidModelError, "garbage.onnx: not an ONNX model")
    _refused(onnx.ModelProto(), errors.InvalidModelError, "ir_version")
    _refused(tmp_path, errors.ImporterError, "not a regular file")


def _reshape(target: np.ndarray, out: list[Any], opset: int = 14, **attrs: Any) -> Any:
    s = numpy_helper.from_array(target, "s")
    return _model([N("Reshape", ["x", "s"], ["y"], name="r", **attrs)], [_vi("x", [2, 6])],
                  [_vi("y", out)], [s], opset)


def test_a_float_shape_tensor_is_refused() -> None:
    """A float Reshape target was truncated (4.7 read as 4)."""
    _refused(_reshape(np.array([4.7, 3.0], np.float32), [4, 3]), errors.InvalidModelError,
             r"node 'r' \(Reshape\): onnx.checker refuses the model: .*Expected:int64 "
             "Actual:float")


def test_allowzero_with_0_and_minus_1_is_refused() -> None:
    _refused(_reshape(np.array([0, -1], np.int64), ["a", "b"], allowzero=1),
             errors.InvalidModelError, r"node 'r' \(Reshape\).*Product cannot be 0 in "
             "combination with -1")


@pytest.mark.parametrize(("target", "allowzero", "cls", "match"), [
    ([4.7, 3.0], 0, errors.InvalidModelError, r"input 's', the target shape, holds float32 "
     r"values \[4.7.*never truncated"),
    ([0, -1], 1, errors.InvalidModelError, r"allowzero=1 .* and ONNX forbids a -1 beside them"),
    ([0, 12], 1, errors.InvalidModelError, "allowzero=1 .*: an empty tensor"),
])
def test_the_reshape_converter_refuses_what_the_checker_would(
        target: list[float], allowzero: int, cls: type[Exception], match: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The converter does not lean on the checker: with the checker passing everything, a float
    target and allowzero=1 with a 0 are still refused (they gave [4, 3] and [2, 6])."""
    monkeypatch.setattr(onnx.checker, "check_model", lambda *a, **k: None)
    dtype = np.float32 if isinstance(target[0], float) else np.int64
    _refused(_reshape(np.array(target, dtype), ["a", "b"], allowzero=allowzero), cls, match)


@pytest.mark.parametrize("opset", [10**9, 0])
def test_an_opset_onnx_does_not_define_is_refused(opset: int) -> None:
    newest = onnx.defs.onnx_opset_version()
    _refused(_model([N("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])], opset=opset),
             errors.InvalidModelError, f"opset {opset} of the ONNX domain is not one onnx .* "
             rf"defines \(1..{newest}\)")


def test_checker_errors_name_the_value_or_the_node() -> None:
    """The checker's message names no value for a graph output without a shape, and no node for
    an unnamed one: the error names them (an unnamed node after its first output)."""
    _refused(_model([N("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", None)]),
             errors.InvalidModelError, r"^output 'y': onnx.checker refuses the model: Field "
             "'shape'")
    m = _model([N("Relu", ["x"], ["r"]), N("Reshape", ["r", "s"], ["y"])], [_vi("x", [2, 6])],
               [_vi("y", [4, 3])], [numpy_helper.from_array(np.array([4.7, 3.0], np.float32),
                                                            "s")])
    _refused(m, errors.InvalidModelError, r"^node 'y' \(Reshape\): onnx.checker")
    assert not m.graph.node[1].name  # the caller's model is not renamed


# ---- item 23: each misleading error type gets its own ------------------------------------------
def test_a_cycle_is_a_graph_cycle_error() -> None:
    """A cycle was an UnmappedOpError ("produced by no earlier node")."""
    m = _model([N("Add", ["x", "b"], ["a"], name="n1"), N("Relu", ["a"], ["b"], name="n2")],
               [_vi("x", [2])], [_vi("b", [2])])
    _refused(m, errors.GraphCycleError, r"nodes 'n2' \(Relu\) -> 'n1' \(Add\) -> 'n2' \(Relu\) "
             "form a cycle")
    with pytest.raises(GraphCycleError):  # the graph layer's class catches it too
        onnx_import.load(m)
    unsorted = _model([N("Relu", ["a"], ["y"], name="n2"), N("Relu", ["x"], ["a"], name="n1")],
                      [_vi("x", [2])], [_vi("y", [2])])
    with pytest.raises(errors.InvalidModelError, match="must be topologically sorted") as e:
        onnx_import.load(unsorted)
    assert not isinstance(e.value, errors.GraphCycleError)


@pytest.mark.parametrize(("dims", "why"), [([-2, 3], "is negative"),
                                           ([0, 3], "is 0: an empty tensor")])
def test_negative_and_zero_dims_are_invalid_dims(dims: list[int], why: str) -> None:
    """They were DynamicShapeErrors ("not static")."""
    _refused(_relu(dims), errors.InvalidDimError, f"input 'x': shape: dim 0 of .* {why}")
    assert onnx_import.load(_relu(dims), input_shapes={"x": [2, 3]}).tensor("y").shape == (2, 3)
    _refused(_relu([2, 3]), errors.InvalidDimError, f"input_shapes: dim 0 of .* {why}",
             input_shapes={"x": dims})


@pytest.mark.parametrize(("elem", "name"), [(TensorProto.COMPLEX64, "COMPLEX64"),
                                            (TensorProto.UINT64, "UINT64"),
                                            (TensorProto.STRING, "STRING")])
def test_an_unsupported_element_type_is_an_unsupported_dtype_error(elem: int, name: str) -> None:
    """complex64 was an UnmappedOpError of a node 'x' with an "op element type 14" (the torch
    half: test_torch_import.py::test_an_unsupported_dtype_names_the_node)."""
    m = _model([N("Identity", ["x"], ["y"])], [_vi("x", [2], elem)], [_vi("y", [2], elem)])
    _refused(m, errors.UnsupportedDtypeError, f"input 'x': ONNX type {name} \\({elem}\\) has no "
             "spmdrules dtype; the supported types are bfloat16, bool")
    w = numpy_helper.from_array(np.ones(2, np.complex64), "w")
    _refused(_model([N("Identity", ["w"], ["y"])], [], [_vi("y", [2], TensorProto.COMPLEX64)],
                    [w]), errors.UnsupportedDtypeError, "tensor 'w': type complex64")


def _resize(shape: list[int], scales: list[float] | None = None, sizes: list[int] | None = None,
            opset: int = 19, **attrs: Any) -> Any:
    inits = [numpy_helper.from_array(np.array(scales, np.float32), "s")] if scales else []
    inits += [numpy_helper.from_array(np.array(sizes, np.int64), "sz")] if sizes else []
    ins = ["x", "", "s" if scales else "", "sz" if sizes else ""][:4 if sizes else 3]
    if opset < 11:  # Resize-10 takes (X, scales)
        ins = ["x", "s"]
    return _model([N("Resize", ins, ["y"], **attrs)], [_vi("x", shape)],
                  [_vi("y", [None] * len(shape))], inits, opset)


NEAREST = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
           "nearest_mode": "floor"}


@pytest.mark.parametrize(("model", "match"), [
    (_resize([1, 2, 4, 4], [1, 1, 2, 2], mode="cubic"), "'cubic'"),
    (_resize([1, 2, 4, 4], [1, 1, 2, 2], **{**NEAREST, "nearest_mode": "round_prefer_floor"}),
     "nearest_mode"),
    (_resize([1, 2, 4, 4], [1, 1, 2, 2], mode="linear", antialias=1), "antialias"),
    (_resize([1, 2, 4, 4], [2, 2], axes=[2, 3], **NEAREST), "axes"),
    (_resize([1, 2, 4, 4], [1, 2, 2, 2], **NEAREST), "1 on the batch and channels"),
    (_resize([1, 2, 4, 4], [1, 1, float("nan"), 2], **NEAREST), "finite and > 0"),
    (_resize([1, 2, 4, 4], sizes=[1, 2, 1, 4], mode="linear"), "length 1"),
    (_resize([1, 2, 4, 4], [1, 1, 2, 2], mode="linear",
             coordinate_transformation_mode="tf_crop_and_resize"), "tf_crop_and_resize"),
    (_resize([1, 2, 4], [1, 1, 2], mode="linear"), "rank 3"),
    (_resize([1, 2, 4, 4], [1, 1, 2, 2], opset=10, mode="nearest"), "opset 10"),
], ids=["cubic", "rounding", "antialias", "axes", "channel-scale", "nan-scale", "half-pixel-one-row",
        "crop", "linear-rank-3", "opset-10"])
def test_resize_it_cannot_map_is_refused_with_its_attribute(model: Any, match: str) -> None:
    _refused(model, errors.UnmappedOpError, match)
