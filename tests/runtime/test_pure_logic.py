"""Pure logic of the runtime, no MPI: decomposition, reduction rules, windows, halos."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spmdrules.core.errors import SpmdError
from spmdrules.runtime import PartitionMismatchError, RuntimeSetupError, Window
from spmdrules.runtime.decomposition import (
    balanced_box,
    balanced_size,
    balanced_sizes,
    balanced_start,
    intersect,
    zero_volume_tensor,
)
from spmdrules.runtime.halo import halo_boxes, halo_widths
from spmdrules.runtime.layout import GridLayout
from spmdrules.runtime.reduction_rules import match_reduction
from spmdrules.runtime.windows import (
    avg_pool,
    conv,
    full_geometry,
    max_pool,
)


# -- balanced decomposition -------------------------------------------------------------------
@given(st.integers(0, 200), st.integers(1, 40))
def test_balanced_decomposition_tiles_the_axis(n: int, parts: int) -> None:
    sizes = balanced_sizes(n, parts)
    assert sum(sizes) == n and max(sizes) - min(sizes) <= 1
    for i in range(parts):
        assert balanced_size(n, parts, i) == n // parts + (1 if i < n % parts else 0)
        assert balanced_start(n, parts, i) == (n // parts) * i + min(i, n % parts)
        assert balanced_start(n, parts, i) == sum(sizes[:i])


def test_balanced_box_and_errors() -> None:
    assert balanced_box([10, 7], [3, 2], [2, 1]) == ((7, 10), (4, 7))
    with pytest.raises(RuntimeSetupError):
        balanced_box([10], [3, 2], [0, 0])
    with pytest.raises(RuntimeSetupError):
        balanced_size(5, 0, 0)
    assert issubclass(RuntimeSetupError, SpmdError)


def test_zero_volume_tensor() -> None:
    assert zero_volume_tensor().shape == (0,)
    assert zero_volume_tensor(5).shape == (5, 0)
    assert zero_volume_tensor(3, dtype=np.int32).dtype == np.int32


def test_intersect() -> None:
    assert intersect(((0, 4), (2, 6)), ((3, 8), (0, 3))) == ((3, 4), (2, 3))
    assert intersect(((0, 4),), ((4, 8),)) is None


# -- reduction rules (seed 000 examples at their literal sizes) ------------------------------
def test_seed000_examples_1_to_4() -> None:
    assert match_reduction([4], [1]).groups() == [[0, 1, 2, 3]]
    assert match_reduction([2, 3], [1]).groups() == [list(range(6))]
    m3 = match_reduction([3, 4], [3, 1])
    assert m3.groups() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    m4 = match_reduction([4, 4, 3], [1, 1, 3])
    groups = m4.groups()
    assert [len(g) for g in groups] == [16, 16, 16]
    assert all(r % 3 == k for k, g in enumerate(groups) for r in g)


def test_seed000_examples_5_and_6_refused() -> None:
    with pytest.raises(PartitionMismatchError, match="dimension 2"):
        match_reduction([3, 3, 2], [1, 1, 3])
    with pytest.raises(PartitionMismatchError, match="dimension 0"):
        match_reduction([1, 3], [3, 1])
    with pytest.raises(PartitionMismatchError, match="dim"):
        match_reduction([3], [1, 3])


def test_seed000_examples_6_7_8_with_transposes() -> None:
    # 1x3 -> 3x1 reduces with either transpose, pairing x(0, j) with y(j, 0)
    for kw in ({"transpose_big": True}, {"transpose_small": True}):
        m = match_reduction([1, 3], [3, 1], **kw)
        assert [m.small_index((0, j)) for j in range(3)] == [(0, 0), (1, 0), (2, 0)]
    # example 7: 3x4 -> 1x3 with transpose_src: P_x acts as 4x3
    m7 = match_reduction([3, 4], [1, 3], transpose_big=True)
    assert m7.small_index((2, 1)) == (0, 2)
    assert [len(g) for g in m7.groups()] == [4, 4, 4]
    # example 8: 3x4 -> 4x1 with transpose_dest: P_y acts as 1x4
    m8 = match_reduction([3, 4], [4, 1], transpose_small=True)
    assert m8.small_index((2, 1)) == (1, 0)
    assert m8.groups()[1] == [1, 5, 9]
    # the note: transpose happens before padding, 3x4 acts as 1x4x3
    m = match_reduction([2, 4, 3], [3, 4], transpose_small=True)
    assert m.effective_small == (1, 4, 3)


def test_transposed_pairing_is_by_index_not_rank() -> None:
    m = match_reduction([2, 3], [3, 2], transpose_small=True)
    pairs = {big: m.small_index(np.unravel_index(big, (2, 3))) for big in range(6)}
    by_rank = {big: tuple(np.unravel_index(big, (3, 2))) for big in range(6)}
    assert pairs[1] == (1, 0) and by_rank[1] == (0, 1)
    assert sum(pairs[b] != by_rank[b] for b in range(6)) == 4


@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=4),
    st.data(),
    st.booleans(),
    st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_reduction_groups_partition_the_big_workers(
    big: list[int], data: st.DataObject, tb: bool, ts: bool
) -> None:
    eff = big[::-1] if tb else big
    k = data.draw(st.integers(0, len(big)))
    small_eff = [data.draw(st.sampled_from([1, s])) for s in eff[len(eff) - k :]]
    small = small_eff[::-1] if ts else small_eff
    if not small:
        small = [1]
    m = match_reduction(big, small, transpose_big=tb, transpose_small=ts)
    groups = m.groups()
    flat = sorted(r for g in groups for r in g)
    assert flat == list(range(int(np.prod(big))))
    assert all(groups) and len({len(g) for g in groups}) == 1


# -- windows: serial kernels against naive loops ---------------------------------------------
def naive_pool_1d(x: np.ndarray, w: Window, kind: str, include_pad: bool = True) -> np.ndarray:
    n = x.shape[-1]
    m = w.output_length(n)
    out = np.empty((*x.shape[:-1], m))
    for j in range(m):
        start = j * w.stride - w.padding
        pos = [start + t * w.dilation for t in range(w.kernel)]
        inside = [p for p in pos if 0 <= p < n]
        if kind == "max":
            out[..., j] = np.max(x[..., inside], axis=-1) if inside else -np.inf
        else:
            lo, hi = (-w.padding, n + w.padding) if include_pad else (0, n)
            count = sum(lo <= p < hi for p in pos)
            out[..., j] = np.sum(x[..., inside], axis=-1) / max(count, 1)
    return out


def torch_output_length(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """PyTorch's pooling_output_shape, transcribed."""
    num = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)
    out = num // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


