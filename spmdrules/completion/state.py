"""The working state of one completion run, and the per-topology index and caches it reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Final

from spmdrules.completion.cost import CostModel
from spmdrules.completion.memo import cached_spec, canonical_annotation
from spmdrules.completion.offers import RawOffer
from spmdrules.completion.planning import fits
from spmdrules.completion.repeats import find_blocks
from spmdrules.completion.result import WEAK_RANK, NoAnnotationError, OfferKind
from spmdrules.core.attr import DistAttr
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.graph.annotation import Annotation
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, Tensor
from spmdrules.graph.opschema import OpSchema

#: how often one tensor may change before it is frozen (a guard; no known model reaches it)
MAX_CHANGES: Final = 8
#: sweeps (one forward and one reverse each) before the pass stops and reports non-convergence
MAX_SWEEPS: Final = 64
#: replay repeated blocks (``completion_blocks``); off only to check that replaying changes nothing
REPLAY_BLOCKS = True
#: how many visited blocks of a run a block's entry state is compared with
RECENT_VISITS: Final = 4


FWD, REV, DEM = 0, 1, 2
#: one refused offer: (offer, reason, detail, kept); see ``State.rejected``
Refusal = tuple[RawOffer, str, str, int]
KINDS: Final[tuple[OfferKind, ...]] = ("forward", "reverse", "demand")


class State:
    """Per-tensor and per-op working arrays of one run, indexed by ``order``."""

    __slots__ = (
        "any_rejected", "attr", "changes", "frozen", "natural", "needs", "offers", "rank",
        "rejected", "shared_at", "spec",
    )

    def __init__(self, n_tensors: int, n_ops: int) -> None:
        self.attr: list[DistAttr | None] = [None] * n_tensors
        self.rank: list[int] = [WEAK_RANK] * n_tensors
        self.spec: list[TensorSpec | None] = [None] * n_tensors
        # offers per tensor (one per op and direction, in the order first made): None, the one
        # offer itself (most tensors get one: no list for them), or a list
        self.offers: list[RawOffer | list[RawOffer] | None] = [None] * n_tensors
        self.changes: list[int] = [0] * n_tensors
        self.frozen: list[bool] = [False] * n_tensors
        # offers refused per tensor: (offer, reason, detail, kept); ``kept`` is the position
        # among the op's operands of the one a conflict kept (its name ends the detail), or -1,
        # so that an entry names no tensor and reads the same in every layer of a stack. A
        # tuple, never changed in place: blocks gather and keep them as they are.
        self.rejected: list[tuple[Refusal, ...] | None] = [None] * n_tensors
        self.any_rejected = False  # no refusal anywhere yet: blocks need not compare them
        # per (block start, shared tensor): the tensor's offers when last read, and the block's
        # own among them (``blocks._block_offers``)
        self.shared_at: dict[tuple[int, int], tuple[Any, tuple[RawOffer, ...]]] = {}
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


# ---- one run -------------------------------------------------------------------------------------
class RunState:
    """One completion run over a graph: its working state, and the specs the rules are called on."""

    def __init__(self, graph: Graph, cost: CostModel,
                 plain_ops: frozenset[int] = frozenset()) -> None:
        self.g = graph
        self.cost = cost
        #: ops whose rules see their operands' masked sums as plain sums: completion could not
        #: prove that the masks they pair come from the same lookup (completion/masks.py)
        self.plain_ops = plain_ops
        self.ops = ops = graph.ops
        self.tensors = tensors = graph.tensors
        self.st = State(len(tensors), len(ops))
        self.rule_calls = 0
        self.placeholders: dict[tuple[ProcessMesh, tuple[int, ...]], TensorSpec] = {}
        self.fit_cache: dict[tuple[DistAttr, tuple[int, ...]], bool] = {}
        index = indices(graph)
        self.ins, self.outs, self.consumers = index.ins, index.outs, index.consumers
        self.queued, self.calls, self.shapes = index.queued, index.calls, index.shapes
        self.constants = index.constants
        self.sources, self.base = index.sources, index.base
        # a replayed block reuses an earlier block's answers, which may pair masks that this run
        # must see as plain sums: a run with ``plain_ops`` visits every op
        self.block_of, self.blocks = index.block_of, (index.blocks if REPLAY_BLOCKS and not
                                                      plain_ops else ())
        self.replays = 0
        # the tensors that blocks share (``blocks``), and whether the block visit open now
        # went past an offer to one of them
        self.is_shared = bytearray(len(tensors))
        for b in self.blocks:
            for i in b.shared:
                self.is_shared[i] = 1
        self.touched_shared = False
        self.ann_keys: list[Annotation | None] = []  # canonical annotations, with blocks
        # Worklists are one byte per op: a sweep finds the next pending op with bytearray.find,
        # so a visit costs the same whatever the model's size (a heap's log n does not).
        self.fwd_next = bytearray(len(ops))
        self.rev_next = bytearray(len(ops))
        self.pending = bytearray(len(ops))
        self.cur = -1
        self.direction = 1
        self.defaulted: set[int] = set()
        # The sweeps read dense arrays, never the Tensor objects: on large models those are
        # scattered in memory, and each visit would miss the cache.
        self.annotated = graph.annotations()
        self.ann: list[Annotation | None] = [None] * len(tensors)
        first: dict[int, tuple[int, ProcessMesh]] = {}  # by mesh identity: its first tensor
        for i, ann in self.annotated:
            self.ann[i] = ann
            m = ann.mesh
            f = first.get(id(m))
            if f is None or i < f[0]:
                first[id(m)] = (i, m)
        # the meshes in the order they first appear among the tensors
        meshes: dict[ProcessMesh, int] = {}
        for _, m in sorted(first.values(), key=first_of):
            meshes.setdefault(m, len(meshes))
        if not meshes:
            raise NoAnnotationError(
                f"graph {graph.name!r} has no annotated tensor, so completion has no mesh to "
                "start from; annotate at least one tensor with shard(tensor, mesh, spec)"
            )
        self.mesh_rank = meshes
        self.single_mesh: ProcessMesh | None = next(iter(meshes)) if len(meshes) == 1 else None
        if self.blocks:
            # equal annotations as one object (their attributes too), so that blocks compare
            # them by identity
            keys: list[Annotation | None] = [None] * len(tensors)
            for i, ann in self.annotated:
                keys[i] = canonical_annotation(ann)
            self.ann_keys = keys
        self.default_mesh = next(iter(meshes))

    # ---- specs --------------------------------------------------------------------------------
    def placeholder(self, mesh: ProcessMesh, shape: tuple[int, ...]) -> TensorSpec:
        key = (mesh, shape)
        s = self.placeholders.get(key)
        if s is None:
            s = TensorSpec._make(shape, DistAttr.replicated(mesh, len(shape)))
            self.placeholders[key] = s
        return s

    def spec_at(self, i: int, mesh: ProcessMesh) -> TensorSpec:
        """Tensor ``i`` as its op on ``mesh`` sees it (the spec its rule is called with)."""
        st = self.st
        s = st.spec[i]
        if s is not None and s.attr.mesh is mesh:
            return s
        a = st.attr[i]
        shape = self.shapes[i]
        if a is None:
            return self.placeholder(mesh, shape)
        if a.mesh is mesh or a.mesh == mesh:
            s = cached_spec(shape, a)
            st.spec[i] = s
            return s
        # A tensor from another mesh enters the op as the same layout on the op's mesh when
        # the meshes have one shape, else replicated; the edge gets a cross-mesh transfer.
        if a.mesh.shape == mesh.shape:
            return TensorSpec._make(shape, DistAttr._make(mesh, a.multi_dims_mapping,
                                                          a.partial_items))
        return self.placeholder(mesh, shape)

    def spec_fn(self, mesh: ProcessMesh) -> Callable[[Tensor], TensorSpec]:
        spec_at = self.spec_at

        def spec(t: Tensor) -> TensorSpec:
            return spec_at(t.order, mesh)

        return spec

    def best_known(self, idx: tuple[int, ...]) -> tuple[ProcessMesh, int, int]:
        """The op's mesh, the position in ``idx`` of its highest-ranked known tensor (-1: none)
        and that tensor's rank. Ties go to the later mesh, then the earlier position."""
        st = self.st
        attrs, ranks = st.attr, st.rank
        best, best_r = -1, WEAK_RANK - 1
        if self.single_mesh is not None:
            for pos, i in enumerate(idx):
                if attrs[i] is not None and ranks[i] > best_r:
                    best, best_r = pos, ranks[i]
            return self.single_mesh, best, best_r
        best_key = (best_r, -1)
        for pos, i in enumerate(idx):
            a = attrs[i]
            if a is not None:
                key = (ranks[i], self.mesh_rank.get(a.mesh, -1))
                if key > best_key:
                    best, best_key = pos, key
        if best < 0:
            return self.default_mesh, -1, WEAK_RANK
        a = attrs[idx[best]]
        assert a is not None
        return a.mesh, best, best_key[0]

    def is_fitting(self, attr: DistAttr, shape: tuple[int, ...]) -> bool:
        key = (attr, shape)
        v = self.fit_cache.get(key)
        if v is None:
            v = fits(attr, shape)
            self.fit_cache[key] = v
        return v


