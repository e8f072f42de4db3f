"""The MILP's size and its edge cases (issue 27): the program of a folded stack does not grow
with its layers, a source is fed as its one reader reads it, a mesh HiGHS finds nothing on in
time is passed over, and the auto plan of a small decoder is at most each hand plan's step."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import spmdrules as sr
from spmdrules import auto, examples
from spmdrules import plan as hand
from spmdrules.auto import cost as cm
from spmdrules.auto import solver
from spmdrules.auto.quotient import fold
from spmdrules.completion import complete

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
LLAMA = {"batch": 4, "seq": 8, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 64}
GPT = {"batch": 4, "seq": 8, "hidden": 16, "heads": 2, "ffn": 32, "vocab": 32}


def test_the_program_of_a_folded_stack_does_not_grow_with_its_layers() -> None:
    opts = cm.Options()
    sizes = set()
    for layers in (4, 32):
        g = examples.gpt_decoder(layers, MESH, annotate=False, **GPT)
        ch = solver.solve(g, MESH, float("inf"), opts, quotient=fold(g))
        sizes.add((ch.variables, ch.constraints))
    assert len(sizes) == 1, sizes
    p = auto.plan(g, 4, memory_per_rank="1GiB", mesh_shapes=[(2, 2)])
    variables, rows = sizes.pop()
    assert p.chosen.program == (variables, rows + 1)  # and the budget's row


def test_a_source_one_slot_reads_is_fed_as_that_slot_reads_it() -> None:
    g = examples.llama_decoder(2, MESH, annotate=False, **LLAMA)
    ch = solver.solve(g, MESH, float("inf"), cm.Options())
    ops = {op.name: k for k, op in enumerate(g.ops)}
    single = [t for t in g.tensors if t.producer is None and len(t.consumers) == 1
              and sum(t is u for u in t.consumers[0].inputs) == 1]
    assert len(single) > 10  # the weights
    for t in single:
        op = t.consumers[0]
        slot = next(j for j, u in enumerate(op.inputs) if u is t)
        assert ch.sources[t.name] == ch.ops[ops[op.name]].inputs[slot], t.name


def test_a_mesh_highs_solves_nothing_on_in_time_is_passed_over(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = solver.milp

    def slow_on_2d(c: Any, **kw: Any) -> Any:
        if slow_on_2d.mesh_ndim == 2:  # type: ignore[attr-defined]
            return SimpleNamespace(x=None, status=1)  # HiGHS: "node or time limit reached"
        return real(c, **kw)

    real_run = solver._run

    def run(pr: Any, *a: Any) -> Any:
        slow_on_2d.mesh_ndim = pr.mesh.ndim  # type: ignore[attr-defined]
        return real_run(pr, *a)

    monkeypatch.setattr(solver, "milp", slow_on_2d)
    monkeypatch.setattr(solver, "_run", run)
    g = examples.mlp(MESH, batch=64, seq=16, hidden=64, ffn=256, annotate=False)
    p = auto.plan(g, 4, memory_per_rank="1GiB")
    assert p.mesh.shape == (4,) and not p.alternatives  # not "over the budget"
    with pytest.raises(auto.AutoPlanError, match=r"limits per mesh; raise .*NODE_LIMIT"):
        auto.plan(g, 4, memory_per_rank="1GiB", mesh_shapes=[(2, 2)])


def test_the_auto_plan_of_a_small_decoder_is_at_most_each_hand_plans_step() -> None:
    opts = cm.Options()
    hands = {}
    for sp in (False, True):  # Megatron + data parallel, without and with sequence parallel
        g = examples.llama_decoder(2, MESH, sequence_parallel=sp, **LLAMA)
        hands[f"megatron+dp sp={sp}"] = cm.estimate(complete(g), opts).time
    g = examples.llama_decoder(2, MESH, annotate=False, **LLAMA)
    one = sr.ProcessMesh([0, 1, 2, 3], dim_names=["dp"])
    dp = {"input_ids": hand.DataParallel(dim="dp"), "labels": hand.DataParallel(dim="dp")}
    hands["dp"] = auto.evaluate(g, one, dp, opts).time
    p = auto.plan(g, 4, memory_per_rank="1GiB", options=opts)
    for name, t in hands.items():
        assert p.predicted.time <= t, (name, p.predicted.time, t)
