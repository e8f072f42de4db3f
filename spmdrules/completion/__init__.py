"""The completion pass: every tensor's attribute, from a few annotations and the op rules.

Propagation. Every op offers attributes to its tensors: its forward rule offers each result the
attribute the op produces (``forward``) and each operand the attribute the op needs given its
other operands (``demand``); its reverse rule offers each operand the attribute that produces the
results' current attributes (``reverse``). Each tensor keeps every offer and takes the best one.
Ops are visited over a worklist in alternating sweeps (forward in topological order, reverse in
the opposite order); an op is visited again only when one of its tensors changed, so on a model
whose annotations agree, each op's rules run once or twice.

Policy (``docs/completion.md``). A tensor takes, in order:

1. its annotation's closed dims, always (user annotations are never overwritten);
2. the offer of highest *rank* (``rank``): an inferred offer inherits the priority of the
   highest-priority tensor that drove it, higher priority wins, and an annotation beats an
   inference of its own priority;
3. among offers of equal rank, the one whose reshards on the tensor's edges cost least under the
   ``CostModel`` (the one the planner uses, so both always agree), a demand taken as what its op
   needs given its other operands and the producer's offer for this tensor (or nothing), and
   each option priced against what each consumer's rule
   would need of it (not the demand made to the current layout, which moves with it);
4. then the producer's offer, then consumers in topological order.

An offer loses the splits that do not fit (divisibility: a dim shorter than its pieces would leave
a process an empty block) and keeps the others; uneven blocks fit. When
an op's rule refuses its operands together (a conflict), the highest-ranked operand or a result
its annotation fixes is kept, the cheapest choice, and the others are resharded. When an
operand's attribute is not the one its consumer needs, or a result's not the one its producer
makes, the edge gets a reshard (partial results that a consumer needs reduced included).

Meshes (pipeline stages), as Paddle's Completer: an op runs on the mesh of its highest-ranked
known operand; ties go to the later mesh (activations flow into the next stage). A tensor used on
another mesh gets a cross-mesh transfer on that edge.

Termination: a tensor changes only when its offers change, and at most ``MAX_CHANGES`` times (then
it is frozen and reported); every visit follows a change, so the pass always ends.

Speed. The cost per op must not grow with the model (issue 3 asks for linear growth), and on large
models what grows is cache misses, not work. So the sweeps read dense per-run arrays and a
per-topology index (operand and result orders, shapes, the rules' entry points), never the
scattered ``Tensor`` and ``Op`` objects; specs and flattened rule answers are shared across the
model's identical layers; worklists are bytearrays (no heap, no log n); and the attributes reach
the graph as one list (``Graph.set_attrs``). On a stack of identical layers, a block of ops
entered in the state an earlier layer was entered in gets that layer's changes instead of its
visits (``completion_blocks``), so the rules run for a few layers whatever the depth.

The modules, by job: ``result`` (the offers, origins and reshard edges it reports, and its
errors), ``rank`` (how priority and "annotated" order claims), ``offers`` (the offer record, how a
tensor holds its offers, and how an annotation sees one), ``state`` (one run's working arrays),
``index`` (the per-topology index), ``run_state`` (what a run reads, and the specs its rules are
called on), ``memo`` (the specs, flattened answers and annotations that runs share),
``conflicts`` (calling an op's rules, and conflicts settled by the cost), ``worklist`` (which ops
to visit), ``sweeps`` (visiting ops, choosing among offers), ``driver`` (``complete``: a ``Run``
composed of those parts, and its ``Completion``), ``edges`` and ``provenance`` (a finished run's
reshard edges, and its offers read back in names), ``blocks`` and ``repeats`` (finding and
replaying repeated layers), ``dropped`` (the splits a finished run dropped, and their warnings),
``reshard_plans`` (reshard plans), ``cost`` and ``explain``.
"""

from spmdrules.completion.driver import Completion, complete
from spmdrules.completion.result import (
    CompletionError,
    DroppedSplit,
    DroppedSplitWarning,
    NoAnnotationError,
    Offer,
    Origin,
    Rejected,
    ReshardEdge,
    UnresolvableConflictError,
)

__all__ = [
    "Completion",
    "CompletionError",
    "DroppedSplit",
    "DroppedSplitWarning",
    "NoAnnotationError",
    "Offer",
    "Origin",
    "Rejected",
    "ReshardEdge",
    "UnresolvableConflictError",
    "complete",
]
