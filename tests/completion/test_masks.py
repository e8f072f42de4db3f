"""Masked pending sums in completion (spmdrules.completion.masks): lookups from row-split tables
stay masked through the ops that keep zeros, no reshard is planned where a mask is only dropped,
and two masks pair in a product only when completion proves them one lookup's; every plan runs
equal to serial, forward and reverse (tests/support/sharded_runs.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sharded_runs import assert_simulated_equals_serial

import spmdrules as sr
from spmdrules import ops
from spmdrules.completion import complete
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
E, T, D = 4, 6, 5


def experts(same_index: bool) -> Graph:
    """Two expert tables split on mp by rows, each row looked up per token copy; the looked-up
    rows are multiplied, activated and summed: by one index (a gated expert's two projections)
    or by two."""
    with Graph("lookups") as g:
        w1, w2 = g.param("w1", [E, D], "float64"), g.param("w2", [E, D], "float64")
        i1 = g.input("ids", [T], "int64")
        i2 = i1 if same_index else g.input("ids2", [T], "int64")
        a = ops.index_select(w1, i1, axis=0, name="a")
        b = ops.index_select(w2, i2, axis=0, name="b")
        c = ops.multiply(a, b, name="c")
        d = ops.silu(c, name="d")
        ops.sum(d, axis=[0, 1], keep_dim=False, name="loss")
    for w in (w1, w2):
        shard(w, MESH, ("mp", None), priority=2)
    return g


def feeds(g: Graph) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {t.name: rng.integers(0, E, size=t.shape) for t in g.inputs}
    out.update({t.name: rng.standard_normal(t.shape) for t in g.params})
    return out


def test_one_index_s_lookups_pair_and_stay_masked_to_the_one_reduction() -> None:
    g = experts(same_index=True)
    r = complete(g)
    for name in ("a", "b", "c", "d"):
        assert r.attr(name).masks == {1: 0}, (name, r.attr(name))
    # the tables stay split and nothing moves: the loss is left a pending sum over mp
    assert r.reshards == () and r.attr("loss").partial == {1: "sum"}
    assert_simulated_equals_serial(g, feeds(g), what="same index: ")


def test_lookups_by_two_indices_do_not_pair() -> None:
    g = experts(same_index=False)
    r = complete(g)
    assert r.attr("a").masks == {1: 0} and r.attr("b").masks == {1: 0}
    # a row of a and the same row of b may be held by different processes: the product is no
    # masked sum, and silu (not linear) needs its operand whole
    assert not r.attr("c").masks and not r.attr("d").partial
    assert {(e.tensor, e.op) for e in r.reshards} & {("a", "c"), ("b", "c"), ("c", "d")}
    assert_simulated_equals_serial(g, feeds(g), what="two indices: ")


def test_a_consumer_that_knows_no_masks_reads_the_masked_sum_without_a_reshard() -> None:
    with Graph("lookup-reshape") as g:
        w = g.param("w", [E, D], "float64")
        i = g.input("ids", [T], "int64")
        a = ops.index_select(w, i, axis=0, name="a")
        b = ops.reshape(a, shape=[T * D], name="b")  # merges the masked dim: a plain sum after
        ops.sum(b, axis=[0], keep_dim=False, name="loss")
    shard(w, MESH, ("mp", None), priority=2)
    r = complete(g)
    assert r.attr("a").masks == {1: 0} and r.attr("b").partial == {1: "sum"}
    assert not r.attr("b").masks
    assert r.reshards == ()
    assert_simulated_equals_serial(g, feeds(g), what="reshape: ")


def test_a_model_file_keeps_the_masks_of_a_completed_graph() -> None:
    from spmdrules.graph.exchange import dumps, loads

    g = experts(same_index=True)
    complete(g)
    back = loads(dumps(g))
    for t in g.tensors:
        assert back.tensor(t.name).attr == t.attr, t.name
    assert back.tensor("c").attr.masks == {1: 0}


@pytest.mark.mpi
def test_lookups_from_split_bool_int_and_float_tables_run_on_4_mpi_ranks() -> None:
    # a bool table's pieces sum as numpy adds bools (a logical or), which MPI's sum cannot send
    from sharded_runs import assert_mpi_equals_serial

    with Graph("typed-lookups") as g:
        i = g.input("ids", [T], "int64")
        for dt in ("bool", "int64", "float32"):
            w = g.input(f"w_{dt}", [E, D], dt)
            a = ops.index_select(w, i, axis=0, name=f"a_{dt}")
            (ops.logical_not if dt == "bool" else ops.abs)(a, name=f"out_{dt}")
            shard(w, MESH, ("mp", None), priority=2)
    r = complete(g)
    assert all(r.attr(f"a_{dt}").masks == {1: 0} for dt in ("bool", "int64", "float32"))
    rng = np.random.default_rng(0)
    feeds: dict[str, Any] = {"ids": rng.integers(0, E, T)}
    feeds.update({f"w_{dt}": rng.integers(0, 2, (E, D)).astype(dt)
                  for dt in ("bool", "int64", "float32")})
    assert_mpi_equals_serial(g, feeds)
