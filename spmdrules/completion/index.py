"""The per-topology index of completion: flat arrays of a graph's ops and tensors, and the rules'
entry points each op is called through, shared by every run on the topology."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Final, NamedTuple

from spmdrules.completion.repeats import find_blocks
from spmdrules.core.spec import SpmdInfo
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, Tensor, tensor_meta
from spmdrules.graph.opschema import OpSchema


class Call(NamedTuple):
    """How a visit calls an op's rules without touching the ``Op`` (``Index.calls``)."""

    forward: Callable[..., SpmdInfo]
    #: the attribute values after the operand specs, shared by equal ops
    forward_tail: tuple[Any, ...]
    reverse: Callable[..., SpmdInfo] | None  # None: the rule has no reverse
    reverse_tail: tuple[Any, ...]
    schema: OpSchema
    #: the results are one tensor per parameter too (else the reverse goes through the ``Op``)
    plain_results: bool


class _Shared(NamedTuple):
    """The call that every op of ``schema`` with this very ``attrs`` object (and results as
    ``plain_out`` says) has, and its signature code."""

    schema: OpSchema
    attrs: tuple[Any, ...]  # held, so that its id stays unique
    plain_out: bool
    call: Call
    code: int


class Index:
    """Flat arrays of one graph topology, shared by every run on it.

    ``calls[k]`` is set for ops whose operands are one tensor per parameter (no list, no absent
    optional, not generic): their rules' bound entry points and attribute tails, so a visit calls
    the rule with the flat operand specs without touching the ``Op``. Equal tails are shared,
    and so are equal calls, so the layers of a model read one. ``odd[k]`` keys an op without a
    call (``_Calls.op_key``), so that it has a signature and can repeat in a block all the same.
    """

    __slots__ = ("base", "block_of", "blocks", "calls", "constants", "consumers", "ins", "odd",
                 "outs", "producer", "queued", "shapes", "sources")

    def __init__(self, ops: tuple[Op, ...], tensors: tuple[Tensor, ...]) -> None:
        self.producer = [-1] * len(tensors)
        self.consumers: list[list[int]] = [[] for _ in tensors]
        table = _Calls()
        codes = self._read_ops(ops, table)
        self.calls, self.odd = table.of_ops, table.odd
        self._place_sources()
        kind = self._read_tensors(tensors)
        self.block_of, self.blocks = find_blocks(self.ins, self.outs, self.producer,
                                                 self.consumers, codes, kind)

    def _read_ops(self, ops: tuple[Op, ...], table: _Calls) -> list[int]:
        """Each op's operand and result orders, the tensors' producers and consumers, and each
        op's call (``table``); returns each op's signature code: equal for ops whose visits read
        the same rule entries, attribute tails and schema (-1: none; see ``repeats``)."""
        # One pass over the ops, reading each once: on large models every Op is a cache miss.
        ins: list[tuple[int, ...]] = []
        outs: list[tuple[int, ...]] = []
        codes: list[int] = []
        res: tuple[int, ...] = ()
        producer, cons = self.producer, self.consumers
        add_in, add_out, add_code, of_op = ins.append, outs.append, codes.append, table.of_op
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
            add_code(of_op(k, op, plain_in, plain_out))
        self.ins, self.outs = ins, outs
        return codes

    def _place_sources(self) -> None:
        """The sources, the constants, and each tensor's base op and the op it queues."""
        producer, ins, cons = self.producer, self.ins, self.consumers
        # a constant (an op without operands: full, arange) makes any layout of its result, so
        # its results are placed like the graph's sources: as a consumer needs, else replicated
        self.sources = [i for i, p in enumerate(producer) if p < 0 or not ins[p]]
        self.constants = [k for k, idx in enumerate(ins) if not idx]
        # offers count their op from the tensor's producer (else its first consumer), so one
        # offer is the same record in every layer of a stack (see completion_blocks)
        self.base = base = producer.copy()
        # the op a change of each tensor queues in reverse: its producer, but a constant's
        # visits do nothing (it has no operand to offer to, and ``Run`` places its results
        # after the sweeps), so the sweeps never queue one
        self.queued = queued = producer.copy()
        for i in self.sources:
            if base[i] < 0:
                base[i] = cons[i][0] if cons[i] else 0
            queued[i] = -1

    def _read_tensors(self, tensors: Sequence[Tensor]) -> list[int]:
        """The tensors' shapes, interned, and their kinds (equal shape and dtype, equal id): a
        change of a tensor's shape or dtype rebuilds the topology."""
        kinds: dict[tuple[tuple[int, ...], str], int] = {}
        kind = [kinds.setdefault(m, len(kinds)) for m in map(tensor_meta, tensors)]
        interned: dict[tuple[int, ...], tuple[int, ...]] = {}
        shape_of = [interned.setdefault(shape, shape) for shape, _ in kinds]
        self.shapes = [shape_of[k] for k in kind]
        return kind


