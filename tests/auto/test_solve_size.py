"""The solve's size and its shortcuts (issue 27): each mesh's program has a pinned size, a
mesh whose dims permute another's is answered from that twin's solve (unless the cost model
tells its dims apart), HiGHS without presolve reaches the optimum it reaches with it, and the
solver's reshard prices are the planner's."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

import spmdrules as sr
from spmdrules import auto, examples
from spmdrules.auto import cost as cm
from spmdrules.auto import search, solver
from spmdrules.auto.pricing import prices
from spmdrules.completion.cost import CostModel, LinkCost
from spmdrules.completion.reshard_plans import plan_reshard

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
LLAMA = {"batch": 4, "seq": 8, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 64}


def _llama() -> sr.Graph:
    return examples.llama_decoder(2, MESH, annotate=False, **LLAMA)


@pytest.mark.parametrize(("shape", "size"), [
    ((4,), (1469, 1180)), ((2, 2), (8214, 4952)), ((2, 4), (7339, 4380)),
    ((2, 2, 2), (42063, 17800))])
def test_each_mesh_s_program_has_its_pinned_size(shape: tuple[int, ...],
                                                   size: tuple[int, int]) -> None:
    # the same sizes as the row-by-row build of 841e053: the assembly is vectorised, the
    # program is the same
    ch = solver.solve(_llama(), search._mesh(shape), math.inf, cm.Options())
    assert (ch.variables, ch.constraints) == size


def _solved_meshes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    meshes: list[tuple[int, ...]] = []
    real = search.solve

    def spy(g: Any, mesh: sr.ProcessMesh, *a: Any, **k: Any) -> Any:
        meshes.append(mesh.shape)
        return real(g, mesh, *a, **k)

    monkeypatch.setattr(search, "solve", spy)
    return meshes


def test_a_permuted_mesh_is_answered_from_its_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    g = _llama()
    full = auto.plan(g, 8, memory_per_rank="1GiB", mesh_shapes=[(4, 2)]).chosen
    meshes = _solved_meshes(monkeypatch)
    p = auto.plan(g, 8, memory_per_rank="1GiB", mesh_shapes=[(2, 4), (4, 2)])
    assert meshes == [(2, 4)]
    by_shape = {c.mesh.shape: c for c in (p.chosen, *p.alternatives)}
    twin = by_shape[(4, 2)]
    assert twin.twin == (2, 4) and twin.program == by_shape[(2, 4)].program
    # the renamed plan is as good as the full program's own on (4, 2)
    assert twin.estimate.time == pytest.approx(full.estimate.time, rel=1e-9)
    assert twin.estimate.memory_bytes == full.estimate.memory_bytes
    swap = {"x": "y", "y": "x"}  # the size-2 dim is "x" on (2, 4), "y" on (4, 2)
    assert twin.specs == {n: sr.plan.Spec(tuple(
        None if d is None else swap[d] if isinstance(d, str) else tuple(swap[m] for m in d)
        for d in s.spec)) for n, s in by_shape[(2, 4)].specs.items()}


def test_a_cost_model_that_tells_mesh_dims_apart_solves_each_permutation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slow_x = CostModel(per_dim={"x": LinkCost(alpha=1e-4, beta=1e-9)})
    meshes = _solved_meshes(monkeypatch)
    p = auto.plan(_llama(), 8, memory_per_rank="1GiB", mesh_shapes=[(2, 4), (4, 2)],
                  options=cm.Options(cost=slow_x))
    assert meshes == [(2, 4), (4, 2)]
    assert all(c.twin is None for c in (p.chosen, *p.alternatives))


def test_highs_without_presolve_reaches_the_optimum_with_presolve(
        monkeypatch: pytest.MonkeyPatch) -> None:
    g, mesh = _llama(), search._mesh((2, 2))
    without = solver.solve(g, mesh, math.inf, cm.Options())
    real = solver.milp

    def presolved(c: Any, **kw: Any) -> Any:
        assert kw["options"]["presolve"] is False
        return real(c, **{**kw, "options": {**kw["options"], "presolve": True}})

    monkeypatch.setattr(solver, "milp", presolved)
    with_ = solver.solve(g, mesh, math.inf, cm.Options())
    assert without.time == pytest.approx(with_.time, rel=solver.MIP_GAP)


def test_the_solver_s_reshard_prices_are_the_planner_s() -> None:
    mesh = search._mesh((2, 2, 2))
    shape, cost = (8, 16, 4), CostModel()
    layouts = [sr.DistAttr(mesh, dm) for dm in ([-1, -1, -1], [0, 1, -1], [1, 0, 2], [2, -1, 0])]
    pending = [sr.DistAttr(mesh, [0, -1, -1], {1: "sum"}), sr.DistAttr(mesh, [-1] * 3, {2: "sum"})]
    memo = prices(cost)
    for a, b in itertools.product(layouts + pending, layouts):
        assert memo.time(a, b, shape, "float32") == pytest.approx(
            plan_reshard(a, b, shape, "float32", cost).time, rel=1e-12, abs=0.0), (a, b)
