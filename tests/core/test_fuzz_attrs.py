"""Hypothesis fuzzing of the attribute constructors: a valid value or an SpmdError, nothing else."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import spmdrules as sr

junk = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 9), st.floats(allow_nan=True), st.text(max_size=3)
)
ids = st.recursive(
    st.one_of(st.integers(-2, 12), junk),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(ids, st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=3)))
def test_process_mesh(nested: Any, names: Any) -> None:
    try:
        mesh = sr.ProcessMesh(nested, names)
    except sr.SpmdError:
        return
    assert len(mesh.process_ids) == len(set(mesh.process_ids))
    n = 1
    for s in mesh.shape:
        n *= s
    assert n == mesh.size


mapping_entry = st.one_of(st.integers(-2, 4), st.none(), st.sampled_from(["dp", "mp", "zz"]), junk)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([(2,), (2, 2), (1, 2, 3)]),
    st.one_of(st.lists(mapping_entry, max_size=4), junk),
    st.one_of(
        st.none(),
        st.dictionaries(
            st.one_of(st.integers(-1, 4), st.text(max_size=2)),
            st.one_of(st.sampled_from([*sr.REDUCE_TYPES, "mean"]), junk),
            max_size=3,
        ),
        st.lists(st.integers(-1, 4), max_size=3),
        junk,
    ),
    st.lists(st.integers(-2, 9), max_size=4),
)
def test_dist_attr_and_spec(mesh_shape: tuple[int, ...], dm: Any, partial: Any, shape: Any) -> None:
    names = ["dp", "mp", "pp"][: len(mesh_shape)]
    mesh = sr.ProcessMesh.from_shape(mesh_shape, dim_names=names)
    try:
        attr = sr.DistAttr(mesh, dm, partial)
    except sr.SpmdError:
        return
    used = [d for dims in attr.multi_dims_mapping for d in dims]
    assert len(used) == len(set(used))
    assert all(0 <= d < mesh.ndim for d in used)
    assert not set(used) & attr.partial_dims
    assert set(attr.partial.values()) <= set(sr.REDUCE_TYPES)
    try:
        spec = sr.TensorSpec(shape, attr)
    except sr.SpmdError:
        return
    assert len(spec.shape) == attr.ndim and all(s >= 0 for s in spec.shape)