_ORDER: Final = attrgetter("order")


class _Calls:
    """The ``Call`` of each (schema, attributes) of one topology, one object per distinct call."""

    def __init__(self) -> None:
        self.tails: dict[Any, tuple[Any, ...]] = {}
        self.entries: dict[int, tuple[Callable[..., SpmdInfo], Callable[..., SpmdInfo] | None]] = {}
        self.calls: dict[tuple[int, int, int, bool], Call] = {}
        # by the identity of an op's schema and attribute tuple (often one tuple for many ops:
        # ``()``)
        self.seen: dict[tuple[int, int, bool], _Shared] = {}
        # the signature code of each distinct call (by its identity: ``calls`` holds it) and of
        # each ``op_key``
        self.codes: dict[Any, int] = {}
        #: per op, its call (None: visited through its ``Op``)
        self.of_ops: list[Call | None] = []
        #: the ops without a call: a key of what their visit reads besides the tensors (None:
        #: no key, the op repeats nothing; see ``op_key``)
        self.odd: dict[int, tuple[Any, ...] | None] = {}
        # the last shareable call: the common case in a stack is an op like the one before
        self.last: _Shared | None = None

    def code(self, key: Any) -> int:
        return self.codes.setdefault(key, len(self.codes))

    def of_op(self, k: int, op: Op, plain_in: bool, plain_out: bool) -> int:
        """Record op ``k``'s call (``of_ops``, or ``odd``); its signature code."""
        schema = op.schema
        if schema.generic or not plain_in:
            key = self.op_key(schema, op.attrs, op.operands, op.results)
            self.odd[k] = key
            self.of_ops.append(None)
            return -1 if key is None else self.code(key)
        attrs = op.attrs
        last = self.last
        if (last is not None and schema is last.schema and attrs is last.attrs
                and plain_out is last.plain_out):
            self.of_ops.append(last.call)
            return last.code
        shared = self.seen.get((id(schema), id(attrs), plain_out))
        if shared is None:
            call, code = self.make(schema, attrs, plain_out)
            shared = self.seen.get((id(schema), id(attrs), plain_out))
        else:
            call, code = shared.call, shared.code
        if shared is not None:
            self.last = shared
        self.of_ops.append(call)
        return code

    def make(self, schema: OpSchema, attrs: tuple[Any, ...], plain_out: bool) -> tuple[Call, int]:
        """The call of an op of ``schema`` with ``attrs`` that ``seen`` does not hold yet, and
        its signature code; ``seen`` holds it now when every op of ``schema`` with this very
        ``attrs`` object has it (not when its tails cannot be shared)."""
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
            call = self.calls[ckey] = Call(entry[0], fwd, entry[1], back, schema, plain_out)
        code = self.code(id(call))
        if fwd_tail is not None and rev_tail is not None:  # else another op's would differ
            self.seen[(id(schema), id(attrs), plain_out)] = _Shared(schema, attrs, plain_out,
                                                                    call, code)
        return call, code

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