Call = tuple[Callable[..., SpmdInfo], tuple[Any, ...], Callable[..., SpmdInfo] | None,
              tuple[Any, ...], OpSchema, bool]


class Index:
    """Flat arrays of one graph topology, shared by every run on it.

    ``calls[k]`` is set for ops whose operands are one tensor per parameter (no list, no absent
    optional, not generic): their rules' bound entry points and attribute tails, so a visit calls
    the rule with the flat operand specs without touching the ``Op``; its last entry says whether
    the results are too (else the reverse rule goes through the ``Op``). Equal tails are shared,
    and so are equal calls, so the layers of a model read one. ``odd[k]`` keys an op without a
    call (``_Calls.op_key``), so that it has a signature and can repeat in a block all the same.
    """

    __slots__ = ("base", "block_of", "blocks", "calls", "constants", "consumers", "ins", "odd",
                 "outs", "producer", "queued", "shapes", "sources")

    def __init__(self, ops: tuple[Op, ...], tensors: tuple[Tensor, ...]) -> None:
        # One pass over the ops, reading each once: on large models every Op is a cache miss.
        ins: list[tuple[int, ...]] = []
        outs: list[tuple[int, ...]] = []
        calls: list[Call | None] = []
        # the ops without a call: a key of what their visit reads besides the tensors (None:
        # no key, the op repeats nothing; see ``_Calls.op_key``)
        odd: dict[int, tuple[Any, ...] | None] = {}
        calls_of = _Calls()
        seen = calls_of.seen
        # each op's signature code: equal for ops whose visits read the same rule entries,
        # attribute tails and schema (-1: none); see ``repeats``
        codes: list[int] = []
        last: tuple[Any, ...] = (None, None, None, None, -1)  # the last shareable call, its key
        res: tuple[int, ...] = ()
        producer = [-1] * len(tensors)
        cons: list[list[int]] = [[] for _ in tensors]
        add_in, add_out, add_call, add_code = ins.append, outs.append, calls.append, codes.append
        for k, op in enumerate(ops):
            # operands (results) that are all tensors read as they are: a list or an absent
            # optional has no ``order``. One or two read directly: most ops have that many, and
            # map's objects cost more than the reads.
            try:
                o: Any = op.operands
                n = len(o)
                idx = ((o[0].order,) if n == 1 else (o[0].order, o[1].order) if n == 2
                       else tuple(map(_ORDER, o)))
                plain_in = True
            except AttributeError:
                idx, plain_in = tuple(map(_ORDER, op.inputs)), False
            if idx == res:  # the results of the op before, alone (a chain): one tuple for both
                idx = res
            try:
                r: Any = op.results
                res = (r[0].order,) if len(r) == 1 else tuple(map(_ORDER, r))
                plain_out = True
            except AttributeError:
                res, plain_out = tuple(map(_ORDER, op.outputs)), False
            add_in(idx)
            add_out(res)
            if len(res) == 1:
                producer[res[0]] = k
            else:
                for i in res:
                    producer[i] = k
            if len(idx) == 1:
                cons[idx[0]].append(k)
            else:
                for i in dict.fromkeys(idx):
                    cons[i].append(k)
            schema = op.schema
            if schema.generic or not plain_in:
                key = calls_of.op_key(schema, op.attrs, op.operands, op.results)
                odd[k] = key
                add_call(None)
                add_code(-1 if key is None else calls_of.code(key))
                continue
            attrs = op.attrs
            if schema is last[0] and attrs is last[1] and plain_out is last[2]:
                add_call(last[3])  # the common case in a stack: an op like the one before
                add_code(last[4])
                continue
            hit = seen.get((id(schema), id(attrs), plain_out))
            if hit is not None:
                call, code, shareable = hit[0], hit[2], True
            else:
                call, code, shareable = calls_of.make(schema, attrs, plain_out)
            if shareable:
                last = (schema, attrs, plain_out, call, code)
            add_call(call)
            add_code(code)
        self.ins, self.outs, self.calls, self.odd = ins, outs, calls, odd
        self.producer = producer
        self.consumers = cons
        # a constant (an op without operands: full, arange) makes any layout of its result, so
        # its results are placed like the graph's sources: as a consumer needs, else replicated
        self.sources = [i for i, p in enumerate(producer) if p < 0 or not ins[p]]
        self.constants = [k for k, idx in enumerate(ins) if not idx]
        # offers count their op from the tensor's producer (else its first consumer), so one
        # offer is the same tuple in every layer of a stack (see completion_blocks)
        self.base = base = producer.copy()
        # the op a change of each tensor queues in reverse: its producer, but a constant's
        # visits do nothing (it has no operand to offer to, and ``Run`` places its results
        # after the sweeps), so the sweeps never queue one
        self.queued = queued = producer.copy()
        for i in self.sources:
            if base[i] < 0:
                base[i] = cons[i][0] if cons[i] else 0
            queued[i] = -1
        # the tensors' kinds (equal shape and dtype, equal id) and their shapes, interned: a
        # change of a tensor's shape or dtype rebuilds the topology
        kinds: dict[tuple[tuple[int, ...], str], int] = {}
        kind = [kinds.setdefault(m, len(kinds)) for m in map(_META, tensors)]
        interned: dict[tuple[int, ...], tuple[int, ...]] = {}
        shape_of = [interned.setdefault(shape, shape) for shape, _ in kinds]
        self.shapes = [shape_of[k] for k in kind]
        self.block_of, self.blocks = find_blocks(ins, outs, producer, self.consumers, codes, kind)


