"""Expert parallelism reached by the solver (issue 27): a lookup in an expert table split on its
experts makes a masked pending sum (each token's expert weights on the one process that holds
its expert, zeros elsewhere), which no reshard makes; the candidates of the ops after it are
asked about it as their producer makes it, so the experts' chain runs split by expert, as the
hand plan of tests/support/hf_models.py does, and the auto plan is at most that plan."""

from __future__ import annotations

import math

import bench_scripts
import pytest
from hf_models import DECODERS, exported

from spmdrules import auto
from spmdrules.auto.quotient import fold
from spmdrules.auto.search import _mesh
from spmdrules.auto.solver import solve
from spmdrules.completion import complete

bench_auto = bench_scripts.load("auto")


@pytest.fixture(scope="module")
def moe() -> object:
    return exported("mixtral", batch=4, layers=1)


@pytest.mark.parametrize("devices", [4, 8])
def test_the_auto_plan_of_an_moe_decoder_splits_its_experts_and_beats_each_hand_plan(
        moe: object, devices: int) -> None:
    g = moe.graph  # type: ignore[attr-defined]
    hands = {name: auto.evaluate(g, mesh, styles, auto.Options())
             for name, (mesh, styles) in bench_auto.hand_plans(
                 "mixtral", g, devices, DECODERS["mixtral"][1]).items()}
    p = auto.plan(g, devices, memory_per_rank="64GiB")
    assert all(p.predicted.time <= e.time for e in hands.values()), (p.predicted, hands)
    # the experts' tables are split on their experts, and their per-token copies masked
    table = p["model.layers.0.mlp.experts.gate_up_proj"].style.spec  # type: ignore[attr-defined]
    assert table[0] is not None
    p.apply(g)
    r = complete(g)
    masked = {t.name for t in g.tensors if r.attr(t).mask_items}
    assert "model.layers.0.mlp.experts.grouped_mm_fallback.weights" in masked
    # and the plan completes to what the solver priced on its mesh
    ch = solve(g, _mesh(tuple(p.mesh.shape)), math.inf, auto.Options(), "time", fold(g))
    assert p.predicted.time == pytest.approx(ch.time, rel=1e-9)


def test_the_bench_s_tight_budget_is_over_data_parallelism_and_met_by_split_weights(
        moe: object) -> None:
    # the "a model that does not fit replicated": data parallelism, which replicates
    # every weight, is over it; the auto plan meets it by splitting weights
    g = moe.graph  # type: ignore[attr-defined]
    opts = auto.Options()
    mesh, styles = bench_auto.hand_plans("mixtral", g, 4, DECODERS["mixtral"][1])["dp"]
    dp = auto.evaluate(g, mesh, styles, opts)
    tight, lean = bench_auto.tight_budget(g, 4, dp, opts)
    assert lean < tight < dp.memory_bytes
    p = auto.plan(g, 4, memory_per_rank=tight, options=opts)
    assert p.predicted.memory_bytes <= tight
    assert "weights 0/" not in bench_auto.splits(g, p)
