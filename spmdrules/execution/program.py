"""The program a completed graph lowers to: buffer layouts (a DistAttr read as a Cartesian partition)
and the instructions the executors run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from spmdrules.completion.reshard_plans import ReshardPlan, StepKind
from spmdrules.completion.result import ReshardEdge
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.execution.local import LocalContext
from spmdrules.graph.shapes.shape_rule import DTYPE_BYTES
from spmdrules.graph.storage import Interleaved
from spmdrules.runtime.decomposition import Box, box_shape, box_volume

Array = NDArray[Any]
Coord = tuple[int, ...]
#: a kernel argument or result: one buffer, a list of buffers, or an absent optional
Slot = str | tuple[str | None, ...] | None

#: the runtime primitive each planned step runs as (docs/execution.md)
PRIMITIVES: Final[dict[str, str]] = {
    "all_reduce": "AllSumReduce (sum; max/min/product/any/all: Allreduce on the mesh-dim group)",
    "reduce_scatter": "reduce-scatter on the mesh-dim group",
    "all_gather": "Repartition's box exchange to replicated blocks",
    "all_to_all": "Repartition's box exchange (S(i) -> S(j))",
    "slice": "local slice",
    "zero_partial": "local: one replica keeps the value, the others the identity",
    "p2p": "box exchange between meshes",
}


class LoweringError(SpmdError, ValueError):
    """A completed graph that cannot be lowered; the message names the tensor or op and the fix."""


# ---- layouts ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Layout:
    """A tensor's global shape, dtype and attribute, read as a Cartesian partition."""

    shape: tuple[int, ...]
    dtype: str
    attr: DistAttr

    @property
    def mesh(self) -> ProcessMesh:
        return self.attr.mesh

    @property
    def partition_shape(self) -> tuple[int, ...]:
        """Parts per tensor dim: the product of the sizes of the mesh dims that split it."""
        return tuple(self.attr.shard_count(d) for d in range(len(self.shape)))

    @property
    def split_mesh_dims(self) -> tuple[tuple[int, ...], ...]:
        """Per tensor dim, the mesh dims splitting it (major first; more than one = co-shard)."""
        return self.attr.multi_dims_mapping

    @property
    def broadcast_mesh_dims(self) -> tuple[int, ...]:
        """Mesh dims along which every process holds the same block."""
        used = self.attr.sharded_mesh_dims | self.attr.partial_dims
        return tuple(m for m in range(self.mesh.ndim) if m not in used)

    @property
    def pending(self) -> tuple[tuple[int, str], ...]:
        """(mesh dim, reduce type) of every pending reduction."""
        return self.attr.partial_items

    def part_index(self, coord: Coord) -> Coord:
        """The process's position in the partition (mixed radix over co-sharding mesh dims)."""
        out = []
        for dims in self.attr.multi_dims_mapping:
            idx = 0
            for m in dims:
                idx = idx * self.mesh.shape[m] + coord[m]
            out.append(idx)
        return tuple(out)

    def box(self, coord: Coord) -> Box:
        """The global box of the block at mesh coordinate ``coord`` (balanced decomposition)."""
        out = []
        for n, parts, i in zip(self.shape, self.partition_shape, self.part_index(coord),
                               strict=True):
            q, r = divmod(n, parts)
            lo = q * i + min(i, r)
            out.append((lo, lo + q + (1 if i < r else 0)))
        return tuple(out)

    def local_shape(self, coord: Coord) -> tuple[int, ...]:
        return box_shape(self.box(coord))

    def local_nbytes(self, coord: Coord) -> int:
        return box_volume(self.box(coord)) * DTYPE_BYTES[self.dtype]

    def describe(self) -> str:
        """``partition [2, 1, 1] over mesh dims [(0,), (), ()], broadcast (1,), pending ...``."""
        text = (f"partition {list(self.partition_shape)} over mesh dims "
                f"{[list(d) for d in self.split_mesh_dims]}")
        if self.broadcast_mesh_dims:
            text += f", broadcast over {list(self.broadcast_mesh_dims)}"
        if self.pending:
            text += ", pending " + ", ".join(f"{rt} over {m}" for m, rt in self.pending)
        return text