_ORDER: Final = attrgetter("order")
# the slots behind Tensor.shape and Tensor.dtype: one C call per tensor, not two properties
_META: Final = attrgetter("_shape", "_dtype")


class _Calls:
    """The ``Call`` of each (schema, attributes) of one topology, one object per distinct call."""

    def __init__(self) -> None:
        self.tails: dict[Any, tuple[Any, ...]] = {}
        self.entries: dict[int, tuple[Callable[..., SpmdInfo], Callable[..., SpmdInfo] | None]] = {}
        self.calls: dict[tuple[int, int, int, bool], Call] = {}
        # by the identity of an op's attribute tuple (often one tuple for many ops: ``()``),
        # holding the tuple so that its id stays unique
        self.seen: dict[tuple[int, int, bool], tuple[Call, tuple[Any, ...], int]] = {}
        # the signature code of each distinct call (by its identity: ``calls`` holds it) and of
        # each ``op_key``
        self.codes: dict[Any, int] = {}

    def code(self, key: Any) -> int:
        return self.codes.setdefault(key, len(self.codes))

    def make(self, schema: OpSchema, attrs: tuple[Any, ...],
             plain_out: bool) -> tuple[Call, int, bool]:
        """The call of an op of ``schema`` with ``attrs`` that ``seen`` does not hold yet, its
        signature code, and whether every op of ``schema`` with this very ``attrs`` object has
        it (not when its tails cannot be shared; else ``seen`` holds it now)."""
        rule = schema.rule
        entry = self.entries.get(id(rule))
        if entry is None:
            entry = self.entries[id(rule)] = (
                rule.infer_forward, rule.infer_reverse if rule.has_reverse else None)
        rev = schema.reverse_attr_values(attrs)
        fwd_tail, rev_tail = shared_tail(self.tails, schema, attrs), shared_tail(self.tails,
                                                                                   schema, rev)
        fwd = attrs if fwd_tail is None else fwd_tail
        back = rev if rev_tail is None else rev_tail
        ckey = (id(schema), id(fwd), id(back), plain_out)
        call = self.calls.get(ckey)
        if call is None:  # the call holds its tails: their ids stay unique
            call = self.calls[ckey] = (entry[0], fwd, entry[1], back, schema, plain_out)
        code = self.code(id(call))
        if fwd_tail is None or rev_tail is None:  # another op's would differ
            return call, code, False
        self.seen[(id(schema), id(attrs), plain_out)] = (call, attrs, code)
        return call, code, True

    def op_key(self, schema: OpSchema, attrs: tuple[Any, ...],
               operands: tuple[Any, ...], results: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """For an op visited through its ``Op`` (list operands, absent optionals, generic rules):
        what its visits read besides its tensors' state, as a key equal for two ops whose visits
        are the same up to which tensors they touch: the schema, the attribute values (by the
        shared tail) and the structure of its operands and results (a list's length, an absent
        optional); the flat tensors' shapes and dtypes are the slots'. None: the attributes
        cannot be compared (a nested list)."""
        tail = shared_tail(self.tails, schema, attrs)
        if tail is None:
            return None
        return (id(schema), id(tail), tuple(map(_structure, operands)),
                tuple(map(_structure, results)))


def _structure(v: Any) -> int:
    """One operand or result slot's structure: a tensor (-1), absent (-2), a list (its length)."""
    if v is None:
        return -2
    return len(v) if type(v) is tuple else -1


def shared_tail(
    tails: dict[Any, tuple[Any, ...]], schema: OpSchema, values: tuple[Any, ...]
) -> tuple[Any, ...] | None:
    """The first tail of ``schema``'s ops equal to ``values``, value for value and type for type
    (1, 1.0 and True stay apart, and a list from an equal tuple), so equal ops share one; None
    if ``values`` cannot be compared so (a nested list)."""
    try:
        key = (schema, *((type(v), (*v,) if type(v) is list else v) for v in values))
        return tails.setdefault(key, values)
    except TypeError:
        return None


def indices(graph: Graph) -> Index:
    """The completion index of ``graph``'s topology, built once and kept with the graph until
    it changes (``Graph.derived``)."""
    index: Index = graph.derived("completion.index", lambda: Index(graph.ops, graph.tensors))
    return index


def first_of(entry: tuple[int, ProcessMesh]) -> int:
    return entry[0]


def offer_key(o: RawOffer) -> tuple[int, int]:
    """The tie-break: the producer's forward offer first, then consumers in topological order."""
    return (0 if o[3] == FWD else 1, o[2])


def origin_key(o: RawOffer) -> tuple[bool, tuple[int, int]]:
    """The tie-break among offers of a tensor's attribute and rank for its origin: a one-operand
    op's demand (no driver; see ``Sweeps.forward``) only echoes the rank of the tensor it asks
    of, so the offer that gave the tensor that rank is its origin, when there is one."""
    return (o[3] == DEM and o[4] < 0, offer_key(o))


def project(ann: Any, offered: DistAttr, rank: int) -> DistAttr | None:
    """An offer seen through an annotation: closed dims as annotated, hinted open dims keep their
    hint unless the offer outranks the annotation, other open dims as offered. None if the
    offer's mesh is not the annotation's."""
    if offered.mesh != ann.mesh:
        return None
    # the annotation's partial mesh dims are taken: an open dim split over one of them would
    # make the tensor split and pending on one mesh dim at once (no layout)
    used: set[int] = {m for m, _ in ann.partial}
    dims: list[tuple[int, ...] | None] = []
    outrank = rank > 2 * ann.priority + 1
    for spec, closed in zip(ann.dims, ann.closed, strict=True):
        if closed or (spec is not None and not outrank):
            dims.append(tuple(spec))
            used.update(spec)
        else:
            dims.append(None)
    mdm: list[tuple[int, ...]] = []
    for d, fixed in enumerate(dims):
        if fixed is not None:
            mdm.append(fixed)
        else:
            ms = tuple(m for m in offered.multi_dims_mapping[d] if m not in used)
            used.update(ms)
            mdm.append(ms)
    # a partial the user wrote stands; otherwise the offer's, on mesh dims still free
    part = ann.partial or tuple((m, rt) for m, rt in offered.partial_items if m not in used)
    return DistAttr._make(ann.mesh, tuple(mdm), tuple(part))
