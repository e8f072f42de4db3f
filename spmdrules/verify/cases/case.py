"""The contract of verification cases: ``Case``, a family's ``Draft``, and the random draws they share
(meshes, attributes, shapes and values)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.attr import DistAttr
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import SpmdInfo, TensorSpec, flat_slots
from spmdrules.engine.registry import get_rule

Direction = Literal["forward", "reverse"]
Rng = np.random.Generator
Array = NDArray[Any]
Shape = tuple[int, ...]
#: one tensor argument: a tensor, an absent optional (None) or a list
Arg = TensorSpec | None | tuple[TensorSpec, ...]
#: the value domain of one tensor argument, in the same structure
DomainArg = str | None | tuple[str, ...]

#: Meshes of at most 8 processes, 1-D to 3-D; sizes 3 and 8 make most dims uneven.
MESH_SHAPES: Final[tuple[Shape, ...]] = (
    (2,), (3,), (4,), (8,),
    (1, 2), (2, 2), (2, 3), (3, 2), (2, 4), (4, 2),
    (2, 2, 2), (1, 2, 3), (2, 1, 2),
)
#: Dim sizes: small, often not divisible by the mesh, sometimes 1 (broadcast, squeeze).
SIZES: Final = (1, 2, 2, 3, 4, 4, 5, 6, 8)
#: How often a family with a contraction draws a contracted dim of size 1, given split
#: (``Draft.split``): there is nothing to split, so no pending sum may come of it.
SIZE_ONE_PROBE: Final = 0.3

#: Reduce types a partial of each dtype kind can carry (simulate.scatter splits them).
_REDUCES: Final[Mapping[str, tuple[str, ...]]] = {
    "f": ("sum", "sum", "avg", "max", "min", "product"),
    "i": ("sum", "max", "min", "product", "avg"),
    "b": ("any", "all"),
}

# ---- value domains -----------------------------------------------------------------------------
#: domain name -> dtype name; "index:N" domains (ids, hard labels) are int64 in [0, N)
_DOMAIN_DTYPES: Final[Mapping[str, str]] = {
    "real": "float64", "positive": "float64", "unit": "float64", "prob": "float64",
    "ge1": "float64", "nonzero": "float64", "near1": "float64", "bool": "bool", "int": "int64",
}


def domain_dtype(domain: str) -> str:
    if domain.startswith(("index:", "counts:")):
        return "int64"
    return "float64" if domain.startswith("boxes:") else _DOMAIN_DTYPES[domain]


def draw_values(domain: str, shape: Shape, rng: Rng) -> Array:
    """A random global array of ``shape`` in ``domain`` (an ndarray even when 0-d)."""
    return np.asarray(_values(domain, shape, rng), dtype=domain_dtype(domain))


def _values(domain: str, shape: Shape, rng: Rng) -> Any:
    if domain == "real":
        return rng.standard_normal(shape)
    if domain == "positive":
        return rng.uniform(0.5, 2.0, shape)
    if domain == "unit":
        return rng.uniform(-0.9, 0.9, shape)
    if domain == "prob":
        return rng.uniform(0.1, 0.9, shape)
    if domain == "ge1":
        return rng.uniform(1.1, 3.0, shape)
    if domain in ("nonzero", "near1"):
        # |v| in [0.5, 1.5]: safe divisors, and products of many stay O(1)
        return rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    if domain == "bool":
        return np.asarray(rng.integers(0, 2, shape) > 0)
    if domain == "int":
        return rng.integers(-8, 8, shape).astype(np.int64)
    if domain.startswith("index:"):
        return rng.integers(0, int(domain[6:]), shape).astype(np.int64)
    if domain.startswith("boxes:"):  # "boxes:H:W": boxes x1, y1, x2, y2 about an H x W image
        h, w = (int(v) for v in domain.split(":")[1:])
        lo = rng.uniform(-0.5, 1.0, (shape[0], 2)) * np.array([w, h]) * 0.8
        size = rng.uniform(0.3, 1.2, (shape[0], 2)) * np.array([w, h])
        return np.concatenate([lo, lo + size], axis=1)
    if domain.startswith("counts:"):  # "counts:N:R": N counts that sum to R (boxes per image)
        n, total = (int(v) for v in domain.split(":")[1:])
        cuts = np.sort(rng.integers(0, total + 1, n - 1))
        return np.diff(np.concatenate([[0], cuts, [total]])).astype(np.int64)
    raise ValueError(f"unknown value domain {domain!r}")


# ---- the case ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One verification case of ``rule`` in ``direction``; ``op``'s kernel runs it."""

    rule: str
    direction: Direction
    op: str
    mesh: ProcessMesh
    inputs: tuple[Arg, ...]
    outputs: tuple[Arg, ...]
    attrs: Mapping[str, Any]
    domains: tuple[DomainArg, ...]
    #: generic rules run on a stand-in op: the rule sees every tensor as two flat lists
    generic: bool = False
    reverse_attr_names: tuple[str, ...] = field(default=())
    #: input arguments the rule answers no attribute for; they keep the given one
    #: (einsum_grad's inner_cache: Paddle's EinsumGradInferSpmd lays out only inputs and out_grad)
    unanswered: tuple[int, ...] = field(default=())

    def call(self) -> SpmdInfo:
        """Call the rule on the given attributes (raises the rule's SpmdError if it refuses)."""
        rule = get_rule(self.rule)
        if self.generic:
            fn = rule.infer_forward if self.direction == "forward" else rule.infer_reverse
            return fn(flat_slots(self.inputs, TensorSpec), flat_slots(self.outputs, TensorSpec))
        args: list[Any] = [list(a) if isinstance(a, tuple) else a for a in self.inputs]
        if self.direction == "forward":
            own = {a.name for a in rule.attrs}
            return rule.infer_forward(*args, **{k: v for k, v in self.attrs.items() if k in own})
        outs: list[Any] = [list(a) if isinstance(a, tuple) else a for a in self.outputs]
        kw = {k: v for k, v in self.attrs.items() if k in self.reverse_attr_names}
        return rule.infer_reverse(*args, *outs, **kw)

    def describe(self) -> str:
        def fmt(a: Arg) -> str:
            if a is None:
                return "None"
            if isinstance(a, tuple):
                return "[" + ", ".join(fmt(t) for t in a) + "]"
            return f"{list(a.shape)}{a.attr.mapping_str()}"

        ins = ", ".join(fmt(a) for a in self.inputs)
        text = f"{self.rule} {self.direction} on mesh {list(self.mesh.shape)}: inputs {ins}"
        if self.direction == "reverse" or self.generic:
            text += f"; outputs {', '.join(fmt(a) for a in self.outputs)}"
        if self.attrs:
            text += f"; attrs {dict(self.attrs)}"
        if self.op != self.rule:
            text += f"; stand-in op {self.op}"
        return text


