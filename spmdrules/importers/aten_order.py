"""Unobservable sorts: a permutation that a program applies and undoes, found on the exported
graph and imported as the identity.

Hugging Face's default experts path (``experts_implementation="grouped_mm"``) sorts the token
copies by expert id, multiplies each group by its expert's weights, and restores the order by the
inverse permutation. Its result does not depend on the permutation: every op between the sort
and the restore works row by row. Imported op by op, the sort needs its axis whole (its values
are a function of every element), so the token copies of a batch split on a mesh dim are
gathered, and the experts' rows are computed in an order that mixes every process's tokens. No
per-op rule can see that the order is undone later; the exported graph can, so the importer
proves it there and imports the sort as the identity: the copies stay in their tokens' order and
their split, and each grouped matmul reads each row's group from the unsorted ids.

The proof, for ``values, perm = sort(ids)`` along the only dim of a 1-D ``ids`` of length S:

* ``ids`` are the indices of a ``topk`` over a dim of size E (each in [0, E)), reshaped;
* ``values`` are read only by ``histc(float(values), bins=E, min=0, max=E-1)`` whose ``cumsum``
  is read only as the group ends (``offs``) of ``grouped_mm`` calls with E groups: every copy is
  counted, so row s of the sorted order is in group ``values[s]``;
* ``perm`` is read only as the index of rows (``x[perm]``, ``x[perm // k]`` of a tensor of S / k
  rows) and by ``inv[perm] = arange(S)`` (``index_put`` into an empty tensor), whose ``inv`` is read
  only as the index of rows, each of a tensor of the region;
* the region (every tensor computed from the rows read by ``perm``) has S rows and is read only by
  row-wise ops: elementwise ops (torch's ``pointwise`` category, and copies) whose operands of
  the result's rank and more than one row are of the region, and whose others (scalars, lower
  ranks, one row: broadcast over the rows) are not,
  splits, slices and unsqueezes off dim 0, views that keep dim 0, the grouped matmuls above (rows
  as input; every reader of the group ends is one), and the restore ``z[inv]``. Nothing of it is
  an output.

Then ``z[inv]`` equals the region computed on the unsorted rows, which is what the import builds:
``x[perm]`` is ``x``, ``x[perm // k]`` repeats each row of x k times, ``z[inv]`` is ``z``, a grouped
matmul multiplies row s by ``weight[ids[s]]`` (spmdrules.importers.aten_experts), and the sort,
the histogram, the ends and the inverse are not imported. A sort that fails any condition is
imported as itself (exact, with its axis whole).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.aten import Ctx, tags
from spmdrules.importers.aten_experts import grouped_by_ids
from spmdrules.importers.converters import key
from spmdrules.importers.unmapped import Blocked

#: a node's import under the proof: (its context, its bound arguments, the imported values by
#: node name) -> its value
Rewrite = Callable[[Ctx, dict[str, Any], Mapping[str, Any]], Any]
#: node name -> its rewrite (None: the node is not imported: nothing reads it)
Rewrites = dict[str, Rewrite | None]

#: the op category (torch's operator tag) of the elementwise ops: "each element of the output
#: is computed only by accessing the corresponding element of all the broadcasted inputs"
#: (torch's tags.yaml), so each row of the result from the same row of the operands that span
#: the rows; no random op carries it
POINTWISE = "pointwise"
#: the same elements as their operand, which torch does not tag pointwise (a dtype copy, an alias)
_COPIES = frozenset({"_to_copy.default", "alias.default"})
#: ops that keep rows whole where their ``dim`` argument (position, default) is not dim 0. A
#: list, because the facts it holds are in no table: torch tags no op by the dims it acts
#: along, and each names its dim at its own position. The rules cannot stand in: a rule that
#: lets dim 0 be split without communication says each block's rows come from the block (what a
#: row's position may decide: tril / triu, a slice of dim 0), not that a permutation of the rows
#: commutes with the op, which the proof needs.
_OFF_ROWS = {"split_with_sizes.default": (2, 0), "split.Tensor": (2, 0),
             "slice.Tensor": (1, 0), "unsqueeze.default": (1, 0)}
_VIEWS = frozenset({"view.default", "reshape.default", "_unsafe_view.default"})
_LOOKS = frozenset({"view.default", "reshape.default", "_unsafe_view.default", "clone.default",
                    "alias.default"})


def _name(node: Any) -> str:
    """``getitem``, or the ATen table's key of the node's op (``transformers.`` kept)."""
    return "getitem" if node.target is operator.getitem else key(node.target)


def _shape(node: Any) -> tuple[int, ...] | None:
    v: Any = node.meta.get("val") if hasattr(node, "meta") else None
    return tuple(int(d) for d in v.shape) if hasattr(v, "shape") else None


def _users(node: Any) -> list[Any]:
    """The node's readers, runtime checks of its metadata left out."""
    return [u for u in node.users if not _name(u).startswith("_assert")]


