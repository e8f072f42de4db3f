"""The ONNX ops torch.onnx.export emits for Hugging Face models (tests/support/onnx_cases.py's
EXPORT_CASES), each equal to onnx.reference with its attribute variants and opsets; the
exporter's shape arithmetic computed at import; the refusals; the Hugging Face models through
torch.onnx.export, imported, run data parallel on a simulated 2x2 mesh and on 4 MPI ranks equal
to torch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx extra (make test installs it)")
from onnx_cases import EXPORT_CASES, N, check, i64, model, r  # noqa: E402

from spmdrules.execution.executor import run_serial  # noqa: E402
from spmdrules.importers import errors  # noqa: E402
from spmdrules.importers import onnx as onnx_import  # noqa: E402


@pytest.mark.parametrize("case", sorted(EXPORT_CASES))
def test_export_ops_equal_onnx_reference(case: str) -> None:
    nodes, feeds, outs, inits, opset = EXPORT_CASES[case]
    check(model(nodes, feeds, outs, inits, opset), feeds)


def test_shape_arithmetic_is_computed_at_import() -> None:
    """Shape, Gather, Unsqueeze, Concat, Range, ConstantOfShape, Equal, Where, Expand, Cast over
    the static shapes leave no op: the Reshape reads a constant target, the positions are one
    constant source; a uniform constant is a ``full``; a parameter read by such a node stays a
    parameter, and the node is mapped."""
    nodes, feeds, outs, inits, opset = EXPORT_CASES["shape-arithmetic-folded"]
    g = onnx_import.load(model(nodes, feeds, outs, inits, opset))
    assert [op.type for op in g.ops] == ["reshape", "add"]
    assert {t.name for t in g.params} == {"bias", "posf"}
    m = model([N("Mul", ["w", "k"], ["y"]), N("Add", ["x", "y"], ["z"])], {"x": (3,)}, ["z"],
              {"w": r(3), "k": np.array(2.0, np.float32)})
    g = onnx_import.load(m)
    assert [op.type for op in g.ops] == ["multiply", "add"]
    assert {t.name for t in g.params} == {"w", "k"}


def test_an_empty_slice_is_dropped_by_concat_and_refused_elsewhere() -> None:
    """Phi-3's rotary embedding over the whole head cuts an empty pass-through part and
    concatenates it back: the Concat drops it. Any other reader is refused, naming it."""
    cut = [N("Slice", ["x", "s", "e", "a"], ["nothing"]), N("Concat", ["x", "nothing"], ["y"],
                                                            axis=1)]
    inits = {"s": i64(4), "e": i64(100), "a": i64(1)}
    check(model(cut, {"x": r(2, 4)}, ["y"], inits), {"x": r(2, 4)})
    m = model([cut[0], N("Relu", ["nothing"], ["y"])], {"x": (2, 4)}, ["y"], inits)
    with pytest.raises(errors.InvalidDimError, match=r"'nothing' has shape \[2, 0\]: an empty"):
        onnx_import.load(m)


@pytest.mark.parametrize(("nodes", "inits", "out", "match"), [
    ([N("Pad", ["x", "p"], ["y"], mode="reflect", name="pad")], {"p": i64(0, 4, 0, 1)},
     [3, 9], r"node 'pad': op Pad .*mode 'reflect' pads axis 1 of length 4 by 4 and 1; it "
     "repeats at most 3"),
    ([N("Gather", ["x", "i"], ["y"], name="g")], {"i": i64(3)}, [1, 4],
     r"node 'g'.*holds 3, outside -3..2"),
    ([N("LayerNormalization", ["x", "g"], ["y", "mean"], name="ln")], {"g": r(4)}, [3, 4],
     r"node 'ln'.*Mean and InvStdDev"),
    ([N("Gelu", ["x"], ["y"], approximate="erf", name="ge")], {}, [3, 4],
     r"node 'ge'.*approximate 'erf' is not an ONNX value"),
])
def test_what_cannot_be_mapped_is_refused_naming_the_node(
        nodes: list[Any], inits: dict[str, Any], out: list[int], match: str) -> None:
    g = onnx.helper.make_graph(
        nodes, "t", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4])],
        [onnx.helper.make_tensor_value_info(nodes[0].output[0], onnx.TensorProto.FLOAT, out)],
        [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 20)])
    with pytest.raises(errors.UnmappedOpError, match=match):
        onnx_import.load(m)


def test_gather_elements_of_a_shorter_index_equals_numpy() -> None:
    """BERT's token types: GatherElements on axis 1 of a [2, 6] table by a [1, 4] index reads
    ``x[i, index[i, j]]`` for the index's rows only; on axis -1 too. onnx 1.23's reference
    evaluator fails on both, so numpy is the reference here."""
    x, k = r(2, 6), np.array([[5, -1, 0, -6]], np.int64)
    m = model([N("GatherElements", ["x", "k"], ["y"], axis=-1)], {"x": x.shape}, ["y"], {"k": k})
    im = onnx_import.import_model(m)
    got = run_serial(im.graph, {**im.values, "x": x})["y"]
    np.testing.assert_array_equal(got, np.take_along_axis(x[:1], np.where(k < 0, k + 6, k), 1))


def test_negative_pads_crop() -> None:
    """A negative pad removes that many elements (ONNX's Pad; onnx 1.23's reference refuses
    it, so numpy is the reference here): a pad, then a slice."""
    x = r(2, 3, 4)
    m = model([N("Pad", ["x", "p", "v"], ["y"])], {"x": x.shape}, ["y"],
              {"p": i64(0, 1, -1, 1, -1, 2), "v": np.array(0.5, np.float32)}, 18)
    im = onnx_import.import_model(m)
    assert [op.type for op in im.graph.ops] == ["pad", "slice"]
    got = run_serial(im.graph, {**im.values, "x": x})["y"]
    want = np.pad(x, [(0, 1), (1, 0), (0, 2)], constant_values=0.5)[:, :-1, 1:]
    np.testing.assert_array_equal(got, want)


def test_a_slice_bound_computed_at_run_time_is_a_dynamic_shape() -> None:
    m = model([N("Slice", ["x", "s", "e"], ["y"], name="sl")],
              {"x": (3, 4), "s": np.zeros(1, np.int64)}, ["y"], {"e": i64(2)})
    with pytest.raises(errors.DynamicShapeError, match=r"'sl' \(Slice\): input 's' is computed"):
        onnx_import.load(m)


# ---- Hugging Face models through torch.onnx.export ----------------------------------------------
def _data_parallel(kind: str) -> tuple[Any, Any, dict[str, np.ndarray], Any]:
    """The model ``kind`` exported by torch.onnx.export (TorchScript), imported, its inputs'
    batch on dp of the 2x2 mesh, completed and lowered: (module, imported, feeds, program)."""
    import hf_onnx
    from hf_models import MESH

    from spmdrules import plan
    from spmdrules.completion import complete
    from spmdrules.execution.lowering import lower

    module = hf_onnx.model(kind)
    im = onnx_import.import_model(hf_onnx.export(kind, module))
    plan.apply(im.graph, MESH, {name: plan.DataParallel(dim="dp") for name in im.inputs})
    done = complete(im.graph)
    assert done.attr(im.outputs[0]).dims_mapping[0] == 0  # the batch stays on dp
    return module, im, {**im.values, **hf_onnx.inputs(kind)}, lower(done)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["llama", "gpt2", "phi3", "mixtral", "bert", "roberta", "vit",
                                  "t5", "bart"])
def test_hf_model_exported_to_onnx_runs_data_parallel_equal_to_torch(kind: str) -> None:
    """Each model as torch.onnx.export writes it (its mask arithmetic, Gather lookups, rotary
    Slices, LayerNormalization, Gelu, TopK routing, relative-position buckets) imports, and its
    data-parallel run on the simulated 2x2 mesh equals torch (and onnx.reference, where the
    evaluator runs the model: its GatherElements fails on BERT's and RoBERTa's token types)."""
    pytest.importorskip("torch", reason="needs the torch extra")
    pytest.importorskip("transformers", reason="needs transformers (a test dependency)")
    import hf_onnx

    from spmdrules.execution.simulated import run_simulated

    module, im, feeds, prog = _data_parallel(kind)
    got = run_simulated(prog, feeds).fetch(im.outputs[0])
    np.testing.assert_allclose(got, hf_onnx.torch_output(kind, module), rtol=1e-4, atol=1e-5)
    if kind not in ("bert", "roberta"):
        from onnx.reference import ReferenceEvaluator

        want = ReferenceEvaluator(hf_onnx.export(kind, module)).run(None, hf_onnx.inputs(kind))
        np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-5)


@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["llama", "bert"])
def test_hf_model_exported_to_onnx_on_4_mpi_ranks_equals_torch_forward_and_reverse(
        kind: str) -> None:
    """LLaMA and BERT through ONNX, data parallel on 4 MPI ranks: the output equals torch's, every
    tensor equals serial numpy, the gradients equal the simulated mesh's and pass a numerical
    check, and the bytes sent equal the plans'."""
    pytest.importorskip("torch", reason="needs the torch extra")
    pytest.importorskip("transformers", reason="needs transformers (a test dependency)")
    import hf_onnx
    from sharded_runs import assert_mpi_equals_serial_forward_and_reverse

    from spmdrules.execution.adjoint import gradient_program

    module, im, feeds, prog = _data_parallel(kind)
    out = im.outputs[0]
    gp = gradient_program(prog, [out])
    seed = np.random.default_rng(0).standard_normal(im.graph.tensor(out).shape)
    assert_mpi_equals_serial_forward_and_reverse(
        im.graph, prog, gp, {**feeds, gp.seeds[out]: seed}, {out: seed}, timeout=500)
    from spmdrules.execution.executor import run_serial as serial

    np.testing.assert_allclose(serial(im.graph, feeds)[out], hf_onnx.torch_output(kind, module),
                               rtol=1e-4, atol=1e-5)


def test_only_a_floating_table_is_an_embedding() -> None:
    """A float [V, H] table on axis 0 is an embedding (vocabulary parallel); a bool one (LLaMA's
    export gathers its batch-split attention mask) is an index_select, a masked lookup whose
    pending sum of bools the executors combine as numpy adds bools (tests/completion/test_masks.py
    runs one on 4 MPI ranks)."""
    import hf_models

    from spmdrules import plan
    from spmdrules.completion import complete

    mask, i = np.ones((4, 1), bool), np.array([[0, 3], [1, 2]], np.int64)
    m = model([N("Gather", ["w", "i"], ["e"]), N("Gather", ["mask", "i"], ["g"])],
              {"mask": mask, "i": i}, ["e", "g"], {"w": r(4, 3)})
    g = onnx_import.load(m)
    assert [g.tensor(t).producer.type for t in ("e", "g")] == ["embedding", "reshape"]
    assert g.tensor("g.select").producer.type == "index_select"
    plan.apply(g, hf_models.MESH, {"mask": plan.DataParallel(dim="dp")})
    assert complete(g).attr("g.select").masks == {0: 0}
