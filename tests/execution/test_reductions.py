"""Pending reductions resolved as serial numpy resolves them (issue 23): NaN, infinities and
signed zeros for every reduce type and dtype on both executors (item 6), and the one place they
differ from serial numpy by design, a pending sum through a linear op (item 11)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import mpirun
import numpy as np
import pytest
import reduction_matrix as rm

import spmdrules as sr
from spmdrules import ops
from spmdrules.completion import complete
from spmdrules.core.errors import SpmdError
from spmdrules.execution.executor import run_serial
from spmdrules.execution.lowering import lower
from spmdrules.execution.simulated import all_reduce, reduce_scatter, run_simulated
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

HERE = Path(__file__).resolve().parent


def test_the_simulated_mesh_reduces_as_serial_numpy_on_every_process() -> None:
    pytest.importorskip("ml_dtypes")
    g, feeds, todo = rm.build()
    program = lower(complete(g))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the NaN and inf are the point
        res = run_simulated(program, feeds)
        serial = run_serial(g, feeds)
    blocks: dict[int, dict[str, Any]] = {}
    for buf, by_pid in res.blocks.items():
        for pid, b in by_pid.items():
            blocks.setdefault(pid, {})[buf] = b
    assert rm.check(program, todo, serial, blocks) == []


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_mpi_ranks_reduce_as_serial_numpy_and_agree_bit_for_bit() -> None:
    """Every case of the matrix in one ``mpiexec -n 4`` job: groups of 2 (both dims of a 2x2
    mesh), 3 and 4 ranks; all-reduce and reduce-scatter."""
    pytest.importorskip("ml_dtypes")
    res = mpirun.mpirun(4, [str(HERE / "reduction_cases.py")], timeout=120)
    detail = f"{res.job.describe()}\n{res.stdout[-4000:]}\n{res.stderr[-3000:]}"
    assert res.returncode == 0 and not res.timed_out, detail
    failures = [line for line in res.stdout.splitlines() if line.startswith("FAIL ")]
    assert failures == [], "\n".join(failures[:40])
    [checked] = [line.split() for line in res.stdout.splitlines() if line.startswith("CHECKED")]
    assert int(checked[1]) == len(list(rm.cases())) and int(checked[2]) > int(checked[1])


def _scaled(replicate_first: bool) -> Graph:
    """relu((x @ w) * s), x's columns and w's rows cut over 2 processes: x @ w a pending sum."""
    mesh = sr.ProcessMesh([0, 1], dim_names=["mp"])
    with Graph("scaled") as g:
        x = g.input("x", [2, 4], "float64")
        w = g.param("w", [4, 2], "float64")
        s = g.input("s", [2, 2], "float64")
        h = ops.matmul(x, w, name="h")
        ops.relu(ops.multiply(h, s, name="hs"), name="out")
    shard(x, mesh, (None, "mp"))
    shard(w, mesh, ("mp", None))
    if replicate_first:
        shard(h, mesh, (None, None))
    return g


def test_a_pending_sum_times_inf_is_nan_where_a_piece_is_zero() -> None:
    """A numerics limit (docs/execution.md, "Numerics"): the multiply runs on the pieces 2 and 0
    of row 0, and 0 * inf is NaN; serial numpy multiplies the sum 2 by inf. Pinned, so that a
    change to it is noticed; annotating the pending sum replicated sums first."""
    feeds = {"x": np.array([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]),
             "w": np.ones((4, 2)), "s": np.full((2, 2), np.inf)}
    g = _scaled(False)
    r = complete(g)
    assert r.attr("hs").partial == {0: "sum"}  # the multiply kept the pending sum
    program = lower(r)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = run_simulated(program, feeds)
        pending = res.fetch("out")
        summed = run_simulated(lower(complete(_scaled(True))), feeds).fetch("out")
    # the pieces: process 0 holds 2 * inf everywhere, process 1 holds 0 * inf in row 0
    np.testing.assert_array_equal(res.blocks["hs"][0], np.full((2, 2), np.inf))
    np.testing.assert_array_equal(res.blocks["hs"][1], [[np.nan, np.nan], [np.inf, np.inf]])
    np.testing.assert_array_equal(pending, [[np.nan, np.nan], [np.inf, np.inf]])
    np.testing.assert_array_equal(run_serial(g, feeds)["out"], np.full((2, 2), np.inf))
    np.testing.assert_array_equal(summed, np.full((2, 2), np.inf))
    doc = (HERE.parents[1] / "docs" / "execution.md").read_text()
    assert "**A pending sum through a linear op.**" in doc  # the limit is where users read


@pytest.mark.parametrize(("dtype", "kept"), [("float64", 1), ("float32", 1), ("float16", 0)])
def test_a_tie_of_signed_zeros_keeps_the_operand_numpy_keeps(dtype: str, kept: int) -> None:
    """np.maximum(-0.0, 0.0) is 0.0 for float64 and float32 (the later operand of a tie) but
    -0.0 for float16 (the earlier): the fold runs in group order in numpy's own dtype."""
    pieces = [np.array([-0.0, 0.0], dtype=dtype), np.array([0.0, -0.0], dtype=dtype)]
    for rt, fn in (("max", np.max), ("min", np.min)):
        want = fn(np.stack(pieces), axis=0)
        assert np.signbit(want).tolist() == np.signbit(pieces[kept]).tolist()  # numpy's rule
        outs, _, _ = all_reduce(pieces, rt)
        for out in outs:
            assert np.signbit(out).tolist() == np.signbit(want).tolist()
            assert np.signbit(out).tolist() == np.signbit(pieces[kept]).tolist()


def test_an_average_of_integers_is_taken_in_float64_as_numpy_does() -> None:
    pieces = [np.full(4, 100, dtype=np.int8)] * 4  # their sum, 400, does not fit an int8
    outs, _, _ = all_reduce(pieces, "avg")
    parts, _, _ = reduce_scatter(pieces, "avg", [(slice(i, i + 1),) for i in range(4)])
    assert all(o.dtype == np.int8 and o.tolist() == [100] * 4 for o in outs)
    assert [p.tolist() for p in parts] == [[100]] * 4


def test_an_unknown_reduce_type_is_a_typed_error() -> None:
    from spmdrules.runtime.reduce_ops import reduce_in_order

    with pytest.raises(SpmdError, match="unknown reduce type 'median'; use one of sum, avg"):
        reduce_in_order([np.zeros(2)], "median")
