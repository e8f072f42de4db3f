"""ProcessMesh, DistAttr, TensorSpec and the placements view."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

import spmdrules as sr
from spmdrules import DistAttr, Partial, ProcessMesh, Replicate, Shard, TensorSpec

MESH = ProcessMesh([[0, 1, 2], [3, 4, 5]], dim_names=["dp", "mp"])


def test_mesh_contract() -> None:
    assert MESH.shape == (2, 3)
    assert MESH.process_ids == (0, 1, 2, 3, 4, 5)
    assert MESH.dim_names == ("dp", "mp")
    assert MESH.dim_size("mp") == 3
    assert MESH.coords(4) == (1, 1)
    assert ProcessMesh([[0, 1, 2], [3, 4, 5]], ["dp", "mp"]) == MESH
    assert hash(ProcessMesh([[0, 1, 2], [3, 4, 5]], ["dp", "mp"])) == hash(MESH)
    assert ProcessMesh([[0, 1, 2], [3, 4, 5]]) != MESH  # names are part of the value
    assert ProcessMesh.from_shape([2, 2], [3, 2, 1, 0]).process_ids == (3, 2, 1, 0)


@pytest.mark.parametrize(
    ("ids", "names", "fragment"),
    [
        ([[0, 1], [2]], None, "ragged"),
        ([0, 1, 1], None, "more than once"),
        ([0, 1], ["a", "b"], "dim_names"),
        ([], None, "empty"),
        ([0, "x"], None, "not an integer"),
        ([[0, 1], [2, 3]], ["a", "a"], "distinct"),
    ],
)
def test_mesh_errors(ids: object, names: list[str] | None, fragment: str) -> None:
    with pytest.raises(sr.InvalidMeshError, match=fragment):
        ProcessMesh(ids, names)


def test_dist_attr_contract() -> None:
    attr = DistAttr(MESH, dims_mapping=[0, -1], partial={1: "sum"})
    assert attr.dims_mapping == (0, -1)
    assert attr.multi_dims_mapping == ((0,), ())
    assert attr.partial == {1: "sum"}
    assert attr == DistAttr(MESH, multi_dims_mapping=[[0], []], partial={1: "sum"})
    assert len({attr, DistAttr(MESH, [0, -1], {1: "sum"})}) == 1
    with pytest.raises(AttributeError):
        attr.mesh = MESH  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(attr)) == attr


def test_names_and_list_partial() -> None:
    attr = DistAttr(MESH, ["mp", None], partial=["dp"])
    assert attr.dims_mapping == (1, -1)
    assert attr.partial == {0: "sum"}


def test_co_shard_is_never_lossy() -> None:
    attr = DistAttr(MESH, multi_dims_mapping=[[1, 0], []])
    assert attr.multi_dims_mapping == ((1, 0), ())
    with pytest.raises(sr.CoShardedDimError, match="tensor dim 0 is co-sharded"):
        _ = attr.dims_mapping
    assert attr.placements == (Shard(0, order=1), Shard(0, order=0))
    assert DistAttr.from_placements(MESH, attr.placements, ndim=2) == attr


@pytest.mark.parametrize("reduce_type", sr.REDUCE_TYPES)
def test_every_reduce_type(reduce_type: str) -> None:
    attr = DistAttr(MESH, [-1, 1], {0: reduce_type})
    assert attr.partial == {0: reduce_type}
    assert attr.placements == (Partial(reduce_type), Shard(1))


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"dims_mapping": [0, 0]}, "mesh dim 0 shards both tensor dim 0 and tensor dim 1"),
        ({"dims_mapping": [2, -1]}, "mesh dim 2 is out of range"),
        ({"dims_mapping": [0, -1], "partial": {0: "sum"}}, "mesh dim 0 is partial but also shards"),
        ({"dims_mapping": [-1], "partial": {0: "mean"}}, "reduce type 'mean'"),
        ({"dims_mapping": ["tp"]}, "'tp' is not a dim name"),
        ({}, "exactly one of"),
        # str.isdigit accepts '¹' and '١', int() does not: a typed error, never a ValueError
        ({"dims_mapping": [-1], "partial": {"¹": "sum"}}, "'¹' is not a dim name"),
        ({"dims_mapping": [-1], "partial": {"١": "sum"}}, "'١' is not a dim name"),
    ],
)
def test_dist_attr_errors(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(sr.InvalidDistAttrError, match=fragment):
        DistAttr(MESH, **kwargs)  # type: ignore[arg-type]


def test_tensor_spec() -> None:
    spec = TensorSpec([64, 36], DistAttr(MESH, [0, -1]))
    assert spec.shape == (64, 36)
    assert spec == TensorSpec((64, 36), DistAttr(MESH, [0, -1]))
    with pytest.raises(sr.InvalidDistAttrError, match="shape \\[64\\] has 1 dims but the mapping"):
        TensorSpec([64], DistAttr(MESH, [0, -1]))
    with pytest.raises(sr.InvalidDistAttrError, match="shape dim 1 is -3"):
        TensorSpec([4, -3], DistAttr(MESH, [0, -1]))


def test_placements_round_trip_example() -> None:
    attr = DistAttr.from_placements(MESH, [Replicate(), Shard(1)], ndim=3)
    assert attr.dims_mapping == (-1, 1, -1)
    assert attr.placements == (Replicate(), Shard(1))


@st.composite
def attrs(draw: st.DrawFn) -> DistAttr:
    ndim_mesh = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 3), min_size=ndim_mesh, max_size=ndim_mesh))
    mesh = ProcessMesh.from_shape(shape)
    ndim = draw(st.integers(0, 4))
    placements = []
    for _ in range(ndim_mesh):
        kind = draw(st.sampled_from(["S", "R", "P"]))
        if kind == "S" and ndim > 0:
            placements.append(Shard(draw(st.integers(0, ndim - 1)), draw(st.integers(0, 2))))
        elif kind == "P":
            placements.append(Partial(draw(st.sampled_from(sr.REDUCE_TYPES))))
        else:
            placements.append(Replicate())
    return DistAttr.from_placements(mesh, placements, ndim)


@given(attrs())
def test_placements_and_mapping_agree(attr: DistAttr) -> None:
    again = DistAttr.from_placements(attr.mesh, attr.placements, attr.ndim)
    assert again == attr
    rebuilt = DistAttr(attr.mesh, multi_dims_mapping=attr.multi_dims_mapping, partial=attr.partial)
    assert rebuilt == attr and hash(rebuilt) == hash(attr)
