"""``explain(result, tensor)``: where a tensor's attribute came from, in words.

It reads only the completion result: the tensor's origin, the chain of ops (and directions) its
attribute travelled through back to an annotation, the offers that lost and why (priority,
annotation, cost, divisibility, rule), the splits dropped at the tensor (``Completion.dropped``)
and the reshards the tensor causes with their plans.
"""

from __future__ import annotations

from dataclasses import dataclass

from spmdrules.completion.driver import Completion
from spmdrules.completion.reshard_plans import fmt_bytes
from spmdrules.completion.result import Origin
from spmdrules.graph.nodes import Tensor

MAX_CHAIN = 64  # a chain longer than this is cut (it only ever repeats one layer's pattern)

_VERB = {
    "forward": "made by the forward rule of",
    "reverse": "inferred by the reverse rule of",
    "demand": "needed by",
}


@dataclass(frozen=True, slots=True)
class Link:
    """One hop of a chain: ``tensor`` got its attribute from ``op`` in ``kind``, driven by
    ``driver`` (the next link)."""

    tensor: str
    attr: str
    kind: str
    op: str | None
    driver: str | None


def chain(result: Completion, tensor: Tensor | str) -> tuple[Link, ...]:
    """The hops from ``tensor`` back to the annotation its attribute came from."""
    g = result.graph
    t = g.tensor(tensor) if isinstance(tensor, str) else tensor
    out: list[Link] = []
    seen: set[str] = set()
    name: str | None = t.name
    while name is not None and name not in seen and len(out) < MAX_CHAIN:
        seen.add(name)
        o: Origin = result.origin(name)
        out.append(Link(name, result.attr(name).mapping_str(), o.kind,
                        o.op if o.kind != "annotation" or o.note else None, o.driver))
        if o.kind in ("annotation", "default"):
            break
        name = o.driver
    return tuple(out)


def explain(result: Completion, tensor: Tensor | str) -> str:
    """A readable account of one tensor's attribute (see the module docs)."""
    g = result.graph
    t = g.tensor(tensor) if isinstance(tensor, str) else tensor
    a = result.attr(t)
    lines = [
        f"{t.name} {list(t.shape)} {t.dtype}: {a.mapping_str()} "
        f"[{', '.join(map(repr, a.placements))}] on mesh {list(a.mesh.dim_names)}="
        f"{list(a.mesh.shape)}",
        *_origin_lines(result, t),
        *_chain_lines(result, t),
        *_lost_lines(result, t),
    ]
    lines.extend(f"  dropped split: {d}" for d in result.dropped if d.tensor == t.name)
    lines.extend(_reshard_lines(result, t))
    return "\n".join(lines)


def _origin_lines(result: Completion, t: Tensor) -> list[str]:
    """Where the attribute came from: the annotation, a default or an op's offer."""
    o = result.origin(t)
    ann = t.annotation
    lines = []
    if ann is not None:
        closed = "closed" if ann.is_fully_closed else (
            "open dims " + ", ".join(map(str, ann.open_dims)))
        lines.append(f"  annotated {ann.spec_str()} with priority {ann.priority} ({closed})"
                     + (f"; {o.note}" if o.note else ""))
        if ann.source:
            lines.append(f"  by {ann.source}")
    elif o.kind == "default":
        lines.append("  no annotation reaches it: replicated by default")
    else:
        lines.append(f"  inferred with priority {o.priority}: {_VERB[o.kind]} {o.op}")
    if t.name in result.unconverged:
        lines.append("  NOT converged: its offers kept overturning each other, so completion "
                     "froze it at this attribute; the reshards around it make that consistent")
    return lines


def _chain_lines(result: Completion, t: Tensor) -> list[str]:
    """The chain of offers back to an annotation or a default, when there is one."""
    hops = chain(result, t)
    if not (len(hops) > 1 or (hops and hops[0].op is not None)):
        return []
    lines = ["  chain:"]
    for h in hops:
        if h.kind == "annotation" and h.op is None:
            lines.append(f"    {h.tensor} {h.attr}  <- annotation")
        elif h.kind == "default":
            lines.append(f"    {h.tensor} {h.attr}  <- default")
        else:
            lines.append(f"    {h.tensor} {h.attr}  <- {h.kind} via {h.op}"
                         + (f" from {h.driver}" if h.driver else ""))
    return lines


def _lost_lines(result: Completion, t: Tensor) -> list[str]:
    """The offers that lost, with why."""
    lost = result.rejected(t)
    if not lost:
        return ["  no alternative was offered"]
    lines = ["  alternatives that lost:"]
    for r in lost:
        src = f"{r.offer.kind} of {r.offer.op}" if r.offer.op else r.offer.kind
        lines.append(f"    {r.offer.attr.mapping_str()} ({src}): {r.reason}: {r.detail}")
    return lines


def _reshard_lines(result: Completion, t: Tensor) -> list[str]:
    """The reshards on the tensor's edges, with their plans."""
    edges = result.reshards_of(t)
    if not edges:
        return ["  reshards: none"]
    lines = ["  reshards:"]
    for e in edges:
        p = e.plan(result.cost)
        where = f"into {e.ops_str}" if e.side == "operand" else f"out of {e.op}"
        lines.append(f"    {where}: {e.src.mapping_str()} => {e.dst.mapping_str()}, "
                     f"{fmt_bytes(p.total_bytes)} (lower bound "
                     f"{fmt_bytes(p.lower_bound_bytes)}), {p.time * 1e6:.1f} us")
        lines.extend(f"      {s}" for s in p.steps)
    return lines
