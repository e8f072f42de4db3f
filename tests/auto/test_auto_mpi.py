"""An auto plan of a Hugging Face MoE decoder (Mixtral, transformers' default experts path)
runs on 4 MPI ranks equal to serial, forward and gradients, with the bytes its plans predict:
what ``bench/auto.py --mpi`` claims at bench size, here small; and the bench's check reports a
plan that differs, loudly (issue 27)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
pytest.importorskip("transformers", reason="needs transformers (a test dependency)")

import bench_scripts
from hf_models import DECODERS, exported, token_ids
from sharded_runs import MpiCheck, run_against_serial

from spmdrules import auto, plan
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.lowering import lower

bench_auto = bench_scripts.load("auto")


def _float64(feeds: dict[str, Any]) -> dict[str, Any]:
    return {k: v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v
            for k, v in feeds.items()}


@pytest.mark.mpi
@pytest.mark.timeout(280)
def test_an_auto_planned_moe_decoder_runs_on_4_mpi_ranks_equal_to_serial_with_its_bytes(
) -> None:
    im = exported("mixtral", batch=2, layers=1)
    g = im.graph
    assert any("grouped_mm_fallback" in op.name for op in g.ops)  # the default experts path
    p = auto.plan(g, 4, memory_per_rank="1GiB")
    p.apply(g)
    r = complete(g)
    # expert parallelism: each token's expert weights a masked pending sum
    assert any(r.attr(t).mask_items for t in g.tensors)
    prog = lower(r)
    out = im.outputs[0]
    gp = gradient_program(prog, [out])
    seed = np.random.default_rng(0).standard_normal(prog.buffers[out].shape)
    feeds = {**_float64(im.feeds(token_ids(2))), gp.seeds[out]: seed}
    check = run_against_serial(g, prog, gp, feeds, {out: seed}, nprocs=4, timeout=240)
    assert check.problems(1e-12) == []
    assert check.planned_bytes > 0 and check.measured_bytes == check.planned_bytes
    # the gradient of every parameter came back, and the experts' weights are among them
    assert {"model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"
            } <= set(gp.grads)


def test_a_check_names_each_error_over_its_tolerance_and_each_edge_off_its_plan() -> None:
    check = MpiCheck(forward_error=3e-9, forward_where="logits", gradient_error=float("nan"),
                     gradient_where="w", measured_bytes=96, planned_bytes=64,
                     mismatches=(("x -> matmul", 96, 64),), internal_bytes=0,
                     run=None)  # type: ignore[arg-type]
    assert check.problems(1e-10) == [
        "forward 'logits' differs from serial by 3e-09 (> 1e-10)",
        "gradient 'w' differs from serial by nan (> 1e-10)",  # NaN is never equal
        "edge 'x -> matmul': measured 96 B, planned 64 B",
    ]
    assert check.problems(1e-8)[0].startswith("gradient 'w'")


def test_the_bench_reports_a_plan_that_cannot_run_and_keeps_it_for_its_exit_status() -> None:
    im = exported("llama", batch=2, layers=1)
    model = bench_auto.Model("llama", im.graph, _float64(im.feeds(token_ids(2))),
                             im.outputs[0])
    runs = bench_auto.MpiRuns(timeout=60)
    mesh = bench_auto._mesh((4,), ("x",))
    bad = {"input_ids": plan.Spec(("x", "x"))}  # one mesh dim on two tensor dims
    cell = runs.cell("llama 4 bad", model, mesh, bad)
    assert cell.startswith("!!! MPI MISMATCH !!! failed:")
    assert runs.failures and runs.failures[0].startswith("llama 4 bad: failed:")
    assert runs.cell("llama 4 bad again", model, mesh, bad) == cell  # the same plan runs once
    assert len(runs.failures) == 1
    other = bench_auto.Model("other", model.graph, model.feeds, model.output)
    runs.cell("other 4 bad", other, mesh, bad)  # another model's plan is its own
    assert len(runs.failures) == 2
    # the graph is left as it was: no annotation of the failed plan stays on it
    assert all(t.annotation is None for t in im.graph.tensors)


@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_the_bench_runs_each_plan_of_a_model_against_one_serial_reference() -> None:
    im = exported("llama", batch=2, layers=1)
    model = bench_auto.Model("llama", im.graph, _float64(im.feeds(token_ids(2))),
                             im.outputs[0])
    runs = bench_auto.MpiRuns(timeout=120)
    plans = bench_auto.hand_plans("llama", im.graph, 2, DECODERS["llama"][1])
    cells = [runs.cell(f"llama 2 {name}", model, *plans[name]) for name in ("dp", "megatron")]
    assert runs.failures == [], runs.failures
    assert all(c.startswith("mpi fwd/grad max err") for c in cells)
    assert list(runs._serial) == ["llama"]  # computed once, for the first plan
    # a plan too large for float64 on this machine runs in float32 against the same reference
    half = runs.cell("llama 2 dp float32", model, *plans["dp"], float32=True)
    assert half.endswith("; float32)") and runs.failures == [], runs.failures
    assert float(half.split("max err ")[1].split("/")[1].split(",")[0]) > 1e-10  # float32's
