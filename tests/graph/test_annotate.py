"""shard(tensor, mesh, spec): every spec form, open/closed dims, priorities, and bad annotations."""

from __future__ import annotations

from typing import Any

import pytest

import spmdrules as sr
from spmdrules.core.placements import Partial, Replicate, Shard
from spmdrules.graph.annotate import shard
from spmdrules.graph.annotation import OPEN, Annotation
from spmdrules.graph.errors import (
    AnnotationError,
    InvalidSpecError,
    MeshDimReusedError,
    SpecRankError,
    UnknownMeshDimError,
)
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
MESH3 = sr.ProcessMesh.from_shape([2, 2, 2], dim_names=["dp", "mp", "pp"])


def tensor(shape: list[int]) -> Tensor:
    return Graph().input("x", shape)


@pytest.mark.parametrize(
    "spec",
    [
        [Shard(0), Replicate()],  # placements per mesh dim
        [0, -1],  # dims_mapping
        ("dp", None),  # mesh-dim names per tensor dim (PartitionSpec)
        [("dp",), ()],  # tuples per dim
        sr.DistAttr(MESH, [0, -1]),  # a ready attribute
    ],
)
def test_spec_forms_agree(spec: Any) -> None:
    x = shard(tensor([8, 16]), MESH, spec)
    assert x.attr == sr.DistAttr(MESH, [0, -1])
    assert x.annotation is not None
    assert x.annotation.dims == ((0,), ()) and x.annotation.closed == (True, True)
    assert x.annotation.priority == 0 and x.annotation.spec_str() == "('dp', None)"


def test_co_shard_forms_agree() -> None:
    want = sr.DistAttr(MESH, multi_dims_mapping=[[0, 1], []])
    assert shard(tensor([8, 16]), MESH, [("dp", "mp"), None]).attr == want
    assert shard(tensor([8, 16]), MESH, [(0, 1), -1]).attr == want
    assert shard(tensor([8, 16]), MESH, [Shard(0), Shard(0, order=1)]).attr == want
    minor_first = shard(tensor([8, 16]), MESH, [("mp", "dp"), None]).attr
    assert minor_first is not None and minor_first.multi_dims_mapping == ((1, 0), ())
    assert shard(tensor([8, 16]), MESH, [Shard(0, order=1), Shard(0)]).attr == minor_first


def test_partial_forms_agree() -> None:
    want = sr.DistAttr(MESH, [0, -1], partial={1: "sum"})
    assert shard(tensor([8, 16]), MESH, [Shard(0), Partial()]).attr == want
    assert shard(tensor([8, 16]), MESH, ("dp", None), partial={"mp": "sum"}).attr == want
    assert shard(tensor([8, 16]), MESH, ("dp", None), partial=["mp"]).attr == want
    assert shard(tensor([8, 16]), MESH, [0, -1], partial="mp").attr == want
    assert shard(tensor([8, 16]), MESH, [0, -1], partial={1: Partial("sum")}).attr == want
    mx = shard(tensor([8, 16]), MESH, [Replicate(), Partial("max")])
    assert mx.attr is not None and mx.attr.partial == {1: "max"}
    assert repr(mx.annotation) == "Annotation((None, None), partial={'mp': 'max'}, priority=0)"


def test_open_and_closed_dims() -> None:
    x = shard(tensor([8, 16, 4]), MESH, ("dp", OPEN, ...))
    ann = x.annotation
    assert ann is not None
    assert ann.dims == ((0,), None, None) and ann.closed == (True, False, False)
    assert ann.open_dims == (1, 2) and ann.is_open(1) and not ann.is_fully_closed
    assert x.attr == sr.DistAttr(MESH, [0, -1, -1])  # open dims seed as replicated
    assert ann.spec_str() == "('dp', ?, ?)"

    hints = shard(tensor([8, 16]), MESH, ("dp", "mp"), closed=False).annotation
    assert hints is not None and hints.closed == (False, False) and hints.dims == ((0,), (1,))
    assert hints.spec_str() == "('dp'?, 'mp'?)"

    some = shard(tensor([8, 16]), MESH, ("dp", None), closed=[-1]).annotation
    assert some is not None and some.closed == (False, True)

    whole = shard(tensor([8, 16]), MESH).annotation  # no spec: placed on the mesh, all open
    assert whole is not None and whole.open_dims == (0, 1) and whole.mesh == MESH


