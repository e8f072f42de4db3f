"""The DimTrans engine: transformations of reshape, their errors, and the sharding inference,
checked against Paddle's examples and, on random reshapes, by execution on simulated shards."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from spmdrules import DistAttr, ProcessMesh
from spmdrules.core.attr import MultiDims
from spmdrules.core.errors import RuleArgumentError, SpmdError, UnsupportedError
from spmdrules.core.shards import ShardMismatch, gather, scatter, shard_slices
from spmdrules.engine.dim_trans import (
    Flatten,
    InputDim,
    Singleton,
    Split,
    infer,
    make_reshape_trans,
    resolve_shape,
)

Shape = tuple[int, ...]


def mdm(*dims: int | tuple[int, ...]) -> MultiDims:
    return tuple(() if d == -1 else (d,) if isinstance(d, int) else d for d in dims)


def reshape(src: Shape, tgt: Shape, m: MultiDims, mesh: Shape) -> tuple[MultiDims, MultiDims]:
    return infer(make_reshape_trans(src, tgt), src, m, mesh)


# ---- transformations ----------------------------------------------------------------------------
def test_seed_example() -> None:
    assert make_reshape_trans((6, 12, 24, 48), (72, 24, 6, 8)) == (
        Flatten((InputDim(0), InputDim(1))),
        InputDim(2),
        Split(InputDim(3), (6, 8), 0),
        Split(InputDim(3), (6, 8), 1),
    )


def test_zero_copies_and_minus_one_infers() -> None:
    assert resolve_shape((4, 6, 5), (0, -1)) == (4, 30)
    assert make_reshape_trans((4, 6, 5), (0, -1)) == (
        InputDim(0), Flatten((InputDim(1), InputDim(2))),
    )


def test_size_one_dims() -> None:
    # a lone size-1 dim matched to a size-1 dim stays itself; inside a merge it vanishes
    assert make_reshape_trans((1,), (1,)) == (InputDim(0),)
    assert make_reshape_trans((8, 1, 4), (32,)) == (Flatten((InputDim(0), InputDim(2))),)
    assert make_reshape_trans((8,), (1, 8, 1)) == (Singleton(), InputDim(0), Singleton())
    # the size-1 piece is a Singleton; the others split as if it were not there
    assert make_reshape_trans((6,), (2, 1, 3)) == (
        Split(InputDim(0), (2, 3), 0), Singleton(), Split(InputDim(0), (2, 3), 1),
    )
    assert make_reshape_trans((8,), (1, 8)) == (Singleton(), InputDim(0))


def test_transformations_are_hashable_values() -> None:
    a = make_reshape_trans((6, 12, 24, 48), (72, 24, 6, 8))
    assert hash(a) == hash(tuple(a)) and a == make_reshape_trans((6, 12, 24, 48), (72, -1, 6, 8))
    with pytest.raises(AttributeError):
        InputDim(0).dim = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("src", "tgt", "err", "words"),
    [
        ((4, 6), (-1, -1), RuleArgumentError, "only one size can be inferred"),
        ((4, 6), (5, 5), RuleArgumentError, "25 elements"),
        ((4, 6), (-2, 12), RuleArgumentError, "entry 0 is -2"),
        ((4, 6), (2, -1, 0), RuleArgumentError, "entry 2 is 0"),
        ((4, 6), (-1, 5), RuleArgumentError, "not a multiple of 5"),
        ((0, 6), (-1, 6), UnsupportedError, "zero-size"),
    ],
)
def test_bad_target_shapes_are_typed_errors(
    src: Shape, tgt: Shape, err: type[SpmdError], words: str
) -> None:
    with pytest.raises(err, match=words):
        make_reshape_trans(src, tgt)


# ---- inference: Paddle's quirk-10 examples and the co-shard cases --------------------------------
M22 = (2, 2)
M222 = (2, 2, 2)


@pytest.mark.parametrize(
    ("src", "tgt", "mesh", "x", "want_in", "want_out"),
    [
        # quirk 10
        ((7, 5), (-1,), M22, mdm(0, 1), mdm(-1, -1), mdm(-1)),
        ((6,), (3, 2), M22, mdm(0), mdm(-1), mdm(-1, -1)),
        ((32,), (8, 4), M22, mdm(0), mdm(0), mdm(0, -1)),
        ((8, 4), (32,), M22, mdm(0, 1), ((0, 1), ()), ((0, 1),)),
        ((8, 4), (32,), M22, mdm(-1, 1), mdm(-1, -1), mdm(-1)),
        # the co-shard grows while the major dim's size divides, stops at an unsharded dim
        ((8, 3, 4), (96,), M222, mdm(0, 1, 2), ((0, 1, 2), (), ()), ((0, 1, 2),)),
        ((4, 4, 4), (64,), M222, mdm(0, 1, 2), ((0, 1), (), ()), ((0, 1),)),
        ((8, 4, 4), (128,), M222, mdm(0, -1, 1), mdm(0, -1, -1), mdm(0)),
        # a split's first piece takes the longest dividing prefix of the co-shard
        ((8, 4, 4), (4, 32), M222, mdm(0, 1, 2), ((0, 1), (), ()), ((0, 1), ())),
        ((8, 4, 4), (2, 64), M222, mdm(0, 1, 2), mdm(0, -1, -1), mdm(0, -1)),
        ((8, 4, 4), (8, 16), M222, mdm(0, 1, 2), (((0,), (1, 2), ())), ((0,), (1, 2))),
        # the size-1 dim's shard is dropped inside a merge, kept when it maps to a size-1 dim
        ((8, 1, 4), (32,), M222, mdm(0, 1, 2), ((0, 2), (), ()), ((0, 2),)),
        ((1,), (1,), M22, mdm(0), mdm(0), mdm(0)),
        # a kept dim needs no divisibility
        ((7, 4), (7, 2, 2), (3, 2), mdm(0, -1), mdm(0, -1), mdm(0, -1, -1)),
    ],
)
def test_inference_matches_paddle(
    src: Shape, tgt: Shape, mesh: Shape, x: MultiDims, want_in: MultiDims, want_out: MultiDims
) -> None:
    assert reshape(src, tgt, x, mesh) == (want_in, want_out)


def test_paddle_reverse_without_checks_is_kept_for_recognising_its_answers() -> None:
    trans = make_reshape_trans((7, 5), (35,))
    assert infer(trans, (7, 5), mdm(0, 1), (3, 2), checked=False) == (((0, 1), ()), ((0, 1),))
    assert infer(trans, (7, 5), mdm(0, 1), (3, 2)) == (mdm(-1, -1), mdm(-1))


def test_splits_carry_the_co_shard_or_only_the_major_dims_shard() -> None:
    # Paddle's forward co-shards a split of a merge; its reverse keeps only the major dim's shard
    trans = make_reshape_trans((6, 8), (12, 4))
    assert infer(trans, (6, 8), mdm(1, 0), (3, 2)) == (((1, 0), ()), ((1, 0), ()))
    assert infer(trans, (6, 8), mdm(1, 0), (3, 2), coshard_splits=False) == (
        mdm(1, -1), mdm(1, -1)
    )


# ---- execution: every answer cuts input and output into the same per-device data ------------------
def consistent(src: Shape, tgt: Shape, mesh: ProcessMesh, m_in: MultiDims, m_out: MultiDims,
               partial: Any = None) -> bool:
    """Does a local reshape of every device's block of x (under m_in) give its block of out?"""
    x = np.arange(math.prod(src), dtype=float).reshape(src)
    a_in = DistAttr(mesh, multi_dims_mapping=m_in, partial=partial)
    a_out = DistAttr(mesh, multi_dims_mapping=m_out, partial=partial)
    blocks = scatter(x, a_in)
    local = {}
    for c, b in blocks.items():
        want = tuple(s.stop - s.start for s in shard_slices(tgt, a_out, c))
        if b.size != math.prod(want):
            return False
        local[c] = b.reshape(want)
    try:
        got = gather(local, tgt, a_out)
    except ShardMismatch:
        return False
    return bool(np.array_equal(got, x.reshape(tgt)))


