"""Over-replication: a sharded alternative to the rule's answer that also computes the right result
with less communication (docs/verify.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import TensorSpec
from spmdrules.execution.local import Kernel, LocalValue
from spmdrules.execution.single_op import format_slots
from spmdrules.verify.cases.case import Arg, Case
from spmdrules.verify.simulation import (
    MAX_ALTERNATIVES,
    Collective,
    Rng,
    Slot,
    Values,
    compare,
    run_sharded,
)


def _flat_slots(slots: Sequence[Slot]) -> list[tuple[int, int | None, DistAttr]]:
    out: list[tuple[int, int | None, DistAttr]] = []
    for k, s in enumerate(slots):
        if isinstance(s, DistAttr):
            out.append((k, None, s))
        elif isinstance(s, tuple):
            out.extend((k, i, a) for i, a in enumerate(s))
    return out


def _with(slots: Sequence[Slot], k: int, i: int | None, a: DistAttr) -> list[Slot]:
    new = list(slots)
    if i is None:
        new[k] = a
    else:
        cur = new[k]
        assert isinstance(cur, tuple)
        new[k] = (*cur[:i], a, *cur[i + 1 :])
    return new


def _shard_on(a: DistAttr, dim: int, md: int) -> DistAttr:
    mdm = list(a.multi_dims_mapping)
    mdm[dim] = (*mdm[dim], md)
    return DistAttr(a.mesh, multi_dims_mapping=mdm, partial=a.partial)


def _given_dim(spec: TensorSpec, md: int) -> int | None:
    for t, dims in enumerate(spec.attr.multi_dims_mapping):
        if md in dims:
            return t
    return None


def _spec_at(args: Sequence[Arg], k: int, i: int | None) -> TensorSpec:
    a = args[k]
    if i is None:
        assert isinstance(a, TensorSpec)
        return a
    assert isinstance(a, tuple)
    return a[i]


def find_alternative(
    case: Case, kernel: Kernel, values: Sequence[Values], ins: Sequence[Slot],
    outs: Sequence[Slot], serial: Sequence[LocalValue], rng: Rng, collective: Collective | None = None,
) -> str | None:
    """A sharded alternative that verifies and needs less communication, described; or None.

    The *given* side is what the rule was called on (the inputs forward, the outputs reverse),
    the *derived* side what it inferred from them. For each mesh dim ``m`` that every derived
    attribute leaves replicated: restore ``m`` on every given-side dim that the call shards on
    ``m`` and the rule freed (so no all-gather over ``m`` is needed there), and try sharding
    derived-side dims on ``m`` (at least one; dims of the restored dims' sizes first). The first
    combination that computes the serial answer is the evidence.
    """
    forward = case.direction == "forward"
    given_args, derived_args = (case.inputs, case.outputs) if forward else (case.outputs, case.inputs)
    given0, derived0 = (ins, outs) if forward else (outs, ins)
    flat_derived = _flat_slots(derived0)
    for m in range(case.mesh.ndim):
        if case.mesh.shape[m] == 1 or any(
            m in a.sharded_mesh_dims or a.is_partial(m) for _, _, a in flat_derived
        ):
            continue
        given, restored = _restore_given(given_args, given0, m)
        if not restored:
            continue
        sizes = {_spec_at(given_args, k, i).shape[d] for k, i, d in restored}
        for derived in _derived_candidates(derived_args, derived0, m, sizes):
            new_ins, new_outs = (given, derived) if forward else (derived, given)
            try:
                got = run_sharded(case, kernel, values, new_ins, new_outs, rng, collective)
            except Exception:  # an alternative that cannot even run is not one
                continue
            if compare(got, serial) is None:
                side = "input" if forward else "output"
                return _describe_alternative(side, m, restored, new_ins, new_outs)
    return None


def _restore_given(given_args: Sequence[Arg], given0: Sequence[Slot], m: int
                   ) -> tuple[list[Slot], list[tuple[int, int | None, int]]]:
    """The given side with mesh dim ``m`` restored on every dim the call shards on ``m`` and the
    rule freed, and those (slot, element, dim)s."""
    given, restored = list(given0), []
    for k, i, a in _flat_slots(given0):
        dim = _given_dim(_spec_at(given_args, k, i), m)
        if dim is None or m in a.sharded_mesh_dims or a.is_partial(m):
            continue
        given = _with(given, k, i, _shard_on(a, dim, m))
        restored.append((k, i, dim))
    return given, restored


def _derived_candidates(derived_args: Sequence[Arg], derived0: Sequence[Slot], m: int,
                        sizes: set[int]) -> Iterator[list[Slot]]:
    """The derived side with derived dims sharded on ``m`` (at least one; dims of the restored
    dims' sizes first), at most MAX_ALTERNATIVES of them."""
    flat_derived = _flat_slots(derived0)
    choices: list[list[int | None]] = []
    for k, i, _ in flat_derived:
        shape = _spec_at(derived_args, k, i).shape
        dims = sorted((d for d in range(len(shape)) if shape[d] > 1),
                      key=lambda d: shape[d] not in sizes)
        choices.append([*dims, None])
    combos = (c for c in itertools.product(*choices) if any(d is not None for d in c))
    for combo in itertools.islice(combos, MAX_ALTERNATIVES):
        derived = list(derived0)
        for (k, i, a), d in zip(flat_derived, combo, strict=True):
            if d is not None:
                derived = _with(derived, k, i, _shard_on(a, d, m))
        yield derived


def _describe_alternative(
    side: str, m: int, restored: Sequence[tuple[int, int | None, int]], ins: Sequence[Slot],
    outs: Sequence[Slot],
) -> str:
    kept = ", ".join(f"{side} {k}{'' if i is None else f'[{i}]'} dim {d}" for k, i, d in restored)
    return (f"keeping {kept} sharded on mesh dim {m} also verifies: inputs {format_slots(ins)} -> "
            f"outputs {format_slots(outs)}")