@given(
    st.integers(1, 30), st.integers(1, 5), st.integers(1, 4), st.integers(0, 2),
    st.integers(1, 3), st.booleans(), st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_pool_1d_matches_naive(
    n: int, k: int, s: int, p: int, d: int, ceil: bool, include_pad: bool
) -> None:
    if 2 * p > k or n + 2 * p < d * (k - 1) + 1:
        return
    w = Window(k, s, p, d, ceil)
    assert w.output_length(n) == torch_output_length(n, k, s, p, d, ceil)
    x = np.random.default_rng(n * 31 + k).standard_normal((2, n))
    geo = full_geometry([n], [w])
    y, _ = max_pool(x, geo)
    np.testing.assert_array_equal(y, naive_pool_1d(x, w, "max"))
    np.testing.assert_allclose(
        avg_pool(x, geo, include_pad), naive_pool_1d(x, w, "avg", include_pad), rtol=1e-14
    )


def test_pool_2d_and_conv_match_naive() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 9, 8))
    ws = (Window(3, 2, 1, 1, True), Window(2, 1, 1, 2))
    geo = full_geometry([9, 8], ws)
    y, _ = max_pool(x, geo)
    m0, m1 = (w.output_length(n) for w, n in zip(ws, (9, 8), strict=True))
    for a, b in itertools.product(range(m0), range(m1)):
        rows = [a * 2 - 1 + t for t in range(3) if 0 <= a * 2 - 1 + t < 9]
        cols = [b - 1 + 2 * t for t in range(2) if 0 <= b - 1 + 2 * t < 8]
        np.testing.assert_array_equal(y[..., a, b], x[..., rows, :][..., cols].max(axis=(-2, -1)))
    weight = rng.standard_normal((4, 3, 3, 2))
    bias = rng.standard_normal(4)
    cw = (Window(3, 2, 1), Window(2, 1, 2, 3))
    cgeo = full_geometry([9, 8], cw)
    out = conv(x, weight, bias, cgeo)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)))
    for a, b in itertools.product(range(out.shape[2]), range(out.shape[3])):
        patch = xp[:, :, 2 * a : 2 * a + 3, b : b + 4 : 3]
        want = np.einsum("nchw,ochw->no", patch, weight) + bias
        np.testing.assert_allclose(out[:, :, a, b], want, rtol=1e-12)


def test_window_refusals() -> None:
    with pytest.raises(RuntimeSetupError):
        Window(0)
    with pytest.raises(SpmdError, match="shorter than the window"):
        Window(5).output_length(3)


