"""ColwiseParallel(chunks=...): a fused projection split within each of its chunks (issue 24,
cause 6). The weight and bias are stored interleaved, the cuts of the output into its chunks
are rewritten, completion moves no data there, and the planned graph computes what the user's
graph computes, forward and gradients, on the user's values."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sharded_runs import serial_cotangents

import spmdrules as sr
from spmdrules import plan
from spmdrules.cli import main
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import ExecutionError, run_serial
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph import ops
from spmdrules.graph.exchange import ExchangeError, dump, dumps, load, loads
from spmdrules.graph.graph import Graph
from spmdrules.graph.storage import Interleaved, StorageError

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
#: q | k | v of 12, 6 and 6 features (4 query heads and 2 key-value heads of 3)
SIZES = (12, 6, 6)


def fused(cut: str = "split", reader: Callable[[Any], Any] | None = None) -> Graph:
    """x @ qkv.weight^T + qkv.bias, viewed as 2-D and back (GPT-2's addmm), cut into q | k | v
    by one split or by three slices, then row-parallel projections of q and of k * v."""
    with Graph("fused") as g:
        x = g.input("x", [4, 6, 8])
        w = g.param("qkv.weight", [24, 8])  # torch's [out, in], read with trans_y
        b = g.param("qkv.bias", [24])
        flat = ops.reshape(x, [24, 8], name="qkv.view")
        y = ops.add(ops.matmul(flat, w, trans_y=True, name="qkv.mm"), b, name="qkv.add")
        y = ops.reshape(y, [4, 6, 24], name="qkv.unview")
        if reader is not None:
            reader(y)
        if cut == "split":
            q, k, v = ops.split(y, sections=list(SIZES), axis=2, name="cut")
        else:
            q, k, v = (ops.slice(y, axes=[2], starts=[s], ends=[s + n], name=f"cut{i}")
                       for i, (s, n) in enumerate(zip((0, 12, 18), SIZES, strict=True)))
        a = ops.matmul(q, g.param("o.weight", [12, 8]), name="o.mm")
        m = ops.matmul(ops.multiply(k, v), g.param("kv.weight", [6, 8]), name="kv.mm")
        ops.add(a, m, name="out")
    return g


PLAN: dict[str, Any] = {"x": plan.DataParallel(), "qkv": plan.ColwiseParallel(chunks=(2, 1, 1)),
                        "o": plan.RowwiseParallel(), "kv": plan.RowwiseParallel()}


def user_values(g: Graph) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {t.name: rng.standard_normal(t.shape) for t in g.tensors if t.is_source}


def forward_and_gradients(g: Graph, values: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``out`` and every source's gradient, run on the simulated 2x2 mesh, fed the user's
    values as they are: the executors take and give the user's order."""
    prog = lower(complete(g))
    fwd = run_simulated(prog, values)
    assert fwd.traffic.mismatches(prog) == []  # bytes moved equal the plans'
    gp = gradient_program(prog, ["out"])
    seed = np.random.default_rng(1).standard_normal(g.tensor("out").shape)
    rev = run_simulated(gp, {**values, gp.seeds["out"]: seed})
    assert rev.traffic.mismatches(gp) == []
    return fwd.fetch("out"), {t: rev.fetch(b) for t, b in gp.grads.items()}


@pytest.mark.parametrize("cut", ["split", "slices"])
def test_each_chunk_keeps_its_split_and_the_result_is_the_users(cut: str) -> None:
    plain, chunked = fused(cut), fused(cut)
    plan.apply(plain, MESH, {**PLAN, "qkv": plan.ColwiseParallel()})
    plan.apply(chunked, MESH, PLAN)
    r_plain, r = complete(plain), complete(chunked)
    # split as one output, every chunk straddles the processes' blocks and is gathered
    assert [e.tensor for e in r_plain.reshards if e.plan().total_bytes] != []
    # split within each chunk: q, k and v come out split on mp, and only the row-parallel sums
    # move data
    cuts = [t for t in chunked.tensors if t.name.startswith("cut") and t.producer is not None
            and t.producer.type == "reshape" and t.producer.name.endswith(".merge")]
    assert len(cuts) == 3
    for t in cuts:
        assert r.attr(t).dims_mapping == (0, -1, 1), t.name
    moved = [(e.tensor, [s.kind for s in e.plan().steps]) for e in r.reshards
             if e.plan().total_bytes]
    assert sorted(moved) == [("kv.mm", ["all_reduce"]), ("o.mm", ["all_reduce"])], moved
    assert chunked.tensor("qkv.weight").storage == Interleaved(0, SIZES, 2)
    assert chunked.tensor("qkv.bias").storage == Interleaved(0, SIZES, 2)
    # the same numbers as the plain plan on the user's values, forward and gradients
    values = user_values(plain)
    out_plain, grads_plain = forward_and_gradients(plain, values)
    out, grads = forward_and_gradients(chunked, values)
    np.testing.assert_allclose(out, out_plain, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out, run_serial(plain, values)["out"], rtol=1e-12, atol=1e-12)
    assert grads.keys() == grads_plain.keys()
    for name, want in grads_plain.items():
        np.testing.assert_allclose(grads[name], want, rtol=1e-12, atol=1e-12, err_msg=name)


def test_interleaved_storage_round_trips_and_refuses_what_cannot_be() -> None:
    lay = Interleaved(1, (4, 2, 2), 2)
    a = np.arange(24).reshape(3, 8)
    assert lay.stored(a)[0].tolist() == [0, 1, 4, 6, 2, 3, 5, 7]
    np.testing.assert_array_equal(lay.user(lay.stored(a)), a)
    assert Interleaved(0, (6,), 3).stored(np.arange(6)).tolist() == list(range(6))
    with pytest.raises(StorageError, match="multiples of 2"):
        Interleaved(0, (3, 3), 2)
    with pytest.raises(StorageError, match="positive"):
        Interleaved(0, (4, 0), 2)
    with pytest.raises(StorageError, match="ways"):
        Interleaved(0, (4,), 0)
    with pytest.raises(StorageError, match="dim 1 must hold the chunks"):
        lay.stored(np.zeros((3, 7)))
    with pytest.raises(StorageError, match="dim 1 must hold the chunks"):
        lay.user(np.zeros(8))


def _bad(chunks: Any, match: str, graph: Graph | None = None) -> None:
    g = graph if graph is not None else fused()
    before = fused() if graph is None else None
    entries = PLAN if graph is None else {}
    with pytest.raises(plan.PlanTargetError, match=match):
        plan.apply(g, MESH, {**entries, "qkv": plan.ColwiseParallel(chunks=chunks)})
    if before is not None:
        assert g == before  # a failing plan changes nothing: no annotation, no rewrite
        assert g.tensor("qkv.weight").storage is None


@pytest.mark.parametrize("chunks", [0, -1, True, "3", (2, 0, 1), (), (1.5, 1)])
def test_chunks_that_are_not_positive_ints_are_refused(chunks: Any) -> None:
    _bad(chunks, "must be a positive int")


def test_chunks_that_do_not_fit_the_output_or_its_cuts_are_refused() -> None:
    _bad(5, "do not divide into chunks")                        # 24 features in 5
    _bad(8, "cannot each be cut in 2")   # 8 chunks of 3 on 2 processes
    _bad(3, r"split op 'cut' reads the fused output 'qkv.unview' \[4, 6, 24\], but not as a cut")
    _bad((1, 1, 1, 1), "not as a cut into its chunks")
    g = fused()
    with pytest.raises(plan.PlanTargetError, match="no mesh dim is named 'tp'"):
        plan.apply(g, MESH, {"qkv": plan.ColwiseParallel(dim="tp", chunks=(2, 1, 1))})
    assert g == fused()


def test_a_reader_of_the_interleaved_values_that_is_not_a_cut_is_refused() -> None:
    _bad((2, 1, 1), "relu op 'peek' reads the fused output",
         fused(reader=lambda y: ops.relu(y, name="peek")))
    with Graph("tied") as g:
        w = g.param("qkv.weight", [8, 24])
        ops.split(ops.matmul(g.input("x", [4, 8]), w), sections=[12, 6, 6], axis=1)
        ops.relu(w, name="decay")  # reads the weight itself, which would be stored interleaved
    _bad((2, 1, 1), "relu op 'decay' reads 'qkv.weight' other than as a matmul's weight", g)
    with Graph("bias") as g:
        b = g.param("qkv.bias", [24])
        y = ops.add(ops.matmul(g.input("x", [4, 8]), g.param("qkv.weight", [8, 24])), b)
        ops.split(y, sections=[12, 6, 6], axis=1)
        ops.relu(b, name="peek_bias")
    _bad((2, 1, 1), r"also read by \['peek_bias'\]", g)
    with Graph("emb") as g:
        ops.embedding(g.input("ids", [4], "int64"), g.param("qkv.weight", [16, 24]))
    _bad(2, "is an embedding table", g)
    with Graph("uncut") as g:
        ops.matmul(g.input("x", [4, 8]), g.param("qkv.weight", [8, 24]))
    _bad(2, "nothing cuts the output", g)


def test_applying_the_plan_again_changes_nothing_and_a_second_layout_conflicts() -> None:
    g = fused()
    plan.apply(g, MESH, PLAN)
    once = fused()
    plan.apply(once, MESH, PLAN)
    plan.apply(g, MESH, PLAN)
    assert g == once
    h = fused()
    with pytest.raises(plan.PlanConflictError, match="ask different layouts of the output"):
        plan.apply(h, MESH, {**PLAN, "q*": plan.ColwiseParallel()})  # plain and chunked
    assert h == fused()
    plan.apply(h, MESH, {**PLAN, "q*": plan.ColwiseParallel(chunks=(12, 6, 6))})  # the same
    assert h == once


def test_the_style_names_its_chunks_only_when_given() -> None:
    assert repr(plan.ColwiseParallel()) == "ColwiseParallel(dim='mp')"
    assert repr(plan.ColwiseParallel(chunks=[2, 1, 1])) == "ColwiseParallel(dim='mp', chunks=(2, 1, 1))"
    assert hash(plan.ColwiseParallel(chunks=[2, 1, 1])) == hash(plan.ColwiseParallel(chunks=(2, 1, 1)))


def test_the_interleaved_storage_goes_through_the_model_file() -> None:
    g = fused()
    plan.apply(g, MESH, PLAN)
    text = dumps(g)
    back = loads(text)
    assert back == g and back.tensor("qkv.bias").storage == Interleaved(0, SIZES, 2)
    doc = json.loads(text)
    [bias] = [t for t in doc["tensors"] if t["name"] == "qkv.bias"]
    assert bias["storage"] == {"dim": 0, "sizes": [12, 6, 6], "ways": 2}


@pytest.mark.parametrize(("tensor", "storage", "match"), [
    ("qkv.bias", {"dim": 0, "sizes": [12, 6, 5], "ways": 2}, "multiples of 2"),
    ("qkv.bias", {"dim": 0, "sizes": [12, 6], "ways": 2}, "does not fit the param"),
    ("qkv.bias", {"dim": 1, "sizes": [12, 6, 6], "ways": 2}, "does not fit the param"),
    ("qkv.bias", {"dim": 0, "sizes": [12, 6, 6], "ways": 0}, "greater than or equal to 1"),
    ("qkv.bias", {"dim": 0, "sizes": [12, 6, 6], "ways": 2, "x": 1}, "Extra inputs"),
    ("qkv.mm", {"dim": 2, "sizes": [12, 6, 6], "ways": 2}, "does not fit the value"),
])
def test_a_model_file_with_a_storage_that_cannot_be_is_refused(
        tensor: str, storage: dict[str, Any], match: str) -> None:
    doc = json.loads(dumps(fused()))
    [t] = [t for t in doc["tensors"] if t["name"] == tensor]
    t["storage"] = storage
    with pytest.raises(ExchangeError, match=match):
        loads(json.dumps(doc))


def test_remove_op_leaves_its_results_declared_for_a_replacing_op() -> None:
    with Graph("g") as g:
        y = ops.relu(g.input("x", [4]), name="r")
        z = ops.exp(y, name="e")
    g.remove_op("r")
    assert y.producer is None and z.producer is not None and g.consumers(y)[0].name == "e"
    with pytest.raises(sr.graph.errors.ProducerError, match="'r' was declared"):
        g.validate()
    ops.abs(g.tensor("x"), name="a")  # another producer, under the old name
    g.add_op("sigmoid", ["x"], name="s", results=["r"])
    assert g.validate().tensor("r").producer is g.op("s")
    with Graph("other") as h:
        ops.relu(h.input("x", [4]), name="r")
    with pytest.raises(sr.graph.errors.UnknownNodeError, match="not an op of graph 'g'"):
        g.remove_op(h.op("r"))


# ---- the stored order is internal: every executor takes and gives the user's order ---------
#: the reverse run seeds the output and a value held interleaved (the fused output) ...
SEEDED = ("out", "qkv.unview")
#: ... and asks every source's gradient and that of a value held interleaved
WRT = ("x", "qkv.weight", "qkv.bias", "o.weight", "kv.weight", "qkv.mm")


def planned(source: str, tmp_path: Path) -> Graph:
    """The user's graph with the chunk-aware plan: as built with the Python API, saved after
    the plan and loaded again, or completed from that file by the CLI."""
    g = fused()
    plan.apply(g, MESH, PLAN)
    if source == "python":
        return g
    saved, completed = tmp_path / "planned.json", tmp_path / "completed.json"
    dump(g, saved)
    if source == "model file":
        return load(saved)
    assert main(["complete", str(saved), "-o", str(completed)]) == 0
    return load(completed)


def reference() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The user's values and seeds; every tensor and cotangent of the unplanned graph, run
    serially."""
    user = fused()
    values = user_values(user)
    rng = np.random.default_rng(3)
    seeds = {t: rng.standard_normal(user.tensor(t).shape) for t in SEEDED}
    return values, seeds, run_serial(user, values), serial_cotangents(user, values, seeds)


def reverse_run(g: Graph) -> tuple[Any, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The planned graph's gradient program, its feeds (the user's values and seeds, as they
    are) and the serial reference."""
    assert g.tensor("qkv.weight").storage is not None  # the plan stores it interleaved
    assert g.tensor("qkv.mm").storage is not None
    values, seeds, want, cts = reference()
    gp = gradient_program(lower(complete(g)), list(SEEDED), list(WRT))
    assert {"qkv.weight", "qkv.bias", "qkv.mm"} <= gp.storage.keys()
    return gp, {**values, **{gp.seeds[t]: v for t, v in seeds.items()}}, want, cts


def assert_users_order(got: Mapping[str, Any], grads: Mapping[str, Any],
                       want: Mapping[str, Any], cts: Mapping[str, Any]) -> None:
    """Every tensor of the user's graph and every gradient asked equal the unplanned graph's."""
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-12, atol=1e-12, err_msg=name)
    assert set(grads) == set(WRT)
    for name, g in grads.items():
        np.testing.assert_allclose(g, cts[name], rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("source", ["python", "model file", "cli"])
def test_the_simulated_and_serial_executors_take_and_give_the_users_order(
        source: str, tmp_path: Path) -> None:
    g = planned(source, tmp_path)
    gp, feeds, want, cts = reverse_run(g)
    res = run_simulated(gp, feeds)
    assert res.traffic.mismatches(gp) == []
    assert_users_order(res.fetch_all(list(want)), {t: res.fetch(b) for t, b in gp.grads.items()},
                       want, cts)
    serial = run_serial(g, {n: feeds[n] for n in want if g.tensor(n).is_source})
    for name, w in want.items():
        np.testing.assert_allclose(serial[name], w, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("source", ["python", "model file"])
def test_on_4_mpi_ranks_the_executor_takes_and_gives_the_users_order(
        source: str, tmp_path: Path) -> None:
    gp, feeds, want, cts = reverse_run(planned(source, tmp_path))
    run = run_mpi(gp, feeds, nprocs=4, fetch=[*want, *gp.grads.values()], timeout=240)
    assert run.traffic.mismatches(gp) == []  # bytes sent equal the plans', forward and reverse
    assert_users_order(run.values, {t: run.values[b] for t, b in gp.grads.items()}, want, cts)


def test_a_feed_of_the_wrong_shape_for_a_stored_tensor_is_refused_by_name() -> None:
    g = fused()
    plan.apply(g, MESH, PLAN)
    values = {**user_values(g), "qkv.weight": np.zeros((8, 24))}  # [in, out], not [out, in]
    with pytest.raises(ExecutionError, match=r"'qkv.weight' has shape \[8, 24\]"):
        run_serial(g, values)
    with pytest.raises(ExecutionError, match=r"'qkv.weight' has shape \[8, 24\]"):
        run_simulated(lower(complete(g)), values)
