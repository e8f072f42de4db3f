"""Structure agreement: the workers of a layer check, once at construction, that they were all
given the same partitions and arguments.

A layer's workers compute who pairs with whom from their own copies of the partitions, without
communicating; if one worker was handed a different partition (the classic SPMD bug: a shape
computed from rank-local data), the workers then post messages that never match, and the job
hangs or returns wrong blocks. So every collective layer, and the MPI executor, first runs
:func:`agree`.

The check must not deadlock when the workers disagree on *who* takes part, so it never uses a
communicator derived from the partitions: it is one ``Allgather`` over the root communicator
that every worker of the layer holds (``P.root``, built by ``MPIPartition(comm)`` on every
worker), with a fixed-size message per worker: a 16-byte digest of the worker's view (layer
name, partition shapes and root ranks, parameters) and a bit mask of the root ranks it believes
take part. Every worker evaluates the same gathered data: the check fails if some worker's
participants hold a digest other than its own. Then (and only then) every worker takes part in
a second gathering of the readable views, and every worker raises the same
:class:`StructureDisagreementError`, naming the layer, the views and which root ranks hold each.

Every worker of the root communicator therefore builds every layer, as DistDL's layers are
built, also the workers the layer does not involve (they agree on taking no part).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from spmdrules.runtime.errors import StructureDisagreementError

DIGEST_BYTES = 16
_enabled = True


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Build layers without the agreement check (for measuring what the check costs)."""
    global _enabled
    before, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = before


def describe_partition(P: Any) -> str:
    """A partition as the agreement compares it: shape, kind and root ranks."""
    if not P.members:
        return f"none (this worker is outside it; slice shape {tuple(P.shape)})"
    kind = "cartesian " if P.is_cartesian else ""
    return f"{kind}{tuple(P.shape)} of root ranks {tuple(P.members)}"


def view_text(view: Mapping[str, object]) -> str:
    """The readable form of a view (what is hashed and what the error shows)."""
    return "; ".join(f"{k}={v}" for k, v in view.items())


def agree(root: Any, what: str, participants: Iterable[int], view: Mapping[str, object]) -> None:
    """Check that every worker of ``root`` that this worker counts among ``participants``
    holds the same ``view``; collective over ``root`` (call it on every worker of it).

    Raises :class:`StructureDisagreementError` on every worker if any two participants differ.
    """
    if not _enabled:
        return
    size = int(root.Get_size())
    text = f"{what}: {view_text(view)}"  # what is compared (by digest)
    mask = np.zeros(size, dtype=bool)
    mine = sorted({int(p) for p in participants})
    mask[mine] = True
    packed = np.packbits(mask)
    send = np.empty(DIGEST_BYTES + packed.size, dtype=np.uint8)
    send[:DIGEST_BYTES] = np.frombuffer(
        hashlib.blake2b(text.encode(), digest_size=DIGEST_BYTES).digest(), dtype=np.uint8
    )
    send[DIGEST_BYTES:] = packed
    recv = np.empty((size, send.size), dtype=np.uint8)
    root.Allgather(send, recv)
    digests = [bytes(row[:DIGEST_BYTES]) for row in recv]
    masks = np.unpackbits(recv[:, DIGEST_BYTES:], axis=1, count=size).astype(bool)
    involved: set[int] = set()
    for r in range(size):
        for m in np.flatnonzero(masks[r]):
            if digests[m] != digests[r]:
                involved.update((r, int(m)))
    if not involved:
        return
    # Every worker found the same disagreement, so every worker joins this second gathering.
    mine_view = {"layer": what, **{k: str(v) for k, v in view.items()}}
    views: list[dict[str, str]] = root.allgather(mine_view)
    holders: dict[str, list[int]] = {}
    for r, v in enumerate(views):
        holders.setdefault(view_text(v), []).append(r)
    shown = [views[rs[0]] for rs in holders.values() if any(r in involved for r in rs)]
    keys = [k for k in dict.fromkeys(k for v in shown for k in v)
            if len({v.get(k) for v in shown}) > 1]
    detail = "; ".join(
        f"view {chr(ord('A') + i)}, held by root ranks {holders[view_text(v)]}: "
        + ", ".join(f"{k}={v.get(k, '(none)')}" for k in keys)
        for i, v in enumerate(shown)
    )
    raise StructureDisagreementError(
        f"{what}: the workers were given different partitions or arguments, so their messages "
        f"would not match. {detail}. Make this call on every worker of the root communicator "
        "with the same arguments: derive every partition by the same calls in the same order, "
        "never from rank-local data"
    )


__all__ = ["agree", "describe_partition", "disabled", "view_text"]
