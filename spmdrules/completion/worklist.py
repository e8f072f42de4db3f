"""The sweeps' worklists: which ops must be visited, in this sweep and the next ones."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.completion.blocks import Flags


class Worklists:
    """Per op, whether the current sweep, the next forward and the next reverse sweep visit it.

    Worklists are one byte per op: a sweep finds the next pending op with bytearray.find, so a
    visit costs the same whatever the model's size (a heap's log n does not)."""

    __slots__ = ("consumers", "cur", "direction", "fwd_next", "pending", "queued", "rev_next")

    def __init__(self, n_ops: int, consumers: Sequence[Sequence[int]],
                 queued: Sequence[int]) -> None:
        self.consumers = consumers
        self.queued = queued  # per tensor, the op its change queues in reverse (Index.queued)
        self.fwd_next = bytearray(n_ops)
        self.rev_next = bytearray(n_ops)
        self.pending = bytearray(n_ops)
        self.cur = -1  # the op the sweep visits now
        self.direction = 1  # of the sweep: 1 forward, -1 reverse

    def flags(self) -> Flags:
        """This sweep's, the next forward and the next reverse worklist."""
        return self.pending, self.fwd_next, self.rev_next

    def any_queued(self) -> bool:
        """Whether a next sweep has an op to visit."""
        return self.fwd_next.find(1) >= 0 or self.rev_next.find(1) >= 0

    def changed(self, i: int) -> None:
        """Queue the ops that must look again at tensor ``i``: consumers forward, the producer in
        reverse. An op ahead of the cursor in the current sweep's direction joins this sweep,
        others the next."""
        cur = self.cur
        if self.direction == 1:
            pending, later = self.pending, self.fwd_next
            for c in self.consumers[i]:
                if c > cur:
                    pending[c] = 1
                else:
                    later[c] = 1
            p = self.queued[i]
            if p >= 0:
                self.rev_next[p] = 1
        else:
            fwd_next = self.fwd_next
            for c in self.consumers[i]:
                fwd_next[c] = 1
            p = self.queued[i]
            if 0 <= p < cur:
                self.pending[p] = 1
            elif p >= 0:
                self.rev_next[p] = 1