def _arg(node: Any, i: int, key: str, default: Any = None) -> Any:
    return node.args[i] if len(node.args) > i else node.kwargs.get(key, default)


def _groups(ids: Any) -> int | None:
    """E when ``ids`` are reshaped indices of a topk over a dim of size E, else None."""
    while _name(ids) in _LOOKS:
        ids = ids.args[0]
    if _name(ids) != "getitem" or ids.args[1] != 1 or _name(ids.args[0]) != "topk.default":
        return None
    top = ids.args[0]
    shape = _shape(top.args[0])
    if shape is None:
        return None
    d: int = _arg(top, 2, "dim", -1)
    return shape[d]


def _outputs(sort: Any) -> tuple[Any, Any] | None:
    got: dict[int, Any] = {}
    for u in _users(sort):
        if _name(u) != "getitem":
            return None
        got[u.args[1]] = u
    return (got.get(0), got.get(1)) if set(got) <= {0, 1} and 1 in got else None


class _Proof:
    """The conditions of the module docs for one sort; ``rewrites`` when they hold."""

    def __init__(self, sort: Any) -> None:
        self.sort = sort
        self.rewrites: Rewrites = {}
        self.region: set[Any] = set()
        self.frontier: list[Any] = []
        self.restores: set[Any] = set()
        self.grouped: set[Any] = set()
        #: operands of the region's elementwise ops that span the rows (of the region, then) and
        #: that broadcast over them (not of the region: their dim 0 is not the rows')
        self.spanning: set[Any] = set()
        self.broadcast: set[Any] = set()

    def holds(self) -> bool:
        sort, shape = self.sort, _shape(self.sort.args[0])
        outs = _outputs(sort)
        if shape is None or len(shape) != 1 or outs is None:
            return False
        self.rows, (values, perm) = shape[0], outs
        groups = _groups(sort.args[0])
        if groups is None or not self._ends(values, groups) or not self._perm(perm):
            return False
        return self._region() and bool(self.grouped) and self.grouped == set(_users(self.ends))

    def _ends(self, values: Any, groups: int) -> bool:
        self.ends: Any = None
        if values is None:
            return True
        for cast in _users(values):
            hist = _users(cast)
            if _name(cast) != "_to_copy.default" or len(hist) != 1:
                return False
            h = hist[0]
            if _name(h) != "histc.default" or (h.args[1:4] != (groups, 0, groups - 1)):
                return False
            sums = _users(h)
            if len(sums) != 1 or _name(sums[0]) != "cumsum.default" or self.ends is not None:
                return False
            self.ends = sums[0]
            for g in _users(self.ends):
                w = _shape(g.args[1])
                if (_name(g) != "transformers.grouped_mm_fallback.default" or g.args[2] is not self.ends
                        or w is None or w[0] != groups):
                    return False
            self.rewrites.update(dict.fromkeys((cast.name, h.name, self.ends.name)))
        self.rewrites[values.name] = None
        return True

    def _perm(self, perm: Any) -> bool:
        self.rewrites[perm.name] = None
        for u in _users(perm):
            kind = _name(u)
            if kind == "index.Tensor" and list(u.args[1]) == [perm] and self._rows(u.args[0]):
                self.rewrites[u.name] = _same
                self.frontier.append(u)
            elif kind == "div.Tensor_mode" and u.args[0] is perm:
                if not self._copies(u):
                    return False
            elif kind != "index_put.default" or not self._inverse(u, perm):
                return False
        return True

    def _rows(self, x: Any, rows: int | None = None) -> bool:
        shape = _shape(x)
        return shape is not None and len(shape) >= 1 and shape[0] == (rows or self.rows)

    def _copies(self, div: Any) -> bool:
        """``x[perm // k]``: each row of x, k times in a row."""
        k = div.args[1]
        if div.kwargs.get("rounding_mode") != "floor" or not isinstance(k, int) or k < 1 or (
                self.rows % k):
            return False
        self.rewrites[div.name] = None
        for u in _users(div):
            if _name(u) != "index.Tensor" or list(u.args[1]) != [div] or not self._rows(
                    u.args[0], self.rows // k):
                return False
            self.rewrites[u.name] = _repeat(k)
            self.frontier.append(u)
        return True

    def _inverse(self, put: Any, perm: Any) -> bool:
        """``inv[perm] = arange(S)`` into an empty tensor, read only as ``z[inv]``."""
        base, idx, src = put.args[0], list(put.args[1]), put.args[2]
        if idx != [perm] or _arg(put, 3, "accumulate", False) or not _name(base).startswith(
                ("empty", "new_empty")) or _name(src) not in ("arange.start_step", "arange.default"):
            return False
        ends = [a for a in src.args if isinstance(a, int)]
        if ends not in ([self.rows], [0, self.rows], [0, self.rows, 1]) or (
                len(_users(base)) != 1 or len(_users(src)) != 1):
            return False
        self.rewrites.update(dict.fromkeys((put.name, base.name, src.name)))
        for u in _users(put):
            if _name(u) != "index.Tensor" or list(u.args[1]) != [put]:
                return False
            self.restores.add(u)
            self.rewrites[u.name] = _same
        return True

    def _region(self) -> bool:
        todo = list(self.frontier)
        while todo:
            n = todo.pop()
            if n in self.region:
                continue
            self.region.add(n)
            if not self._rows(n) and not isinstance(n.meta.get("val"), list | tuple):
                return False  # a split's results are checked as its getitems
            for u in _users(n):
                if u in self.restores:
                    if u.args[0] is not n:
                        return False
                    continue
                nxt = self._rowwise(u, n)
                if nxt is None:
                    return False
                todo += nxt
        return self.spanning <= self.region and not self.broadcast & self.region and all(
            r.args[0] in self.region for r in self.restores)

    def _rowwise(self, u: Any, n: Any) -> list[Any] | None:
        """The region's nodes that ``u`` adds when it reads ``n`` row by row, else None."""
        kind = _name(u)
        if kind == "transformers.grouped_mm_fallback.default":
            if u.args[0] is not n or u.args[2] is not self.ends or self.ends is None:
                return None
            self.grouped.add(u)
            self.rewrites[u.name] = _grouped(self.sort.args[0].name)
            return [u]
        if kind == "getitem" or (kind in _VIEWS and self._rows(u)):
            return [u]
        if kind in _OFF_ROWS:
            shape = _shape(n)
            d = _arg(u, *_OFF_ROWS[kind][:1], "dim", _OFF_ROWS[kind][1])
            rank = len(shape) + (kind == "unsqueeze.default") if shape else 0
            return [u] if isinstance(d, int) and d % max(rank, 1) != 0 else None
        if kind in _COPIES or POINTWISE in tags(u):
            out = _shape(u)
            if out is None:
                return None
            for a in _tensors(u.args):
                s = _shape(a)
                spans = s is not None and len(s) == len(out) and s[0] != 1
                (self.spanning if spans else self.broadcast).add(a)
            return [u]
        return None


def _tensors(args: Iterable[Any]) -> list[Any]:
    return [a for a in args if hasattr(a, "meta")]


def _same(c: Ctx, a: dict[str, Any], env: Mapping[str, Any]) -> Tensor:
    """``x[perm]`` and ``z[inv]`` with the identity permutation."""
    x: Tensor = a["self"]
    return x


def _repeat(k: int) -> Rewrite:
    """``x[perm // k]`` with the identity permutation: each row of x, k times in a row."""
    def convert(c: Ctx, a: dict[str, Any], env: Mapping[str, Any]) -> Tensor:
        x: Tensor = a["self"]
        rows = c.call("expand", c.call("unsqueeze", x, axis=[1], part="copy"),
                      shape=[x.shape[0], k, *x.shape[1:]], part="copies")
        return c.call("reshape", rows, shape=c.shape)
    return convert


def _grouped(ids: str) -> Rewrite:
    """A grouped matmul of rows in the ids' order: row s by ``weight[ids[s]]``."""
    def convert(c: Ctx, a: dict[str, Any], env: Mapping[str, Any]) -> Tensor:
        return grouped_by_ids(c, a["input"], a["weight"], env[ids])
    return convert


def unobservable_sorts(graph: Any) -> Rewrites:
    """The rewrites of every sort of ``graph`` (a torch.fx graph) whose order the program undoes
    (the module docs' proof)."""
    out: Rewrites = {}
    for node in graph.nodes:
        if node.op == "call_function" and _name(node) in ("sort.default", "sort.stable"):
            proof = _Proof(node)
            if proof.holds():
                out.update(proof.rewrites)
                out[node.name] = _sorted_as_is
    return out


def _sorted_as_is(c: Ctx, a: dict[str, Any], env: Mapping[str, Any]
                  ) -> tuple[Tensor, Blocked]:
    """The identity permutation's values: the ids; its indices are read by no import."""
    ids: Tensor = a["self"]
    return ids, Blocked(c.node.name)


__all__ = ["Rewrite", "Rewrites", "unobservable_sorts"]
