"""MPIPartition: an ordered set of workers of a root communicator, optionally Cartesian.

Every partition derived from one ``MPIPartition(comm)`` shares that ``root`` communicator and
knows the root ranks of all its members, so every worker, active or not, can compute which
workers pair up between two partitions without communicating.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from spmdrules.runtime._mpi import mpi
from spmdrules.runtime.agreement import agree, describe_partition
from spmdrules.runtime.errors import RuntimeSetupError

# Tag for MPI_Comm_create_group.  Groups are always created in the same global order on
# every worker, so one tag suffices.
CREATE_GROUP_TAG = 4101


def free_communicator(comm: Any) -> None:
    """Free a communicator the runtime created (collective over its members); skip NULL."""
    if comm is not None and comm != mpi().COMM_NULL:
        comm.Free()


def sub_communicator(root: Any, members: Sequence[int]) -> Any:
    """A communicator of ``members`` (root ranks, in rank order); call only on members."""
    MPI = mpi()
    if root.Get_rank() not in members:
        return MPI.COMM_NULL
    group = root.Get_group().Incl(list(members))
    try:
        return root.Create_group(group, CREATE_GROUP_TAG)
    finally:
        group.Free()


class MPIPartition:
    """A set of workers of ``comm``; the worker calling it is ``active`` if it is a member."""

    def __init__(
        self,
        root: Any,
        members: tuple[int, ...] | None = None,
        comm: Any = None,
        shape: tuple[int, ...] | None = None,
        *,
        cartesian: bool = False,
        owns_comm: bool = False,
    ) -> None:
        """All of ``root``'s workers by default; else ``members`` (ranks of ``root``) over
        ``comm``, a ``shape`` grid of them. ``owns_comm``: ``free`` frees ``comm`` (on members)."""
        if members is None:
            members = tuple(range(root.Get_size()))
        self.root: Any = root
        self.members: tuple[int, ...] = members
        self.comm: Any = root if comm is None else comm
        self.is_cartesian = cartesian
        self.shape: tuple[int, ...] = shape if shape is not None else (len(members),)
        root_rank = root.Get_rank()
        self.active: bool = root_rank in members
        self.rank: int = members.index(root_rank) if self.active else -1
        self.index: tuple[int, ...] | None = (
            self.index_of(self.rank) if self.active else None
        )
        self._owns_comm = owns_comm and self.active

    # -- descriptive -------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of workers in the partition."""
        return len(self.members)

    @property
    def dim(self) -> int:
        """Number of Cartesian dimensions."""
        return len(self.shape)

    def index_of(self, rank: int) -> tuple[int, ...]:
        """Cartesian coordinates of partition rank ``rank`` (row-major, like MPI_Cart)."""
        return tuple(int(i) for i in np.unravel_index(rank, self.shape))

    def rank_of(self, index: Sequence[int]) -> int:
        """Partition rank of the worker at Cartesian ``index``."""
        return int(np.ravel_multi_index(tuple(index), self.shape))

    def root_rank_of(self, index: Sequence[int]) -> int:
        """Root-communicator rank of the worker at Cartesian ``index``."""
        return self.members[self.rank_of(index)]

    def __repr__(self) -> str:
        kind = "cartesian " if self.is_cartesian else ""
        return (
            f"MPIPartition({kind}shape={self.shape}, members={self.members}, "
            f"active={self.active}, rank={self.rank}, index={self.index})"
        )

    def same_root(self, other: MPIPartition) -> bool:
        """True when both partitions derive from the same root communicator."""
        if self.root is other.root:
            return True
        MPI = mpi()
        return bool(MPI.Comm.Compare(self.root, other.root) in (MPI.IDENT, MPI.CONGRUENT))

    # -- derivation --------------------------------------------------------------------
    def create_partition_inclusive(self, ranks: Sequence[int] | npt.ArrayLike) -> MPIPartition:
        """A partition of this partition's workers with the given ranks (in this order).

        Call it on every worker of the root communicator with the same ``ranks``.
        """
        chosen = [int(r) for r in np.asarray(ranks).ravel()]
        # the new communicator is collective over its members: a worker that was given other
        # ranks would leave them waiting, so check first (over the root, which all hold)
        agree(self.root, "create_partition_inclusive",
              [self.members[r] for r in chosen if 0 <= r < self.size] if self.members else (),
              {"parent": describe_partition(self), "ranks": chosen})
        if len(set(chosen)) != len(chosen) or any(not 0 <= r < self.size for r in chosen):
            raise RuntimeSetupError(
                f"create_partition_inclusive({chosen}) on a partition of {self.size} workers: "
                f"ranks must be distinct and in [0, {self.size}); pass each rank once"
            )
        if not chosen:
            raise RuntimeSetupError(
                "create_partition_inclusive([]): a partition needs at least one worker"
            )
        members = tuple(self.members[r] for r in chosen)
        return _owning(self.root, members, None, cartesian=False)

    def create_cartesian_topology_partition(self, shape: Sequence[int]) -> MPIPartition:
        """The same workers arranged on a Cartesian grid of ``shape`` (row-major ranks)."""
        grid = tuple(int(s) for s in shape)
        if any(s < 1 for s in grid) or int(np.prod(grid)) != self.size:
            raise RuntimeSetupError(
                f"create_cartesian_topology_partition({list(grid)}) on a partition of "
                f"{self.size} workers: the shape must have positive entries whose product is "
                f"{self.size}"
            )
        return MPIPartition(self.root, self.members, self.comm, grid, cartesian=True)

    def create_cartesian_subtopology_partition(self, remain_dims: Sequence[bool]) -> MPIPartition:
        """The slice of this Cartesian partition that keeps ``remain_dims`` (like MPI_Cart_sub).

        Each active worker gets the partition of its own slice; other workers get an inactive
        partition.
        """
        keep = tuple(bool(k) for k in remain_dims)
        if not self.is_cartesian or len(keep) != self.dim:
            raise RuntimeSetupError(
                f"create_cartesian_subtopology_partition({list(keep)}) needs a Cartesian "
                f"partition and one flag per dimension; this partition has shape {self.shape}"
            )
        sub_shape = tuple(s for s, k in zip(self.shape, keep, strict=True) if k)
        if not self.active or self.index is None:
            agree(self.root, "create_cartesian_subtopology_partition", (),
                  {"parent": describe_partition(self), "remain_dims": list(keep)})
            return _inactive(self.root, sub_shape or (1,))
        fixed = self.index
        members = tuple(
            self.members[r]
            for r in range(self.size)
            if all(k or a == b for a, b, k in zip(self.index_of(r), fixed, keep, strict=True))
        )
        agree(self.root, "create_cartesian_subtopology_partition", members,
              {"parent": describe_partition(self), "remain_dims": list(keep)})
        return _owning(self.root, members, sub_shape or (1,), cartesian=True)

    def create_partition_union(self, other: MPIPartition) -> MPIPartition:
        """The workers of both partitions: this one's in order, then the other's new ones."""
        if not self.same_root(other):
            raise RuntimeSetupError(
                "create_partition_union: the partitions come from different root "
                "communicators; derive both from one MPIPartition(comm)"
            )
        members = self.members + tuple(m for m in other.members if m not in self.members)
        agree(self.root, "create_partition_union", members,
              {"first": describe_partition(self), "second": describe_partition(other)})
        return _owning(self.root, members, None, cartesian=False)

    def free(self) -> None:
        """Free the communicator this partition created (call on all its workers).

        Cartesian partitions share their parent's communicator and free nothing; free a
        partition only once nothing built on it (partitions or layers) is used any more.
        """
        if self._owns_comm:
            free_communicator(self.comm)
            self.comm = mpi().COMM_NULL
            self._owns_comm = False


def _owning(
    root: Any, members: tuple[int, ...], shape: tuple[int, ...] | None, *, cartesian: bool
) -> MPIPartition:
    """A partition with a new communicator of its own (created on members only)."""
    return MPIPartition(root, members, sub_communicator(root, members), shape,
                        cartesian=cartesian, owns_comm=True)


def _inactive(root: Any, shape: tuple[int, ...]) -> MPIPartition:
    """A partition this worker does not belong to, whose membership it does not need."""
    return MPIPartition(root, (), mpi().COMM_NULL, shape, cartesian=True)
