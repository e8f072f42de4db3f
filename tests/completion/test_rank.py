"""Ranks (spmdrules.completion.rank): the order in which annotations and inferred offers claim a
tensor, as docs/completion.md states the policy."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import spmdrules as sr
from spmdrules import ops
from spmdrules.completion import complete
from spmdrules.completion.rank import WEAK, annotation, inferred, is_annotation, priority
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

PRIORITIES = st.integers(-(1 << 20), 1 << 20)


@given(PRIORITIES)
def test_an_annotation_beats_an_inference_of_its_own_priority(p: int) -> None:
    a = annotation(p)
    assert is_annotation(a) and not is_annotation(inferred(a))
    assert inferred(a) < a
    assert priority(a) == priority(inferred(a)) == p
    assert inferred(inferred(a)) == inferred(a)  # an inference of an inference: the same claim


@given(PRIORITIES, PRIORITIES)
def test_higher_priority_wins_whatever_its_kind(p: int, q: int) -> None:
    lo, hi = min(p, q), max(p, q)
    if lo == hi:
        return
    # an inference of the higher priority outranks an annotation of the lower one
    assert annotation(lo) < inferred(annotation(hi))
    assert inferred(annotation(lo)) < inferred(annotation(hi))


@given(PRIORITIES)
def test_the_weak_rank_is_below_every_claim(p: int) -> None:
    assert WEAK < inferred(annotation(p)) < annotation(p)
    assert not is_annotation(WEAK)


def test_origins_and_refusals_read_the_priority_back() -> None:
    mesh = sr.ProcessMesh([0, 1, 2, 3], dim_names=["x"])
    with Graph("ranks") as g:
        a = g.input("a", [8, 8])
        b = g.input("b", [8, 8])
        c = ops.add(a, b, name="c")
        d = ops.relu(c, name="d")
    shard(a, mesh, ("x", None), priority=3)
    shard(b, mesh, (None, "x"), priority=1)
    shard(d, mesh, (None, "x"), priority=2)
    r = complete(g)
    assert (r.origin("a").rank, r.origin("b").rank, r.origin("d").rank) == (
        annotation(3), annotation(1), annotation(2))
    # c is inferred from a, the op's best known operand: a's priority, as an inference
    assert r.origin("c").kind == "forward" and r.origin("c").rank == inferred(annotation(3))
    assert r.origin("c").priority == 3
    assert r.attr("c").mapping_str() == "[0,-1]"
    # d's reverse offer to c carried d's priority as an inference, and lost to a's
    (lost,) = r.rejected("c")
    assert (lost.reason, lost.offer.op, lost.offer.kind) == ("priority", "d", "reverse")
    assert lost.detail == "it carried priority 2 (inferred) against 3"
