"""Completing a graph with repeated blocks replayed and without: both must say the same
(tests/completion/test_blocks.py, tests/completion/test_repeats.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from spmdrules.completion import Completion, complete, state
from spmdrules.completion.explain import explain
from spmdrules.core.errors import SpmdError
from spmdrules.graph.graph import Graph


def everything(r: Completion) -> Any:
    """All a user can read off the result (the rules' run count aside: that is what replaying
    saves)."""
    tensors = {
        t.name: (r.attr(t), r.origin(t), r.offers(t), r.rejected(t), explain(r, t))
        for t in r.graph.tensors
    }
    return (tensors, [(e.tensor, e.op, e.side, e.src, e.dst, e.shape, e.dtype)
                      for e in r.reshards], r.iterations, r.converged)


def outcome(build: Callable[[], Graph]) -> tuple[Completion | None, Any]:
    try:
        r = complete(build())
    except SpmdError as e:
        return None, (type(e), str(e))
    return r, everything(r)


@contextmanager
def no_replay() -> Iterator[None]:
    state.REPLAY_BLOCKS = False
    try:
        yield
    finally:
        state.REPLAY_BLOCKS = True


def same_outcome(build: Callable[[], Graph]) -> Completion | None:
    """Complete with replay and without; both must say the same, or raise the same error.
    Returns the replayed run (None: the error)."""
    assert state.REPLAY_BLOCKS
    r, with_replay = outcome(build)
    with no_replay():
        _, without = outcome(build)
    assert with_replay == without
    return r


def same_without_replay(build: Callable[[], Graph]) -> Completion:
    r = same_outcome(build)
    assert r is not None, "the pass raised (with and without replay)"
    return r