def test_priority_and_replacement() -> None:
    x = tensor([8, 16])
    shard(x, MESH, ("dp", None), priority=5)
    assert x.annotation is not None and x.annotation.priority == 5
    shard(x, MESH, (None, "mp"), priority=-1)  # a second call replaces the first
    assert x.annotation == Annotation(MESH, [(), (1,)], [True, True], (), -1)
    assert x.graph.annotated() == (x,)


def test_shard_returns_the_handle_for_chaining() -> None:
    with Graph() as g:
        x = shard(g.input("x", [8, 4]), MESH, ("dp", None))
    assert g.tensor("x") is x


def test_meshes_may_differ_per_tensor() -> None:
    stage1 = sr.ProcessMesh([4, 5, 6, 7], dim_names=["mp"])
    with Graph() as g:
        a = shard(g.input("a", [8, 4]), MESH, ("dp", None))
        b = shard(g.input("b", [8, 4]), stage1, (None, "mp"))
    assert a.annotation is not None and b.annotation is not None
    assert a.annotation.mesh == MESH and b.annotation.mesh == stage1


# ---- bad annotations ----------------------------------------------------------------------
def test_rank_mismatch() -> None:
    msg = r"shard\('x'\): spec \['dp'\] has 1 entries but tensor 'x' \[8, 16\] has rank 2"
    with pytest.raises(SpecRankError, match=msg):
        shard(tensor([8, 16]), MESH, ["dp"])
    with pytest.raises(SpecRankError, match="3 placements for the 2-d mesh"):
        shard(tensor([8, 16]), MESH, [Shard(0), Replicate(), Replicate()])
    with pytest.raises(SpecRankError, match=r"Shard\(2\) on mesh dim 'dp' names a tensor dim"):
        shard(tensor([8, 16]), MESH, [Shard(2), Replicate()])
    with pytest.raises(SpecRankError, match="has 3 dims but tensor 'x'"):
        shard(tensor([8, 16]), MESH3, sr.DistAttr(MESH3, [0, -1, -1]))


def test_unknown_mesh_dim() -> None:
    with pytest.raises(UnknownMeshDimError, match=r"tensor dim 0 names mesh dim 'pd'.*did you mean .*'dp'"):
        shard(tensor([8, 16]), MESH, ("pd", None))
    with pytest.raises(UnknownMeshDimError, match="tensor dim 1 uses mesh dim 2, out of range"):
        shard(tensor([8, 16]), MESH, [0, 2])
    with pytest.raises(UnknownMeshDimError, match="partial names mesh dim 'tp'"):
        shard(tensor([8, 16]), MESH, [0, -1], partial={"tp": "sum"})


def test_mesh_dim_used_twice() -> None:
    msg = "mesh dim 'dp' splits both tensor dim 0 and tensor dim 1 of 'x'"
    with pytest.raises(MeshDimReusedError, match=msg):
        shard(tensor([8, 16]), MESH, ("dp", "dp"))
    with pytest.raises(MeshDimReusedError, match="tensor dim 0 lists a mesh dim twice"):
        shard(tensor([8, 16]), MESH, [("dp", "dp"), None])
    with pytest.raises(MeshDimReusedError, match="mesh dim 'dp' is partial but also splits tensor dim 0"):
        shard(tensor([8, 16]), MESH, ("dp", None), partial={"dp": "sum"})


