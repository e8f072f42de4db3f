"""A pending sum of x through the reductions linear in x: sum, reduce_sum and mean (issue 24,
cause 5). Paddle reduces x first (``reduce-sum-keeps-partial``, a parallelism deviation): both
answers compute the op, ours with the sum still pending on the smaller reduced output."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from proofs import execute, prove_keeps_partial

from spmdrules import DistAttr, ProcessMesh, SpmdInfo, TensorSpec, get_rule
from spmdrules.conformance.calls import call_engine
from spmdrules.conformance.deviation import classify
from spmdrules.conformance.runner import default_case_paths, iter_cases

MESH22 = ProcessMesh.from_shape([2, 2], list(range(4)))
MESH222 = ProcessMesh.from_shape([2, 2, 2], list(range(8)))


def spec(mesh: ProcessMesh, shape: Sequence[int], dm: Sequence[int], partial: Any = None
         ) -> TensorSpec:
    return TensorSpec(list(shape), DistAttr(mesh, list(dm), partial))


def maps(info: SpmdInfo) -> list[str]:
    return [a.mapping_str() for a in (*info.inputs, *info.outputs) if isinstance(a, DistAttr)]


@pytest.mark.parametrize("op", ["sum", "reduce_sum", "mean"])
def test_a_linear_reduction_carries_x_s_pending_sum(op: str) -> None:
    x = spec(MESH222, [8, 6, 4], [2, 1, -1], {0: "sum"})
    # the carried sum and the new one of the sharded reduced dim, in mesh-dim order
    assert maps(get_rule(op).infer_forward(x, [1], False)) == [
        "[2,1,-1] P{0:sum}", "[2,-1] P{0:sum,1:sum}"]
    assert maps(get_rule(op).infer_forward(x, [2], True)) == [
        "[2,1,-1] P{0:sum}", "[2,1,-1] P{0:sum}"]
    # reverse: x pends the sum out pends (a whole x cannot make a pending out)
    out = spec(MESH222, [8, 4], [2, -1], {0: "sum"})
    assert maps(get_rule(op).infer_reverse(spec(MESH222, [8, 6, 4], [-1, -1, -1]), out, [1],
                                           False)) == ["[2,-1,-1] P{0:sum}", "[2,-1] P{0:sum}"]


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_only_pending_sums_pass_and_only_through_linear_reductions(op: str) -> None:
    x = spec(MESH222, [8, 6], [2, -1], {0: "max", 1: "sum"})
    # a pending max does not commute with a sum: x is reduced over mesh dim 0 first
    assert maps(get_rule(op).infer_forward(x, [1], False)) == ["[2,-1] P{1:sum}", "[2] P{1:sum}"]
    for other in ("max", "squared_l2_norm", "prod"):  # not linear in x: reduced first
        info = get_rule(other).infer_forward(spec(MESH22, [8, 6], [0, -1], {1: "sum"}), [1], False)
        assert maps(info)[0] == "[0,-1]", other
    info = get_rule("max").infer_reverse(spec(MESH22, [8, 6], [-1, -1]),
                                          spec(MESH22, [8], [0], {1: "sum"}), [1], False)
    assert maps(info) == ["[0,-1]", "[0]"]


@pytest.mark.parametrize(("op", "count"), [("sum", 16), ("reduce_sum", 8)])
def test_proof_reduce_sum_keeps_partial_on_every_case(op: str, count: int) -> None:
    prove_keeps_partial(op, "reduce-sum-keeps-partial", count, "inputs")


def test_proof_reverse_of_a_pending_out_gives_x_the_pending_sum() -> None:
    # Paddle's reverse keeps the given out pending next to a whole x: the local sums of a whole x
    # are whole, so reducing them counts the result once per device (reduce-reverse-out)
    x = spec(MESH22, [8, 6], [-1, -1])
    out = spec(MESH22, [8], [0], {1: "sum"})
    ours = get_rule("sum").infer_reverse(x, out, [1], False)
    assert maps(ours) == ["[0,-1] P{1:sum}", "[0] P{1:sum}"]
    paddle = SpmdInfo([DistAttr(MESH22, [0, -1])], [DistAttr(MESH22, [0], {1: "sum"})])
    attrs = {"axis": [1], "keep_dim": False}
    assert execute("sum", [x], ours, attrs) == "ok"
    assert execute("sum", [x], paddle, attrs) == "wrong"
    c = next(c for c in iter_cases(default_case_paths(), ["sum"])
             if c["direction"] == "reverse" and c["outputs"][0]["partial"]
             and classify(c, call_engine(c)) is not None)
    assert classify(c, call_engine(c)) == "reduce-reverse-out"
