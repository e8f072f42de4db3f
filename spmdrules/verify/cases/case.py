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
from spmdrules.core.tables import OpTable, caller
from spmdrules.engine.registry import get_rule

# the value domains, re-exported for the family generators
from spmdrules.execution.domains import Arg as Arg
from spmdrules.execution.domains import DomainArg as DomainArg
from spmdrules.execution.domains import domain_dtype as domain_dtype
from spmdrules.execution.domains import draw_values as draw_values

Direction = Literal["forward", "reverse"]
Rng = np.random.Generator
Array = NDArray[Any]
Shape = tuple[int, ...]

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
    partials, of a reduce type the dtype can hold, on some of the unused mesh dims, some float
    sums masked."""
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
    sums = [d for d, rt in partial.items() if rt == "sum"]
    masks: dict[int, int] = {}
    if sums and ndim and kind == "f":
        # half of the float sums masked by a random dim (spmdrules.engine.masks), drawn from a
        # child generator so that every other case draws as it did before masks existed
        sub = rng.spawn(1)[0]
        masks = {d: int(sub.integers(ndim)) for d in sums if sub.random() < 0.5}
    return DistAttr(mesh, multi_dims_mapping=mdm, partial=partial, masks=masks)


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

#: the case generator of each rule family (``Rule.family``); each family module of this package
#: adds its own with ``register_cases``, and ``spmdrules.register_op`` an op's from outside
FAMILIES: Final[OpTable[Family]] = OpTable("verify case generator")


def register_cases(generator: Family, *, family: str | None = None,
                   origin: str | None = None) -> Family:
    """Make ``generator`` the case generator of ``family`` (by default the name of the module
    that defines it, as the rule's family is); a family has one (``DuplicateRegistrationError``)."""
    FAMILIES.add(family or generator.__module__.rsplit(".", 1)[-1], generator,
                 origin if origin is not None else caller(1))
    return generator


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
