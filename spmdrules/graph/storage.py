"""How a source tensor's values are stored, when not in its user's order: ``Interleaved``.

A fused projection (GPT-2's ``c_attn``, Phi-3's ``qkv_proj`` and ``gate_up_proj``) makes one
output that the model cuts into chunks by position (q | k | v, gate | up). Split contiguously,
each process's block straddles chunks. Megatron stores such a weight interleaved: each chunk is
cut into ``ways`` blocks, and block r of every chunk is stored together, so that a contiguous
split over ``ways`` processes gives process r the r-th block of every chunk. A graph whose
parameter is stored so computes on the stored order (``Tensor.storage`` says which), and the
values cross the boundary in the user's order: ``stored`` turns the user's value into the
graph's, ``user`` turns a stored value (or its gradient) back.

>>> import numpy as np
>>> lay = Interleaved(dim=0, sizes=(4, 2, 2), ways=2)       # q: 4, k: 2, v: 2, on 2 processes
>>> lay.stored(np.arange(8)).tolist()     # process 0: q0 q1 k0 v0 | process 1: q2 q3 k1 v1
[0, 1, 4, 6, 2, 3, 5, 7]
>>> lay.user(lay.stored(np.arange(8))).tolist()
[0, 1, 2, 3, 4, 5, 6, 7]
>>> lay.block_offsets()                   # where each chunk starts inside a process's block
(0, 2, 3)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from spmdrules.graph.errors import GraphError


class StorageError(GraphError):
    """A stored order that cannot be: chunks that ``ways`` blocks do not cut evenly, a dim the
    tensor does not have, a value of the wrong extent."""


@dataclass(frozen=True)
class Interleaved:
    """Dim ``dim`` cut into chunks of ``sizes``, each chunk into ``ways`` equal blocks, stored
    block-major: block 0 of every chunk, then block 1 of every chunk, ... (module docs)."""

    dim: int
    sizes: tuple[int, ...]
    ways: int

    def __post_init__(self) -> None:
        if not isinstance(self.ways, int) or self.ways < 1:
            raise StorageError(f"Interleaved: ways={self.ways!r} must be a positive int")
        if not isinstance(self.dim, int) or self.dim < 0:
            raise StorageError(f"Interleaved: dim={self.dim!r} must be a non-negative int")
        if not self.sizes or any(not isinstance(s, int) or s <= 0 for s in self.sizes):
            raise StorageError(f"Interleaved: sizes={self.sizes!r} must be positive ints")
        uneven = [s for s in self.sizes if s % self.ways]
        if uneven:
            raise StorageError(f"Interleaved: chunks of sizes {list(self.sizes)} cannot each be "
                               f"cut in {self.ways} equal blocks ({uneven} are not multiples of "
                               f"{self.ways}); give chunk sizes divisible by the mesh dim's size")

    @property
    def extent(self) -> int:
        """The dim's size: the chunks' sum."""
        return sum(self.sizes)

    def block_offsets(self) -> tuple[int, ...]:
        """Each chunk's offset inside one process's block of the stored dim."""
        starts = np.cumsum((0, *self.sizes[:-1])) // self.ways
        return tuple(int(s) for s in starts)

    @cached_property
    def _order(self) -> Any:
        """Stored position -> the user's index along ``dim``."""
        starts = np.cumsum((0, *self.sizes[:-1]))
        w = self.ways
        return np.concatenate([np.arange(o + r * s // w, o + (r + 1) * s // w)
                               for r in range(w) for o, s in zip(starts, self.sizes, strict=True)])

    def _check(self, value: Any, what: str) -> Any:
        a = np.asarray(value)
        if a.ndim <= self.dim or a.shape[self.dim] != self.extent:
            raise StorageError(f"Interleaved: the {what} value has shape {list(a.shape)}, but dim "
                               f"{self.dim} must hold the chunks {list(self.sizes)} "
                               f"({self.extent} in all)")
        return a

    def stored(self, user: Any) -> Any:
        """The user's value in the stored order."""
        return np.take(self._check(user, "user's"), self._order, axis=self.dim)

    def user(self, stored: Any) -> Any:
        """A stored value (or its gradient) in the user's order."""
        return np.take(self._check(stored, "stored"), np.argsort(self._order), axis=self.dim)