def test_invalid_specs() -> None:
    x = tensor([8, 16])
    with pytest.raises(InvalidSpecError, match="mixes placements with per-dim entries"):
        shard(x, MESH, [Shard(0), None])
    with pytest.raises(InvalidSpecError, match="is not a list"):
        shard(x, MESH, "dp")
    with pytest.raises(InvalidSpecError, match=r"entry 1\.5 is not a mesh dim"):
        shard(x, MESH, [0, 1.5])
    with pytest.raises(InvalidSpecError, match="reduce type 'mean'"):
        shard(x, MESH, [0, -1], partial={"mp": "mean"})
    with pytest.raises(InvalidSpecError, match=r"Partial\('sum'\) in the spec but 'max'"):
        shard(x, MESH, [Shard(0), Partial()], partial={"mp": "max"})
    with pytest.raises(InvalidSpecError, match="priority must be an int"):
        shard(x, MESH, [0, -1], priority=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidSpecError, match="first argument must be a graph Tensor"):
        shard("x", MESH, [0, -1])  # type: ignore[arg-type]
    with pytest.raises(InvalidSpecError, match="mesh must be a ProcessMesh"):
        shard(x, [[0, 1]], [0, -1])  # type: ignore[arg-type]
    with pytest.raises(InvalidSpecError, match="tensor dim 1 is OPEN in the spec but listed in closed"):
        shard(x, MESH, [0, OPEN], closed=[1])
    with pytest.raises(InvalidSpecError, match="closed lists 5"):
        shard(x, MESH, [0, -1], closed=[5])
    with pytest.raises(InvalidSpecError, match="not on the given mesh"):
        shard(x, MESH3, sr.DistAttr(MESH, [0, -1]))
    assert x.annotation is None  # a failed call leaves the tensor as it was


def test_annotation_errors_are_typed_graph_errors() -> None:
    for cls in (SpecRankError, UnknownMeshDimError, MeshDimReusedError, InvalidSpecError):
        assert issubclass(cls, AnnotationError) and issubclass(cls, sr.SpmdError)


def test_annotation_is_immutable() -> None:
    x = shard(tensor([8, 16]), MESH, ("dp", None))
    with pytest.raises(AttributeError):
        x.annotation.priority = 3  # type: ignore[union-attr]


def test_reset_attrs_returns_to_the_annotations() -> None:
    with Graph() as g:
        x = shard(g.input("x", [8, 4]), MESH, ("dp", OPEN))
        y = g.input("y", [8, 4])
    x.attr = sr.DistAttr(MESH, [0, 1])  # as completion would write it
    y.attr = sr.DistAttr(MESH, [0, -1])
    g.reset_attrs()
    assert x.attr == sr.DistAttr(MESH, [0, -1]) and y.attr is None
    assert x.annotation is not None and x.annotation.open_dims == (1,)


def test_splitting_a_size_one_dim_is_refused_at_shard() -> None:
    """issue 16, item 5: the error came later, from the planner, naming neither the tensor, the
    op nor the annotation."""
    with Graph() as g:
        x = g.input("x", [1, 1, 1])
        with pytest.raises(sr.SpmdError, match=r"shard\('x'\): tensor dim 0 of 'x' \[1, 1, 1\] "
                                                r"has size 1, which cannot be split over mesh "
                                                r"dims \['dp'\]; replicate it"):
            shard(x, MESH, ("dp", None, "mp"))
        with pytest.raises(sr.SpmdError, match=r"dim 1 .* mesh dims \['dp', 'mp'\]"):
            shard(g.input("y", [4, 1]), MESH, (None, ("dp", "mp")))
        with pytest.raises(sr.SpmdError, match="has size 1"):
            shard(g.input("z", [1, 4]), MESH, [Shard(0), Replicate()])
        one = sr.ProcessMesh([[0, 1]], dim_names=["a", "b"])  # a mesh dim of size 1: no split
        assert shard(g.input("w", [1, 4]), one, ("a", "b")).annotation is not None


def test_a_planning_error_names_the_tensor_and_the_op() -> None:
    from spmdrules.completion.reshard_plans import ReshardError
    from spmdrules.completion.result import ReshardEdge

    # a pending sum over an uneven co-shard (6 over dp, mp: blocks 2, 2, 1, 1) to another
    # split: resolving it leaves an uneven state that is neither end of the plan. (Replicated to
    # [0, -1, 1] of a [1, 1, 1] tensor, the earlier example, now plans: one slice over dp, mp.)
    src = sr.DistAttr(MESH3, multi_dims_mapping=[(0, 1)], partial={2: "sum"})
    edge = ReshardEdge("t", "matmul_3", "operand", src, sr.DistAttr(MESH3, [2], {0: "sum"}),
                       (6,), "float32")
    with pytest.raises(ReshardError, match=r"^tensor 't' needed by op 'matmul_3': plan_reshard"):
        edge.plan()