def counterpart_transfer(a: Layout, b: Layout) -> bool:
    """A transfer between meshes that sends every block to the process at the same coordinate:
    the source holds pieces of a pending reduction, or both sides cut the tensor alike. Any
    other transfer is a box exchange from :func:`owners`."""
    return bool(a.attr.partial_items) or (
        a.mesh.shape == b.mesh.shape and a.attr.multi_dims_mapping == b.attr.multi_dims_mapping)


def owners(lay: Layout, coords: Mapping[int, Coord], spread: Iterable[int]) -> dict[int, Box]:
    """The one process holding each distinct block of ``lay`` (coordinate 0 along every mesh
    dim of ``spread``, over which the processes hold copies or pieces of it), with its box."""
    dims = tuple(spread)
    return {p: lay.box(c) for p, c in coords.items() if not any(c[d] for d in dims)}


def mesh_coords(mesh: ProcessMesh) -> dict[int, Coord]:
    """Process id -> coordinate on ``mesh``."""
    return {pid: c for pid, c in zip(mesh.process_ids, itertools.product(
        *(range(s) for s in mesh.shape)), strict=True)}


def groups(mesh: ProcessMesh, mesh_dim: int) -> list[tuple[int, ...]]:
    """The process ids of every group along ``mesh_dim``, each ordered by its coordinate there."""
    ids = np.asarray(mesh.process_ids).reshape(mesh.shape)
    moved = np.moveaxis(ids, mesh_dim, -1).reshape(-1, mesh.shape[mesh_dim])
    return [tuple(int(p) for p in row) for row in moved]


def same_storage(storage: dict[str, Interleaved], buf: str, like: str) -> None:
    """Record that buffer ``buf`` holds buffer ``like``'s value (or its cotangent) in the
    order ``like`` is held in (``Program.storage``)."""
    if like in storage:
        storage[buf] = storage[like]


# ---- instructions -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KernelCall:
    """Run ``op_type``'s local kernel on every process of ``mesh``.

    In ``"vjp"`` mode (reverse mode, :mod:`spmdrules.execution.adjoint`) it runs the op's vector-Jacobian
    product instead: ``inputs`` are the op's inputs, then its outputs, then their cotangents, and
    ``outputs`` are the cotangents of the op's inputs (None where none is wanted). The shapes and
    attributes stay the forward op's, which the VJP reads as the kernel does."""

    op: str
    op_type: str
    mesh: ProcessMesh
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    input_shapes: tuple[Any, ...]
    input_attrs: tuple[Any, ...]
    output_shapes: tuple[Any, ...]
    output_attrs: tuple[Any, ...]
    attrs: dict[str, Any]
    mode: Literal["forward", "vjp"] = "forward"

    def context(self, coord: Coord) -> LocalContext:
        return LocalContext(self.op_type, self.mesh, coord, self.input_shapes, self.input_attrs,
                            self.output_shapes, self.output_attrs, dict(self.attrs))


@dataclass(frozen=True, slots=True)
class Collective:
    """One step of a planned reshard (or of an op's own reduction), from buffer ``src`` to
    ``dst``. ``edge`` names the reshard edge it belongs to; ``predicted_bytes`` is the plan's
    total for the step (None for an op's internal reduction, which no plan predicts)."""

    kind: StepKind
    mesh_dim: int | None
    src: str
    dst: str
    edge: str
    predicted_bytes: int | None
    #: the reduce type of a pending reduction the step resolves or creates
    reduce_type: str | None = None
    #: the op whose own lowering the step belongs to (None for a planned reshard step)
    op: str | None = None
    #: reverse mode: run the adjoint of a layout-changing ``p2p`` (each process returns the
    #: pieces it received to their owners, which add them up), from the cotangent of the
    #: transfer's destination (``src``) to that of its source (``dst``)
    adjoint: bool = False

    @property
    def primitive(self) -> str:
        return PRIMITIVES[self.kind]


#: numpy on one process's blocks: (coordinate, input blocks) -> output blocks
LocalFn = Callable[[Coord, Sequence[Array]], tuple[Array, ...]]


