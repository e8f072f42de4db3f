"""Every op of a model that cannot be mapped, at once, with the rule family that could serve it.

An importer records each node it cannot map (no converter for its op, or a converter refusing an
attribute) in an ``UnmappedReport`` and goes on with the rest of the model; at the end it raises
``UnmappedOpsError`` carrying the report (``spmdrules import MODEL --check`` prints it). A node
reading the result of an unmapped node is mapped on a stand-in of the source's shape and dtype
where the importer knows them (torch); where it does not (ONNX), such a node is only looked up
in the converter table, and counted as not tried if it has a converter.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spmdrules.importers import families
from spmdrules.importers.errors import UnmappedOpError

#: how many nodes of one op the report names before it counts the rest
SHOWN_NODES = 5


@dataclass(frozen=True)
class Unmapped:
    """One node that cannot be mapped: its name (with its module path), its op, and why."""

    node: str
    op: str
    why: str = ""
    #: the op's own name (``families.base_name``) and its source framework's categories
    base: str = ""
    categories: tuple[str, ...] = ()
    like: tuple[str, ...] = ()


@dataclass
class UnmappedReport:
    """The unmapped nodes of one model, grouped by op in the order first met."""

    model: str
    nodes: list[Unmapped] = field(default_factory=list)
    #: nodes with a converter that read an unmapped result and so were not tried
    untried: list[str] = field(default_factory=list)

    def add(self, err: UnmappedOpError, *, node: str | None = None) -> None:
        """Record ``err`` (``node`` overrides its node name: the module path and node)."""
        self.nodes.append(Unmapped(node or err.node, err.op, err.why, err.base, err.categories,
                                   err.like))

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def by_op(self) -> dict[str, list[Unmapped]]:
        """Op -> its unmapped nodes, in graph order."""
        out: dict[str, list[Unmapped]] = {}
        for u in self.nodes:
            out.setdefault(u.op, []).append(u)
        return out

    def counts(self) -> dict[str, int]:
        """Op -> how many of its nodes cannot be mapped."""
        return {op: len(us) for op, us in self.by_op().items()}

    def format(self) -> str:
        """One block per op: its count, its nodes, the reasons, and the family that serves it."""
        if not self.nodes:
            return f"{self.model}: every op maps onto a registered op"
        groups = self.by_op()
        lines = [f"{self.model}: {len(groups)} op(s) in {len(self.nodes)} node(s) cannot be "
                 "mapped onto a registered op:"]
        for op, us in groups.items():
            names = ", ".join(u.node for u in us[:SHOWN_NODES])
            more = f" and {len(us) - SHOWN_NODES} more" if len(us) > SHOWN_NODES else ""
            lines.append(f"  {op} x{len(us)}: {names}{more}")
            lines.extend(f"    why: {why}" for why in dict.fromkeys(u.why for u in us if u.why))
            lines.append(f"    {families.describe(us[0].base, us[0].categories, us[0].like)}")
        if self.untried:
            shown = ", ".join(self.untried[:SHOWN_NODES])
            more = f" and {len(self.untried) - SHOWN_NODES} more" if len(
                self.untried) > SHOWN_NODES else ""
            lines.append(f"  {len(self.untried)} node(s) with a converter read an unmapped "
                         f"result and were not tried: {shown}{more}")
        lines.append("Map each onto its family with a converter (docs/importers.md, 'Converters "
                     "from user code'), or rewrite the model around it.")
        return "\n".join(lines)

    def error(self) -> UnmappedOpError:
        """The error to raise: the one node's own ``UnmappedOpError`` when it is alone, else
        ``UnmappedOpsError`` listing them all."""
        return UnmappedOpsError(self)


class Blocked:
    """The result of an unmapped node where no stand-in can be made: reading it raises
    ``Untried``, and the reader is counted as not tried."""

    def __init__(self, node: str) -> None:
        self.node = node


class Untried(Exception):
    """A converter read a ``Blocked`` value."""


class UnmappedOpsError(UnmappedOpError):
    """Ops of the model cannot be mapped: every one of them is in ``report``. ``node``, ``op``
    and the suggestions are the first unmapped node's, as ``UnmappedOpError`` gives them; the
    message lists them all (``UnmappedReport.format``), or is the one node's own when alone."""

    def __init__(self, report: UnmappedReport) -> None:
        first = report.nodes[0]
        super().__init__(first.node, first.op, None, first.why, base=first.base,
                         categories=first.categories, like=first.like)
        self.report = report
        if len(report.nodes) > 1 or report.untried:
            self.args = (report.format(),)


__all__ = ["SHOWN_NODES", "Blocked", "Unmapped", "UnmappedOpsError", "UnmappedReport", "Untried"]
