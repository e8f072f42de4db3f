"""The working state of one completion run: per-tensor and per-op arrays, and the pass's limits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from spmdrules.completion.offers import RawOffer, Refusal
from spmdrules.completion.rank import WEAK
from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import TensorSpec

#: how often one tensor may change before it is frozen (a guard; no known model reaches it)
MAX_CHANGES: Final = 8
#: sweeps (one forward and one reverse each) before the pass stops and reports non-convergence
MAX_SWEEPS: Final = 64
#: replay repeated blocks (``completion_blocks``); off only to check that replaying changes nothing
REPLAY_BLOCKS = True
#: how many visited blocks of a run a block's entry state is compared with
RECENT_VISITS: Final = 4


class State:
    """Per-tensor and per-op working arrays of one run, indexed by ``order``."""

    __slots__ = (
        "any_rejected", "attr", "changes", "frozen", "natural", "needs", "offers", "rank",
        "rejected", "shared_at", "spec", "touched_shared",
    )

    def __init__(self, n_tensors: int, n_ops: int) -> None:
        self.attr: list[DistAttr | None] = [None] * n_tensors
        self.rank: list[int] = [WEAK] * n_tensors
        self.spec: list[TensorSpec | None] = [None] * n_tensors
        # offers per tensor (one per op and direction, in the order first made): None, the one
        # offer itself (most tensors get one: no list for them), or a list
        self.offers: list[RawOffer | list[RawOffer] | None] = [None] * n_tensors
        self.changes: list[int] = [0] * n_tensors
        self.frozen: list[bool] = [False] * n_tensors
        # offers refused per tensor. A tuple, never changed in place: blocks gather and keep
        # them as they are.
        self.rejected: list[tuple[Refusal, ...] | None] = [None] * n_tensors
        self.any_rejected = False  # no refusal anywhere yet: blocks need not compare them
        # per (block start, shared tensor): the tensor's offers when last read, and the block's
        # own among them (``blocks._block_offers``)
        self.shared_at: dict[tuple[int, int],
                             tuple[RawOffer | list[RawOffer] | None, tuple[RawOffer, ...]]] = {}
        # whether the block visit open now went past an offer to a tensor that blocks share
        # (then it cannot be replayed: ``blocks``)
        self.touched_shared = False
        self.natural: list[tuple[DistAttr, ...] | None] = [None] * n_ops
        self.needs: list[tuple[DistAttr, ...] | None] = [None] * n_ops

    def reject(self, i: int, refusal: Refusal) -> None:
        """Record that tensor ``i`` refused an offer."""
        self.rejected[i] = (*(self.rejected[i] or ()), refusal)
        self.any_rejected = True

    def offers_of(self, i: int) -> Sequence[RawOffer]:
        o = self.offers[i]
        if o is None:
            return ()
        return o if isinstance(o, list) else (o,)