@dataclass(frozen=True, slots=True)
class LocalStep:
    """Plain numpy on every process of ``mesh`` (part of an op lowered without its kernel)."""

    op: str
    mesh: ProcessMesh
    fn: LocalFn
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SlabLayout(Layout):
    """A halo-extended input: each process holds the box its windows read (``boxes``, by mesh
    coordinate), its own block and the halo around it, instead of its block."""

    boxes: tuple[tuple[Coord, Box], ...] = ()

    def box(self, coord: Coord) -> Box:
        for c, b in self.boxes:
            if c == coord:
                return b
        return Layout.box(self, coord)


@dataclass(frozen=True, slots=True)
class HaloStep:
    """HaloExchange of a spatially sharded input (seed 003; :mod:`spmdrules.execution.halo`).

    Forward: every process of ``mesh`` receives, from the processes that hold the same blocks of
    every other dim (they differ only on ``mesh_dims``, the mesh dims cutting the spatial dims),
    the parts of its needed box it lacks (one-sided where its windows are). Adjoint: each
    process returns the cotangent of those parts to their owners, which add them into their
    blocks. ``predicted_bytes`` is what the boxes say the exchange moves, in the graph's dtype."""

    op: str
    mesh: ProcessMesh
    src: str
    dst: str
    edge: str
    mesh_dims: tuple[int, ...]
    predicted_bytes: int
    adjoint: bool = False
    kind: str = "halo"
    mesh_dim: None = None
    reduce_type: None = None

    @property
    def primitive(self) -> str:
        return "HaloExchange (BoxExchange of the needed boxes within each neighbour group)"


Instruction = KernelCall | Collective | LocalStep | HaloStep


@dataclass(frozen=True, slots=True)
class EdgePlan:
    """A reshard edge of the completion, its plan, and the buffer names it moves between."""

    label: str
    edge: ReshardEdge
    plan: ReshardPlan
    src: str
    dst: str


@dataclass(slots=True)
class Program:
    """A lowered graph: buffers with their layouts, instructions in order, and the edges."""

    name: str
    buffers: dict[str, Layout]
    instructions: list[Instruction]
    #: source tensors (graph inputs and parameters) the caller feeds, by name
    feeds: tuple[str, ...]
    #: every graph tensor, by name (a buffer of the same name holds it)
    tensors: tuple[str, ...]
    edges: list[EdgePlan] = field(default_factory=list)
    #: every op's call as its kernel would run it, by op name (also for ops lowered otherwise)
    calls: dict[str, KernelCall] = field(default_factory=dict)
    #: reverse mode (:func:`spmdrules.execution.adjoint.gradient_program`): the fed cotangent of each
    #: seeded tensor, and the buffer holding the gradient of each requested tensor
    seeds: dict[str, str] = field(default_factory=dict)
    grads: dict[str, str] = field(default_factory=dict)
    #: the buffers whose value the graph holds in another order than the user's (a
    #: chunk-aware plan's interleaved weight, what is computed from it before the cuts, their
    #: reshards and cotangents, ``Tensor.storage``): fed and fetched in the user's order
    storage: dict[str, Interleaved] = field(default_factory=dict)

    def stored(self, name: str, value: Array) -> Array:
        """The user's ``value`` of buffer ``name`` as the program holds it."""
        lay = self.storage.get(name)
        return value if lay is None else np.asarray(lay.stored(value))

    def user(self, name: str, value: Array) -> Array:
        """The value of buffer ``name`` as the program holds it, in the user's order."""
        lay = self.storage.get(name)
        return value if lay is None else np.asarray(lay.user(value))

    @property
    def predicted_bytes(self) -> int:
        """What the plans of every reshard edge send in total."""
        return sum(e.plan.total_bytes for e in self.edges)

    def process_ids(self) -> tuple[int, ...]:
        """Every process some buffer lives on."""
        return tuple(sorted({p for lay in self.buffers.values() for p in lay.mesh.process_ids}))

    def summary(self) -> str:
        n_k = sum(isinstance(i, KernelCall) for i in self.instructions)
        n_c = sum(isinstance(i, Collective) for i in self.instructions)
        n_l = sum(isinstance(i, LocalStep) for i in self.instructions)
        return (f"program {self.name!r}: {n_k} kernel calls, {n_c} collective steps, "
                f"{n_l} local steps, {len(self.buffers)} buffers, {len(self.edges)} reshard "
                f"edges predicting {self.predicted_bytes} bytes")
