"""Per-rank memory of a completed graph: parameters, activations and reshard buffers.

Each tensor counts its largest local block (a balanced split rounds up) at its dtype's size, so
the totals bound the busiest rank. Activations are every tensor that is not a parameter, all
kept (a training step keeps the forward's values for the reverse pass); a reshard adds a buffer
of its destination's block. Gradients and optimizer state are the caller's choice
(``Memory.training``): ``spmdrules.auto`` counts them as multiples of the parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from spmdrules.completion.local_shards import local_numel
from spmdrules.completion.reshard_plans import fmt_bytes
from spmdrules.completion.result import ReshardEdge
from spmdrules.core.attr import DistAttr
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor
from spmdrules.graph.shapes.shape_rule import DTYPE_BYTES


class Completed(Protocol):
    """What a completed graph offers (``Completion``)."""

    graph: Graph
    reshards: tuple[ReshardEdge, ...]

    def attr(self, tensor: Tensor | str) -> DistAttr: ...


@dataclass(frozen=True, slots=True)
class Memory:
    """Bytes per rank (the largest block of each tensor)."""

    parameters: int
    activations: int
    reshard_buffers: int

    @property
    def total(self) -> int:
        return self.parameters + self.activations + self.reshard_buffers

    def training(self, gradients: bool = True, optimizer_states: int = 2) -> int:
        """The total with a gradient per parameter and ``optimizer_states`` more copies of it
        (Adam keeps two: its moments), as a training step holds them."""
        return self.total + self.parameters * (int(gradients) + optimizer_states)

    def __str__(self) -> str:
        return (f"memory per rank {fmt_bytes(self.total)}: parameters "
                f"{fmt_bytes(self.parameters)}, activations {fmt_bytes(self.activations)}, "
                f"reshard buffers {fmt_bytes(self.reshard_buffers)}")


def local_bytes(attr: DistAttr, shape: Sequence[int], dtype: str) -> int:
    return local_numel(attr, tuple(shape)) * DTYPE_BYTES[dtype]


def memory(result: Completed) -> Memory:
    """The per-rank memory of ``result``'s graph as completed."""
    params = acts = 0
    for t in result.graph.tensors:
        b = local_bytes(result.attr(t), t.shape, t.dtype)
        if t.role == "param":
            params += b
        else:
            acts += b
    buffers = sum(local_bytes(e.dst, e.shape, e.dtype) for e in result.reshards)
    return Memory(params, acts, buffers)