def draw_mesh(rng: Rng) -> ProcessMesh:
    shape = MESH_SHAPES[int(rng.integers(len(MESH_SHAPES)))]
    return ProcessMesh.from_shape(list(shape))


def draw_attr(rng: Rng, mesh: ProcessMesh, ndim: int, dtype: str) -> DistAttr:
    """A random valid attribute: each dim replicated, sharded or co-sharded; then pending
    partials, of a reduce type the dtype can hold, on some of the unused mesh dims."""
    free = list(range(mesh.ndim))
    rng.shuffle(free)
    mdm: list[tuple[int, ...]] = []
    for _ in range(ndim):
        u = rng.random()
        take = 0 if u < 0.4 else (1 if u < 0.9 else 2)
        take = min(take, len(free))
        mdm.append(tuple(free.pop() for _ in range(take)))
    kind = "b" if dtype == "bool" else ("i" if dtype.startswith("int") else "f")
    reduces = _REDUCES[kind]
    partial = {d: reduces[int(rng.integers(len(reduces)))] for d in free if rng.random() < 0.25}
    return DistAttr(mesh, multi_dims_mapping=mdm, partial=partial)


def draw_spec(rng: Rng, mesh: ProcessMesh, shape: Shape, dtype: str) -> TensorSpec:
    return TensorSpec(shape, draw_attr(rng, mesh, len(shape), dtype))


# ---- a draft: what a family generator decides --------------------------------------------------
#: a list argument's shapes are a list, so they never read as one shape
ShapeArg = Shape | None | list[Shape]


@dataclass(frozen=True)
class Split:
    """One dim the given attributes must shard: dim ``dim`` of argument ``arg``, counted over the
    inputs then the outputs (``item``: the tensor of a list argument)."""

    arg: int
    dim: int
    item: int | None = None


@dataclass(frozen=True)
class Draft:
    """An op call without attributes: input shapes, value domains and the op's attributes.

    ``split``: dims the given attributes shard, all on one mesh dim of size > 1 (a contracted dim
    of size 1 in every tensor that has it: the probe of ``size_one_probe``)."""

    op: str
    shapes: tuple[ShapeArg, ...]
    domains: tuple[DomainArg, ...]
    attrs: dict[str, Any]
    split: tuple[Split, ...] = ()


Family = Callable[[str, Rng], Draft]


def pick(rng: Rng, seq: Sequence[Any]) -> Any:
    return seq[int(rng.integers(len(seq)))]


def draw_shape(rng: Rng, rank: int) -> Shape:
    return tuple(int(pick(rng, SIZES)) for _ in range(rank))


def draw_rank(rng: Rng, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def size_one_probe(rng: Rng) -> bool:
    """Does this draft contract a dim of size 1 that every tensor holding it has split?"""
    return bool(rng.random() < SIZE_ONE_PROBE)


def negative_axis(rng: Rng, axis: int, ndim: int) -> int:
    """``axis`` or its negative spelling (rules and kernels must accept both)."""
    return axis - ndim if ndim and rng.random() < 0.3 else axis


# ---- drafts become cases -----------------------------------------------------------------------
class NoCaseError(Exception):
    """No generator covers this rule (or none could draw a valid case for it)."""
