"""spmdrules.auto (issue 27): candidates from the rules, the cost model, the MILP over repeated
blocks, the plan object, its errors, and auto plans run on 4 MPI ranks equal to serial."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import spmdrules as sr
from spmdrules import auto, examples
from spmdrules.auto.candidates import strategies
from spmdrules.auto.quotient import fold
from spmdrules.cli import main
from spmdrules.completion import complete
from spmdrules.completion.memory import memory
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.lowering import lower
from spmdrules.graph.graph import Graph
from spmdrules.plan import apply
from spmdrules.plan import file as plan_file
from tests.support.sharded_runs import assert_mpi_equals_serial_forward_and_reverse

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
LLAMA = {"batch": 4, "seq": 8, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 64}


def mlp(batch: int, hidden: int, ffn: int, seq: int = 4) -> Graph:
    return examples.mlp(MESH, batch=batch, seq=seq, hidden=hidden, ffn=ffn, annotate=False)


def test_candidates_are_the_rules_single_dim_strategies_expanded_across_mesh_dims() -> None:
    g = mlp(8, 16, 32)
    op = g.op("fc1.matmul")  # x [8, 4, 16] @ w [16, 32]
    one = sr.ProcessMesh([0, 1, 2, 3], dim_names=["x"])
    got = {(tuple(a.mapping_str() for a in s.inputs), s.outputs[0].mapping_str())
           for s in strategies(op, one)}
    assert got == {
        (("[-1,-1,-1]", "[-1,-1]"), "[-1,-1,-1]"),  # replicated
        (("[0,-1,-1]", "[-1,-1]"), "[0,-1,-1]"),  # batch
        (("[-1,0,-1]", "[-1,-1]"), "[-1,0,-1]"),  # sequence
        (("[-1,-1,0]", "[0,-1]"), "[-1,-1,-1] P{0:sum}"),  # k: row-parallel, a pending sum
        (("[-1,-1,-1]", "[-1,0]"), "[-1,-1,0]"),  # n: column-parallel
    }
    two = strategies(op, MESH)
    # every pair of single-dim strategies on distinct mesh dims that the rule accepts as is
    assert len(two) == 1 + 4 + 4 + 4 * 4 - 4 + 4  # no mesh dim twice; batch/seq co-shards
    assert all(s.split == math.prod(MESH.shape[m] for m in s.work_dims) for s in two)


def test_the_solver_knows_no_op_by_name() -> None:
    # every registered op but those named like a reduce type (a pending "sum" is a placement)
    names = set(sr.list_rules()) - {"sum", "max", "min", "mean", "any", "all", "avg", "product"}
    src = "".join(p.read_text() for p in Path(auto.__file__).parent.glob("*.py"))
    for name in names | {"matmul", "conv2d", "embedding", "softmax", "layer_norm"}:
        assert f'"{name}"' not in src and f"'{name}'" not in src, name


def test_a_32_layer_stack_folds_to_one_layer() -> None:
    g = examples.gpt_decoder(32, MESH, annotate=False, batch=4, seq=8, hidden=16, heads=2,
                             ffn=32, vocab=32)
    q = fold(g)
    g1 = examples.gpt_decoder(1, MESH, annotate=False, batch=4, seq=8, hidden=16, heads=2,
                              ffn=32, vocab=32)
    # the run's first block and the layers outside it: about two layers' ops, not 32
    assert len(set(q.rep)) <= 2 * g1.num_ops
    assert sum(q.weight.values()) == g.num_ops


def _split_over(p: auto.AutoPlan, name: str) -> int:
    """How many processes split tensor ``name`` in plan ``p``."""
    spec = p[name].style.spec
    names = [n for d in spec if d is not None for n in (d if isinstance(d, tuple) else (d,))]
    return math.prod(p.mesh.shape[p.mesh.dim_names.index(n)] for n in names)


def test_loose_memory_and_a_divisible_batch_choose_data_parallel() -> None:
    g = mlp(batch=64, hidden=64, ffn=256, seq=16)
    p = auto.plan(g, 4, memory_per_rank="1GiB")
    assert p["x"].style.spec[-1] is None and _split_over(p, "x") == 4  # the tokens over all 4
    assert _split_over(p, "fc1.weight") == _split_over(p, "fc2.weight") == 1  # replicated
    assert p.predicted.time > 0 and p.predicted.memory_bytes <= p.budget


def test_a_tight_budget_brings_tensor_parallelism() -> None:
    g = mlp(batch=64, hidden=64, ffn=256, seq=16)
    loose = auto.plan(g, 4, memory_per_rank="1GiB")
    leanest = auto.plan(g, 4, memory_per_rank="1GiB", objective="memory")
    assert leanest.predicted.memory_bytes < loose.predicted.memory_bytes
    budget = (leanest.predicted.memory_bytes + loose.predicted.memory_bytes) // 2
    tight = auto.plan(g, 4, memory_per_rank=budget)
    assert tight.predicted.memory_bytes <= budget
    # a weight split: parameters (with their gradients and Adam's state) are what the tight
    # budget cannot hold replicated
    assert max(_split_over(tight, w) for w in ("fc1.weight", "fc2.weight")) > 1
    assert tight.predicted.time >= loose.predicted.time


def test_summary_gives_memory_per_rank() -> None:
    r = complete(examples.mlp(MESH))  # x on dp, fc1 column-, fc2 row-parallel (mp)
    m = memory(r)
    # the weights (1024 x 4096, 4096 x 1024, bias 4096) split over mp = 2, float32; fc2's bias
    # (1024) whole
    assert m.parameters == (2 * 1024 * 4096 + 4096) * 4 // 2 + 1024 * 4
    assert m.reshard_buffers == 8 // 2 * 1024 * 1024 * 4  # fc2's all-reduced [4, 1024, 1024]
    assert f"memory per rank {sr.completion.reshard_plans.fmt_bytes(m.total)}" in r.summary()


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"devices": 0, "memory_per_rank": "1GiB"}, auto.AutoPlanError, "devices must be"),
    ({"devices": 4, "memory_per_rank": "lots"}, auto.AutoPlanError, "e.g. 2GiB"),
    ({"devices": 4, "memory_per_rank": 0}, auto.AutoPlanError, "more than 0"),
    ({"devices": 4, "memory_per_rank": -5}, auto.AutoPlanError, "is not a size"),
    ({"devices": True, "memory_per_rank": "1GiB"}, auto.AutoPlanError, "devices must be"),
    ({"devices": 4, "memory_per_rank": "1KiB"}, auto.MemoryBudgetError,
     "raise memory_per_rank"),
    ({"devices": 4, "memory_per_rank": "1GiB", "mesh_shapes": [(3, 2)]}, auto.AutoPlanError,
     "product is the 4 devices"),
    ({"devices": 4, "memory_per_rank": "1GiB", "objective": "speed"}, auto.AutoPlanError,
     "'time' or 'memory'"),
])
def test_bad_input_is_a_typed_error_naming_the_fix(kwargs: dict[str, object],
                                                   error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        auto.plan(mlp(8, 16, 32), **kwargs)  # type: ignore[arg-type]


def test_mesh_shapes_are_the_factorisations() -> None:
    assert auto.mesh_shapes(8) == [(8,), (2, 4), (4, 2), (2, 2, 2)]  # (4, 2) tried only
    # where the mesh dims have different links (CostModel.per_dim): else it plans as (2, 4)
    assert auto.mesh_shapes(1) == [(1,)]


def test_the_cli_writes_a_plan_file_that_plan_apply_reads(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    model, out = tmp_path / "mlp.json", tmp_path / "plan.json"
    assert main(["example", "mlp", "-o", str(model)]) == 0
    assert main(["auto", str(model), "--devices", "4", "--memory", "8GiB", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "chosen: mesh" in text and "alternative: mesh" in text and "lost:" in text
    mesh, styles = plan_file.load(out)
    g = examples.mlp(MESH, annotate=False)
    apply(g, mesh, styles)
    assert complete(g).attr("x").mesh == mesh
    assert json.loads(out.read_text())["format"] == plan_file.FORMAT
    assert main(["auto", str(model), "--devices", "4", "--memory", "1KiB"]) == 1
    assert "raise memory_per_rank" in capsys.readouterr().err


def _run_auto_plan_on_mpi(g: Graph, **feeds_kw: object) -> None:
    p = auto.plan(g, 4, memory_per_rank="1GiB")
    p.apply(g)
    prog = lower(complete(g))
    out = prog.tensors[-1]
    gp = gradient_program(prog, [out])
    feeds = random_feeds(prog, seed=3, **feeds_kw)  # type: ignore[arg-type]
    seed = np.ones(g.tensor(out).shape) if g.tensor(out).shape else np.asarray(1.0)
    seeds = {out: seed}
    feeds[gp.seeds[out]] = seed
    assert_mpi_equals_serial_forward_and_reverse(g, prog, gp, feeds, seeds, nprocs=4)


@pytest.mark.mpi
@pytest.mark.timeout(280)
def test_an_auto_planned_decoder_runs_on_4_mpi_ranks_equal_to_serial() -> None:
    g = examples.llama_decoder(2, MESH, **LLAMA)
    _run_auto_plan_on_mpi(g, vocab_limits={"input_ids": 64, "labels": 64})


@pytest.mark.mpi
@pytest.mark.timeout(280)
def test_an_auto_planned_cnn_runs_on_4_mpi_ranks_equal_to_serial() -> None:
    _run_auto_plan_on_mpi(examples.resnet_block(MESH, batch=2, size=8))