def _random_shape(rng: np.random.Generator) -> Shape:
    return tuple(int(rng.choice([1, 2, 3, 4, 6, 8])) for _ in range(int(rng.integers(1, 5))))


def _random_target(rng: np.random.Generator, src: Shape) -> Shape:
    factors = [p for n in src for p in _primes(n)]
    rng.shuffle(factors)
    out: list[int] = []
    for f in factors:
        if out and rng.random() < 0.5:
            out[-1] *= f
        else:
            out.append(f)
    for _ in range(int(rng.integers(0, 2))):
        out.insert(int(rng.integers(0, len(out) + 1)), 1)
    return tuple(out) or (1,)


def _primes(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def _random_mapping(rng: np.random.Generator, ndim: int, mesh_ndim: int) -> MultiDims:
    dims: list[list[int]] = [[] for _ in range(ndim)]
    for md in range(mesh_ndim):
        t = int(rng.integers(-1, ndim))
        if t >= 0:
            dims[t].append(md)
    return tuple(tuple(d) for d in dims)


@pytest.mark.parametrize("seed", range(3))
def test_random_reshapes_are_consistent_by_execution(seed: int) -> None:
    rng = np.random.default_rng(seed)
    meshes = [(2,), (3,), (2, 2), (3, 2), (2, 2, 2), (4, 2)]
    for _ in range(150):
        shape = meshes[int(rng.integers(len(meshes)))]
        mesh = ProcessMesh.from_shape(list(shape), list(range(math.prod(shape))))
        src = _random_shape(rng)
        tgt = _random_target(rng, src)
        m = _random_mapping(rng, len(src), len(shape))
        m_in, m_out = reshape(src, tgt, m, shape)
        # the input keeps a subset (a prefix per dim) of what it had, or gains a co-shard
        assert len(m_in) == len(src) and len(m_out) == len(tgt)
        assert consistent(src, tgt, mesh, m_in, m_out), (src, tgt, shape, m, m_in, m_out)
        # reverse: the same inference from out to x, with and without co-sharded splits
        back = make_reshape_trans(tgt, src)
        m_any = _random_mapping(rng, len(tgt), len(shape))
        for m_o in (m_out, m_any):
            for coshard in (True, False):
                r_out, r_in = infer(back, tgt, m_o, shape, coshard_splits=coshard)
                assert consistent(src, tgt, mesh, r_in, r_out), (src, tgt, shape, m_o, r_in)
