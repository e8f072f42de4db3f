"""Lowering: layouts as Cartesian partitions, program structure, errors, pickling."""

from __future__ import annotations

import pickle

import pytest

import spmdrules as sr
from spmdrules import examples
from spmdrules.completion import complete
from spmdrules.execution.lowering import lower
from spmdrules.execution.program import (
    Collective,
    KernelCall,
    Layout,
    LocalStep,
    LoweringError,
    groups,
    mesh_coords,
)

MESH = sr.ProcessMesh([[0, 1, 2], [3, 4, 5]], dim_names=["dp", "mp"])


def test_layout_maps_shard_replicate_partial_and_coshard() -> None:
    lay = Layout((7, 5, 4), "float32", sr.DistAttr(MESH, [1, -1, -1], {0: "min"}))
    assert lay.partition_shape == (3, 1, 1)
    assert lay.split_mesh_dims == ((1,), (), ())
    assert lay.broadcast_mesh_dims == ()
    assert lay.pending == ((0, "min"),)
    # balanced: 7 over 3 is 3, 2, 2
    assert [lay.local_shape((0, i))[0] for i in range(3)] == [3, 2, 2]
    co = Layout((13,), "float64", sr.DistAttr(MESH, multi_dims_mapping=[(1, 0)]))
    assert co.partition_shape == (6,)
    # mixed radix, mp major: coordinate (dp=1, mp=2) is part 2*2+1 = 5
    assert co.part_index((1, 2)) == (5,)
    boxes = sorted(co.box(c) for c in mesh_coords(MESH).values())
    assert boxes == [((0, 3),), ((3, 5),), ((5, 7),), ((7, 9),), ((9, 11),), ((11, 13),)]
    rep = Layout((4,), "float32", sr.DistAttr(MESH, [-1]))
    assert rep.broadcast_mesh_dims == (0, 1) and rep.local_nbytes((1, 1)) == 16


def test_groups_follow_the_mesh_dim() -> None:
    assert groups(MESH, 0) == [(0, 3), (1, 4), (2, 5)]
    assert groups(MESH, 1) == [(0, 1, 2), (3, 4, 5)]


def test_program_of_the_gpt_decoder() -> None:
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    g = examples.gpt_decoder(1, mesh, batch=2, seq=4, hidden=8, heads=2, ffn=16, vocab=16)
    r = complete(g)
    prog = lower(r)
    kernels = [i for i in prog.instructions if isinstance(i, KernelCall)]
    # every op but the vocab-parallel cross entropy runs its kernel
    assert len(kernels) == g.num_ops - 1
    assert [s.op for s in prog.instructions if isinstance(s, LocalStep)] == [
        "loss.cross_entropy"] * 3
    planned = [i for i in prog.instructions if isinstance(i, Collective)
               and i.predicted_bytes is not None]
    assert sum(i.predicted_bytes or 0 for i in planned) == r.bytes_moved == prog.predicted_bytes
    assert {e.label for e in prog.edges} == {i.edge for i in planned}
    assert set(prog.feeds) == {t.name for t in g.tensors if t.producer is None}
    # the kernel sees the attributes the rule inferred, e.g. the partial of a row-parallel matmul
    out_mm = next(k for k in kernels if k.op == "layers.0.out.matmul")
    assert out_mm.output_attrs[0].partial == {1: "sum"}
    assert out_mm.context((1, 0)).coord == (1, 0)
    # a program travels to MPI ranks by pickle
    again = pickle.loads(pickle.dumps(prog))
    assert again.buffers == prog.buffers and len(again.instructions) == len(prog.instructions)


def test_lower_refuses_what_is_not_a_completion() -> None:
    g = examples.mlp(MESH, batch=2, seq=2, hidden=6, ffn=6)
    with pytest.raises(LoweringError, match="Completion"):
        lower(g)  # type: ignore[arg-type]