# -- halo sizes -----------------------------------------------------------------------------
def test_halo_boxes_balanced_and_unbalanced() -> None:
    layout = GridLayout(np.dtype(float), (10,), (((0, 5),), ((5, 7),), ((7, 10),)))
    w = Window(3, 1, 1)  # 'same' window: one entry each side
    outs = [halo_boxes(layout, [3], [i], [w]) for i in range(3)]
    # output (length 10) is balanced 4/3/3: worker 1 computes [4, 7) and needs [3, 8)
    assert outs[1] == (((4, 7),), ((3, 8),))
    assert halo_widths(layout.boxes[1], outs[1][1]) == ((2, 1),)
    # a kernel wider than a block: worker 1 (two entries) needs data from both sides
    w5 = Window(5, 1, 2)
    _, need = halo_boxes(layout, [3], [1], [w5])
    assert need == ((2, 9),)


@given(st.integers(1, 40), st.integers(1, 6), st.integers(1, 5), st.integers(1, 3),
       st.integers(0, 2), st.integers(1, 2), st.booleans())
@settings(max_examples=200, deadline=None)
def test_halo_needs_cover_every_window(
    n: int, parts: int, k: int, s: int, p: int, d: int, ceil: bool
) -> None:
    w = Window(k, s, p, d, ceil)
    if n + 2 * p < w.extent:
        return
    lay = GridLayout(
        np.dtype(float), (n,), tuple(((a, b),) for a, b in _balanced_spans(n, parts))
    )
    m = w.output_length(n)
    covered = 0
    for i in range(parts):
        out, need = halo_boxes(lay, [parts], [i], [w])
        (j0, j1), (lo, hi) = out[0], need[0]
        covered += j1 - j0
        for j in range(j0, j1):
            for t in range(k):
                pos = j * s - p + t * d
                if 0 <= pos < n:
                    assert lo <= pos < hi
    assert covered == m


def _balanced_spans(n: int, parts: int) -> list[tuple[int, int]]:
    return [(balanced_start(n, parts, i), balanced_start(n, parts, i) + balanced_size(n, parts, i))
            for i in range(parts)]


# -- importable without mpi4py ----------------------------------------------------------------
def test_runtime_imports_without_mpi4py() -> None:
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"
        "import spmdrules.runtime as rt\n"
        "assert rt.zero_volume_tensor(2).shape == (2, 0)\n"
        "assert rt.balanced_sizes(7, 3) == (3, 2, 2)\n"
        "try:\n"
        "    rt.MPIPartition(None).create_partition_inclusive([0])\n"
        "except rt.MPIUnavailableError as e:\n"
        "    print('refused:', e)\n"
        "except AttributeError:\n"
        "    print('refused: no comm')\n"
        "from spmdrules.runtime._mpi import mpi\n"
        "try:\n"
        "    mpi()\n"
        "except rt.MPIUnavailableError as e:\n"
        "    print('typed:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "typed: the partition runtime needs mpi4py" in out.stdout


# -- overlap pieces --------------------------------------------------------------------------
def test_contiguous_offset_detects_runs() -> None:
    from spmdrules.runtime.box_exchange import _contiguous_offset

    outer = ((0, 4), (0, 6), (0, 5))
    assert _contiguous_offset(((1, 3), (0, 6), (0, 5)), outer) == 30  # whole rows
    assert _contiguous_offset(((2, 3), (1, 3), (0, 5)), outer) == 2 * 30 + 5
    assert _contiguous_offset(((2, 3), (1, 2), (1, 4)), outer) == 2 * 30 + 5 + 1
    assert _contiguous_offset(((0, 2), (1, 3), (0, 5)), outer) is None  # two runs
    assert _contiguous_offset(((0, 4), (0, 6), (1, 5)), outer) is None


@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.data())
@settings(max_examples=200, deadline=None)
def test_contiguous_offset_matches_numpy(shape: list[int], data: st.DataObject) -> None:
    from spmdrules.runtime.box_exchange import _contiguous_offset

    piece = []
    for n in shape:
        a = data.draw(st.integers(0, n - 1))
        b = data.draw(st.integers(a + 1, n))
        piece.append((a, b))
    box = tuple(piece)
    outer = tuple((0, n) for n in shape)
    flat = np.arange(int(np.prod(shape))).reshape(shape)
    picked = flat[tuple(slice(a, b) for a, b in box)].ravel()
    offset = _contiguous_offset(box, outer)
    is_run = bool(np.all(np.diff(picked) == 1))
    assert (offset is not None) == is_run
    if offset is not None:
        assert offset == picked[0]
