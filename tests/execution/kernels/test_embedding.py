"""The local kernels of embedding, lookup_table_v2 and the vocab-parallel embedding
(spmdrules/execution/kernels/embedding.py), proven by execution with the harness in
tests/support/kernel_harness.py."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from kernel_harness import (
    RNG,
    Array,
    Op,
    _x,
    assert_same,
    check_serial,
    check_sharded,
    mesh_of,
)

from spmdrules.core.attr import DistAttr
from spmdrules.execution.local import KernelInputError, LocalContext, get_kernel


def _ids(shape: Sequence[int], vocab: int) -> Array:
    return RNG.integers(0, vocab, size=shape).astype(np.int64)


@pytest.mark.parametrize(("name", "padding_idx"), [
    ("embedding", -1), ("lookup_table_v2", -1), ("embedding", 3), ("embedding", -2),
])
def test_embedding(name: str, padding_idx: int) -> None:
    vocab = 10
    ids, w = _ids((3, 5), vocab), _x(vocab, 4)
    ids[0, :2] = [3, vocab - 2]  # the padding rows, when there is one
    op = Op(name, [ids, w], {"padding_idx": padding_idx})
    ref = w[ids]
    if padding_idx != -1:
        ref[ids == padding_idx % vocab] = 0.0
    check_serial(op, (ref,), exact=True)
    # vocab-sharded weight rows yield the partial sum the rule claims
    assert check_sharded(op, (ref,), exact=False, seed=12) > 0


def test_vocab_parallel_embedding_masks_foreign_ids() -> None:
    mesh = mesh_of((2,))
    ids, w = np.array([[0, 4, 2]]), _x(5, 3)  # rank 0 holds rows 0..2, rank 1 rows 3..4
    op = Op("embedding", [ids, w])
    info = op.infer([DistAttr(mesh, [-1, -1]), DistAttr(mesh, [0, -1])], None)
    (out_attr,) = info.outputs
    assert isinstance(out_attr, DistAttr) and out_attr.partial_items == ((0, "sum"),)
    in_attrs, out_attrs = op.attributes(info)
    assert_same(op.run(in_attrs, out_attrs, np.random.default_rng(0)), [w[ids]], exact=True)
    ctx = LocalContext("embedding", mesh, (1,), (ids.shape, w.shape), in_attrs, op.out_shapes,
                       out_attrs, op.full_attrs)
    (local,) = get_kernel("embedding")(ctx, [ids, w[3:]])
    assert_same(local, np.stack([[np.zeros(3), w[4], np.zeros(3)]]), exact=True)


def test_embedding_refuses_ids_outside_the_vocabulary() -> None:
    op = Op("embedding", [np.array([[0, 7]]), _x(5, 3)])
    with pytest.raises(KernelInputError, match=r"id 7 outside the vocabulary 0\.\.4"):
        check_serial(op, (np.zeros((1, 2, 3)),), exact=True)

