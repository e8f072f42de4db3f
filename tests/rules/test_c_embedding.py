"""c_embedding and its gradient rule: Paddle's behaviour, the deviation's proof, and a
vocab-parallel lookup (a pending sum the lowering reduces) against serial numpy, simulated and on
MPI."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sharded_runs import assert_mpi_equals_serial, assert_simulated_equals_serial

import spmdrules as sr
from spmdrules import DistAttr, ProcessMesh, TensorSpec, get_rule, ops
from spmdrules.completion import complete
from spmdrules.conformance import default_case_paths, iter_cases
from spmdrules.conformance import run_case as conformance_run_case
from spmdrules.execution.local import get_kernel
from spmdrules.execution.lowering import lower
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph
from spmdrules.verify import run_case
from spmdrules.verify.cases import Case

MESH = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def spec(shape: list[int], dm: list[int], partial: Any = None, mesh: ProcessMesh = MESH
         ) -> TensorSpec:
    return TensorSpec(shape, DistAttr(mesh, dm, partial))


def dms(slots: Any) -> list[Any]:
    return [None if a is None else list(a.dims_mapping) for a in slots]


def test_row_sharded_table_leaves_a_pending_sum() -> None:
    # c_embedding/forward/10 (mesh [2,2,2]): weight [9,8] dm [2,-1], x [16]
    mesh = ProcessMesh.from_shape([2, 2, 2])
    info = get_rule("c_embedding").infer_forward(spec([9, 8], [2, -1], mesh=mesh),
                                                 spec([16], [-1], mesh=mesh), 0, 9)
    assert dms(info.inputs) == [[2, -1], [-1]] and dms(info.outputs) == [[-1, -1]]
    assert info.outputs[0].partial_items == ((2, "sum"),)  # type: ignore[union-attr]
    with pytest.raises(sr.ShardingConflictError):  # c_embedding/forward/12
        get_rule("c_embedding").infer_forward(spec([8, 16], [0, -1]), spec([8, 6], [0, -1]), 0, 16)


def _grad_case(args: tuple[TensorSpec, ...], mesh: ProcessMesh) -> Case:
    return Case(rule="c_embedding_grad", direction="forward", op="c_embedding_grad", mesh=mesh,
                inputs=args, outputs=(args[0],), attrs={"start_index": 0},
                domains=("real", f"index:{args[0].shape[0]}", "real"))


def test_deviation_grad_echoes_table_paddle_wrong_ours_right() -> None:
    # c_embedding/reverse/46 (mesh [2,4]): weight [12,9] replicated, x [4,5], out_grad's hidden
    # dim on mesh dim 0: Paddle answers w_grad [-1,-1], the table's own layout
    mesh = ProcessMesh.from_shape([2, 4])
    args = (spec([12, 9], [-1, -1], mesh=mesh), spec([4, 5], [-1, -1], mesh=mesh),
            spec([4, 5, 9], [-1, -1, 0], mesh=mesh))
    ours = get_rule("c_embedding_grad").infer_forward(*args, 0)
    assert dms(ours.outputs) == [[-1, 0]]
    kernel = get_kernel("c_embedding_grad")
    rng = np.random.default_rng(0)
    assert run_case(_grad_case(args, mesh), ours, kernel, rng, alternatives=False).status == "ok"
    paddle = sr.SpmdInfo(ours.inputs, (DistAttr(mesh, [-1, -1]),))
    assert run_case(_grad_case(args, mesh), paddle, kernel, rng,
                    alternatives=False).status == "wrong"


def test_grad_lays_the_table_out_as_w_grad_which_the_kernel_sizes_from_it() -> None:
    # issue 23, item 12: weight [9,4] replicated, out_grad [5,2,4] given [-1,-1,0] on mesh [2].
    # The answer was w_grad [-1,0] beside the table handed back replicated: the kernel sizes
    # w_grad from the table's block, [9,4], not the [9,2] that w_grad's attribute claims
    mesh = ProcessMesh([0, 1])
    args = (spec([9, 4], [-1, -1], mesh=mesh), spec([5, 2], [-1, -1], mesh=mesh),
            spec([5, 2, 4], [-1, -1, 0], mesh=mesh))
    ours = get_rule("c_embedding_grad").infer_forward(*args, 0)
    assert dms(ours.inputs) == [[-1, 0], [-1, -1], [-1, -1, 0]] and dms(ours.outputs) == [[-1, 0]]
    kernel, rng = get_kernel("c_embedding_grad"), np.random.default_rng(1)
    assert run_case(_grad_case(args, mesh), ours, kernel, rng, alternatives=False).status == "ok"
    handed_back = sr.SpmdInfo((args[0].attr, *ours.inputs[1:]), ours.outputs)
    result = run_case(_grad_case(args, mesh), handed_back, kernel, rng, alternatives=False)
    assert result.status == "wrong" and "from which weight_grad's block is sized" in result.detail


def test_grad_refuses_a_table_hidden_shard_on_a_mesh_dim_the_ids_use() -> None:
    # c_embedding/reverse/5 (Paddle raises too): w_grad would be split and pending on mesh dim 0
    mesh = ProcessMesh.from_shape([3, 2])
    with pytest.raises(sr.ShardingConflictError, match="mesh dim 0 shards both"):
        get_rule("c_embedding_grad").infer_forward(
            spec([8, 4], [-1, 0], mesh=mesh), spec([4, 4], [0, 1], mesh=mesh),
            spec([4, 4, 4], [-1, 1, -1], mesh=mesh), 0)


def test_every_recorded_grad_answer_of_ours_executes() -> None:
    # on af95ee8, 8 of them gave w_grad another layout than the table: malformed
    from spmdrules.conformance.execution import check_case

    run = 0
    for case in iter_cases(default_case_paths(), ["c_embedding"]):
        if case["direction"] != "reverse":
            continue
        r = conformance_run_case(case)
        if isinstance(r.answer, sr.SpmdInfo):
            table, w_grad = r.answer.inputs[0], r.answer.outputs[0]
            assert table.multi_dims_mapping == w_grad.multi_dims_mapping  # type: ignore[union-attr]
            e = check_case(case, r.answer)
            assert e.ours == "ok", (case["case_id"], e.detail)
            run += 1
    assert run == 82  # of 180: the others are errors, Paddle's and ours


def _model() -> Graph:
    with Graph("c-embedding") as g:
        table = g.input("weight", [10, 6], "float64")
        shard(table, MESH, ("mp", None))
        ids = g.input("ids", [4, 5], "int64")
        shard(ids, MESH, ("dp", None))
        out = ops.c_embedding(table, ids, start_index=2, vocab_size=14)
        ops.multiply(out, out, name="loss")
    return g


def _feeds() -> dict[str, Any]:
    rng = np.random.default_rng(3)
    return {"weight": rng.standard_normal((10, 6)), "ids": rng.integers(0, 14, (4, 5))}


def test_vocab_parallel_lookup_equals_serial_forward_and_reverse() -> None:
    g = _model()
    r = complete(g)
    prog = lower(r)
    assert_simulated_equals_serial(g, _feeds(), prog=prog)


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_vocab_parallel_lookup_on_mpi_equals_serial() -> None:
    g = _model()
    prog = lower(complete(g))
    assert_mpi_equals_serial(g, _feeds(), prog=prog)
