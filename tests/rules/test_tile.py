"""tile / expand / expand_as (expand_as_v2) / expand_as_grad: Paddle's behaviour, numpy's shapes
and values, kernels on sharded copies, typed errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from proofs import execute

import spmdrules as sr
from spmdrules.execution.executor import run_serial
from spmdrules.graph import ops
from spmdrules.graph.errors import ShapeError
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]])


def spec(shape: list[int], dm: list[int], partial: Any = None) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, dm, partial))


def dms(info: sr.SpmdInfo) -> list[list[int]]:
    return [list(a.dims_mapping) for a in (*info.inputs, *info.outputs)]  # type: ignore[union-attr]


def test_tile_replicates_repeated_dims_and_keeps_the_rest() -> None:
    tile = sr.get_rule("tile")
    assert dms(tile.infer_forward(spec([2, 4, 8, 8], [-1, -1, 0, 1]), [3, 2, 4, 4])) == [
        [-1, -1, -1, -1], [-1, -1, -1, -1]]
    assert dms(tile.infer_forward(spec([2, 4, 8], [0, -1, 1]), [1, 3, 1])) == [
        [0, -1, 1], [0, -1, 1]]
    # a prepended dim (repeats longer than the rank) keeps a wanted shard in reverse
    rev = tile.infer_reverse(spec([24, 24], [0, -1]), spec([3, 24, 24], [-1, -1, 0]), [3, 1, 1])
    assert dms(rev) == [[-1, 0], [-1, -1, 0]]
    part = tile.infer_forward(spec([10], [-1], {0: "sum"}), [4, 1])
    assert dms(part) == [[-1], [-1, -1]] and not part.outputs[0].partial  # type: ignore[union-attr]


def test_expand_as_follows_y_and_replicates_x_s_broadcast_dims() -> None:
    r = sr.get_rule("expand_as")
    info = r.infer_forward(spec([4, 1], [-1, -1]), spec([4, 24], [0, 1]), [4, 24])
    assert dms(info) == [[0, -1], [0, 1], [0, 1]]
    info = r.infer_forward(spec([1, 16], [0, 1]), spec([10, 16], [1, 0]), [10, 16])
    assert dms(info) == [[-1, 0], [1, 0], [1, 0]]
    assert sr.get_rule("expand_as_v2") is r


def test_expand_as_grad_is_pending_over_sharded_broadcast_dims() -> None:
    info = sr.get_rule("expand_as_grad").infer_forward(
        spec([1], [0]), spec([32, 2, 16, 3], [-1, -1, -1, 0]), [32, 2, 16, 3])
    assert dms(info) == [[-1], [-1, -1, -1, 0], [-1]]
    assert info.outputs[0].partial == {0: "sum"}  # type: ignore[union-attr]


def test_expand_keeps_x_s_shards_and_a_wanted_broadcast_shard() -> None:
    r = sr.get_rule("expand")
    assert dms(r.infer_forward(spec([4, 1], [0, -1]), [2, 4, 6])) == [[0, -1], [-1, 0, -1]]
    rev = r.infer_reverse(spec([4, 1], [-1, -1]), spec([2, 4, 6], [1, -1, 0]), [2, -1, 6])
    assert dms(rev) == [[-1, -1], [1, -1, 0]]
    x = spec([4, 1], [-1, -1])
    assert execute("expand", [x], rev, {"shape": [2, -1, 6]}) == "ok"


@pytest.mark.parametrize(("shape", "reps"), [((2, 3), [2, 1]), ((3,), [2, 2]), ((2, 1, 4), [3]),
                                            ((), [2, 3]), ((2, 3), [])])
def test_tile_is_numpy_s(shape: tuple[int, ...], reps: list[int]) -> None:
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    with Graph() as g:
        y = ops.tile(g.input("x", list(shape), "float64"), repeat_times=reps)
    want = np.tile(x, reps) if reps else x
    assert y.shape == want.shape
    np.testing.assert_array_equal(run_serial(g, {"x": x})[y.name], want)


def test_expand_and_expand_as_are_numpy_s_broadcast() -> None:
    x = np.arange(4.0).reshape(4, 1)
    with Graph() as g:
        t = g.input("x", [4, 1], "float64")
        a = ops.expand(t, shape=[2, -1, 3])
        b = ops.expand_as(t, g.input("y", [5, 4, 6], "float64"))
        c = ops.expand_as(t, None, target_shape=[4, 2])
    got = run_serial(g, {"x": x, "y": np.zeros((5, 4, 6))})
    np.testing.assert_array_equal(got[a.name], np.broadcast_to(x, (2, 4, 3)))
    np.testing.assert_array_equal(got[b.name], np.broadcast_to(x, (5, 4, 6)))
    np.testing.assert_array_equal(got[c.name], np.broadcast_to(x, (4, 2)))


@pytest.mark.parametrize(("op", "attrs", "match"), [
    ("tile", {"repeat_times": [2, 0]}, "repeat_times\\[1\\] is 0; each repeat must be >= 1"),
    ("expand", {"shape": [3]}, "fewer dims than 'x'"),
    ("expand", {"shape": [2, 3, 5]}, "'x' dim 0 has size 4, which cannot broadcast to 3"),
    ("expand", {"shape": [-1, 4, 1]}, "shape dim 0 is -1"),
])
def test_bad_repeats_and_targets_raise_typed_errors(op: str, attrs: dict[str, Any], match: str
                                                   ) -> None:
    with pytest.raises(sr.SpmdError, match=match):
        sr.get_rule(op).infer_forward(spec([4, 1], [0, -1]), **attrs)
    with Graph() as g, pytest.raises(ShapeError, match=rf"op 'o' \({op}\): x: "):
        g.add_op(op, [g.input("x", [4, 1])], attrs, name="o")


def test_repeating_sharded_kv_heads_keeps_the_heads_on_their_mesh_dim() -> None:
    # [b, s, kv, 1, d] tiled to [b, s, kv, groups, d]: the kv heads (on mesh dim 1) stay put
    k = spec([2, 8, 2, 1, 4], [0, -1, 1, -1, -1])
    attrs = {"repeat_times": [1, 1, 1, 2, 1]}
    info = sr.get_rule("tile").infer_forward(k, **attrs)
    assert dms(info) == [[0, -1, 1, -1, -1], [0, -1, 1, -1, -1]]
    assert execute("tile", [k], info, attrs) == "ok"


def test_a_block_of_x_repeated_is_not_a_block_of_the_result() -> None:
    x = spec([8], [0])
    wrong = sr.SpmdInfo([x.attr], [x.attr])
    assert execute("tile", [x], wrong, {"repeat_times": [2]}) == "wrong"
