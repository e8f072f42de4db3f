"""nearest_interp and bilinear_interp (issue 26): Paddle has no SPMD rule for them. Batch and
channels keep their shards; a spatial split is kept where each output block reads its own input
block and a halo of its neighbours' rows (nearest at an integer scale over even blocks none,
bilinear one row each side), refused where it would read past the neighbouring block, and ended
where the output is shorter than its pieces. The attributes are Paddle's, checked."""

from __future__ import annotations

import pytest

import spmdrules as sr
from spmdrules.engine.resampling import resampling
from spmdrules.engine.windows import block_halos

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
LINE = sr.ProcessMesh([0, 1, 2, 3], dim_names=["h"])


def _x(shape: list[int], mapping: list[int], mesh: sr.ProcessMesh = MESH) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(mesh, mapping))


@pytest.mark.parametrize("op", ["nearest_interp", "bilinear_interp"])
def test_batch_channels_and_h_keep_their_shards(op: str) -> None:
    info = sr.get_rule(op).infer_forward(_x([4, 6, 8, 8], [0, -1, 1, -1]), scale=[2.0, 2.0],
                                         align_corners=False, align_mode=0)
    assert info.inputs[0].dims_mapping == info.outputs[0].dims_mapping == (0, -1, 1, -1)
    chan = sr.get_rule(op).infer_forward(_x([4, 6, 8, 8], [-1, 0, -1, -1]), out_h=5, out_w=3)
    assert chan.outputs[0].dims_mapping == (-1, 0, -1, -1)
    back = sr.get_rule(op).infer_reverse(_x([4, 6, 8, 8], [-1, -1, -1, -1]),
                                          _x([4, 6, 16, 16], [1, -1, -1, 0]), out_h=16, out_w=16)
    assert back.inputs[0].dims_mapping == (1, -1, -1, 0)


def test_halos_nearest_none_at_integer_scale_bilinear_one_row_each_side() -> None:
    """8 rows doubled on 4 processes: nearest reads its own 2 rows; bilinear (half-pixel and
    align_corners) one row of each neighbour; an uneven split (7 rows) makes nearest borrow."""
    def halos(op: str, n: int, **attrs: object) -> list[tuple[int, int]]:
        (r,) = resampling(op, [n], {"out_w": 2 * n, **attrs})
        return block_halos(op, "x", 2, n, 2 * n, r, 4)

    assert halos("nearest_interp", 8, align_corners=False) == [(0, 0)] * 4
    assert halos("bilinear_interp", 8, align_corners=False, align_mode=0) == \
        [(0, 1), (1, 1), (1, 1), (1, 0)]
    assert halos("bilinear_interp", 8, align_corners=True) == [(0, 1), (1, 1), (1, 1), (1, 0)]
    # 7 rows (2, 2, 2, 1) to 14 (4, 4, 3, 3): block 3's outputs 11..13 read row 5, block 2's
    assert halos("nearest_interp", 7, align_corners=False) == [(0, 0), (0, 0), (0, 0), (1, 0)]


def test_reading_past_the_neighbour_is_refused_and_a_short_output_ends_the_split() -> None:
    # 4 rows on 4 to 6, asymmetric (source 2j/3 in float32): output block 1 (rows 2, 3) reads
    # input rows 1..3, past its right neighbour's row 2
    with pytest.raises(sr.SpmdError, match="neighbouring block"):
        sr.get_rule("bilinear_interp").infer_forward(
            _x([1, 1, 4, 2], [-1, -1, 0, -1], LINE), out_h=6, out_w=2, align_corners=False,
            align_mode=1)
    rule = sr.get_rule("nearest_interp")
    # 8 rows on 4 to 2: the output is shorter than its pieces, so H is read whole
    info = rule.infer_forward(_x([1, 1, 8, 2], [-1, -1, 0, -1], LINE), out_h=2, out_w=2)
    assert info.inputs[0].dims_mapping == info.outputs[0].dims_mapping == (-1, -1, -1, -1)


@pytest.mark.parametrize(("op", "shape", "attrs", "match"), [
    ("bilinear_interp", [2, 3, 4], {"out_w": 4}, "rank 3"),
    ("nearest_interp", [2, 3, 4, 4], {"out_h": 4, "out_w": 4, "data_format": "NCDHW"},
     "data_format"),
    ("nearest_interp", [2, 3, 4, 4], {}, "must be >= 1"),
    ("nearest_interp", [2, 3, 4, 4], {"scale": [2.0, -1.0]}, "positive"),
    ("nearest_interp", [2, 3, 4, 4], {"scale": [2.0, 2.0, 2.0]}, "positive"),
    ("nearest_interp", [2, 3, 4, 4], {"scale": [float("nan")]}, "finite positive"),
    ("bilinear_interp", [2, 3, 4, 4], {"scale": [2.0, float("inf")]}, "finite positive"),
    ("bilinear_interp", [2, 3, 4, 4], {"out_h": 8, "out_w": 8, "align_mode": 2}, "align_mode"),
    ("bilinear_interp", [2, 3, 4, 4], {"out_h": 8, "out_w": 8, "interp_method": "bicubic"},
     "interp_method"),
])
def test_bad_attributes_are_typed_errors(op: str, shape: list[int], attrs: dict[str, object],
                                         match: str) -> None:
    with pytest.raises(sr.SpmdError, match=match):
        sr.get_rule(op).infer_forward(_x(shape, [-1] * len(shape)), **attrs)


def test_graph_shape_inference_names_the_node_and_the_fix() -> None:
    from spmdrules import ops
    from spmdrules.graph.graph import Graph

    with Graph("g") as g:
        x = g.input("x", [1, 2, 4, 4], "float32")
        with pytest.raises(sr.SpmdError, match=r"'up'.*must be >= 1.*output size"):
            ops.nearest_interp(x, name="up")


def test_reverse_checks_the_output_against_the_attributes() -> None:
    with pytest.raises(sr.SpmdError, match="spatial lengths"):
        sr.get_rule("nearest_interp").infer_reverse(
            _x([1, 1, 4, 4], [-1] * 4), _x([1, 1, 9, 8], [-1] * 4), scale=[2.0])
