"""Repeated blocks: completion replays one layer's visit on the identical layers after it, and the
result is exactly that of visiting every op: every tensor's attribute, origin, offers, rejected
offers and explanation, the reshards, the sweeps and whether the pass converged."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_checks import no_replay, same_outcome, same_without_replay

import spmdrules as sr
from spmdrules import examples, ops
from spmdrules.completion import complete, index, state
from spmdrules.graph.annotate import shard
from spmdrules.graph.annotation import OPEN
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
LINE = sr.ProcessMesh([[0, 1, 2, 3]], dim_names=["dp", "mp"])  # no data parallelism
STAGE0 = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
STAGE1 = sr.ProcessMesh([[4, 5], [6, 7]], dim_names=["dp", "mp"])
SMALL: dict[str, Any] = {"batch": 4, "seq": 8, "hidden": 32, "heads": 4, "ffn": 64, "vocab": 128}


@pytest.fixture
def replay_off() -> Iterator[None]:
    with no_replay():
        yield


# ---- the blocks of a topology ----------------------------------------------------------------
def test_a_decoder_stack_is_one_run_of_layers() -> None:
    layers = 6
    g = examples.gpt_decoder(layers, MESH, **SMALL)
    blocks = index.indices(g).blocks
    # every layer but the last (whose output goes to the final norm, not to another layer)
    assert len(blocks) == layers - 1 and len({b.run for b in blocks}) == 1
    assert all(b.stop - b.start == 22 for b in blocks)
    assert [b.start for b in blocks] == [3 + 22 * i for i in range(layers - 1)]
    assert g.ops[blocks[0].start].type == "layer_norm"


def test_a_graph_without_repetition_has_no_blocks() -> None:
    g = examples.mlp(MESH)
    assert index.indices(g).blocks == ()


def test_layers_that_differ_in_shape_are_not_one_run() -> None:
    with Graph("widths") as g:
        h = g.input("x", [8, 16])
        for i, width in enumerate([16, 16, 16, 32, 32, 32]):
            w = g.param(f"w{i}", [h.shape[-1], width])
            h = ops.relu(ops.matmul(h, w, name=f"mm{i}"), name=f"relu{i}")
    shard(g.tensor("x"), MESH, ("dp", None))
    blocks = index.indices(g).blocks
    for b in blocks:
        widths = {g.ops[k].outputs[0].shape[-1] for k in range(b.start, b.stop)}
        run = [c for c in blocks if c.run == b.run]
        assert len({g.ops[c.start].outputs[0].shape for c in run}) == 1, widths
    same_without_replay(lambda: g)


def test_a_dtype_changed_between_runs_splits_the_run() -> None:
    # completion keeps the blocks with its per-topology index; a new dtype is a new topology
    g = examples.gpt_decoder(6, MESH, **SMALL)
    complete(g)
    g.tensor("layers.2.gelu").dtype = "float64"
    blocks = index.indices(g).blocks
    gelu = next(op.order for op in g.ops if op.name == "layers.2.gelu")
    assert not any(b.start <= gelu < b.stop for b in blocks)
    same_without_replay(lambda: g.reset_attrs())


def test_rule_calls_do_not_grow_with_the_stack() -> None:
    small = complete(examples.gpt_decoder(4, MESH, **SMALL))
    large = complete(examples.gpt_decoder(16, MESH, **SMALL))
    assert large.rule_calls == small.rule_calls
    assert large.blocks_replayed > small.blocks_replayed > 0


# ---- replaying changes nothing -----------------------------------------------------------------
@pytest.mark.parametrize("layers", [3, 7])
@pytest.mark.parametrize("mesh", [MESH, LINE], ids=["2d", "1d"])
def test_gpt(layers: int, mesh: sr.ProcessMesh) -> None:
    r = same_without_replay(lambda: examples.gpt_decoder(layers, mesh, **SMALL))
    assert r.blocks_replayed > 0


def test_gpt_annotated_in_one_middle_layer_only() -> None:
    # the annotations reach every layer, forward and in reverse, through the residual stream
    def build() -> Graph:
        g = examples.gpt_decoder(6, MESH, annotate=False, **SMALL)
        shard(g.tensor("layers.3.fc1.weight"), MESH, (None, "mp"))
        shard(g.tensor("input_ids"), MESH, ("dp", None))
        return g

    same_without_replay(build)


def _respec(g: Graph, name: str, spec: tuple[Any, ...], priority: int = 0) -> Graph:
    shard(g.tensor(name), MESH, spec, priority=priority)
    return g


@pytest.mark.parametrize("name,spec,priority", [
    ("layers.2.fc1.weight", ("mp", None), 0),          # row- instead of column-parallel
    ("layers.2.qkv.weight", (None, None), 0),          # one layer not tensor-parallel
    ("layers.3.fc2.weight", (None, "mp"), 2),          # a layer that outranks the others
    ("layers.1.ln1.scale", (OPEN,), 0),                # an open annotation among closed ones
])
def test_gpt_with_one_layer_annotated_differently(name: str, spec: tuple[Any, ...],
                                                  priority: int) -> None:
    r = same_without_replay(
        lambda: _respec(examples.gpt_decoder(6, MESH, **SMALL), name, spec, priority))
    assert r.blocks_replayed > 0


def _stack(layers: int, width: int, build_layer: Callable[[Graph, Tensor, int], Tensor],
           annotate: Callable[[Graph], None]) -> Callable[[], Graph]:
    def build() -> Graph:
        with Graph("stack") as g:
            h = g.input("x", [8, width])
            for i in range(layers):
                h = build_layer(g, h, i)
        annotate(g)
        return g

    return build


def test_rejections_in_every_layer() -> None:
    # each layer's pool shrinks H (2 rows split over dp) to 1 row, which the split no longer
    # fits: the pool reads H whole, the add before it keeps the split (its reverse offer loses
    # on cost), and every layer explains it by name (then a tile restores H for the next layer)
    def build() -> Graph:
        with Graph("stack") as g:
            h = g.input("x", [2, 4, 2, 8])
            for i in range(5):
                p = g.param(f"p{i}", [2, 4, 2, 8])
                shard(p, MESH, (None, None, "dp", None))
                h = ops.add(h, p, name=f"add{i}")
                h = ops.pool2d(h, kernel_size=[2, 1], strides=[2, 1], name=f"pool{i}")
                h = ops.tile(h, repeat_times=[1, 1, 2, 1], name=f"tile{i}")
        return g

    r = same_without_replay(build)
    assert all(r.rejected(f"add{i}") for i in range(5)) and r.blocks_replayed > 0
    assert [(d.tensor, d.op) for d in r.dropped] == [(f"add{i}", f"pool{i}") for i in range(5)]


def test_conflicts_settled_in_every_layer() -> None:
    # each add gets operands whose first dims are split over different mesh dims: the rule
    # refuses them together, and the pass keeps one and reshards the other, naming the one kept
    def layer(g: Graph, h: Tensor, i: int) -> Tensor:
        b = g.param(f"b{i}", [8, 16])
        c = g.param(f"c{i}", [8, 16])
        shard(b, MESH, ("mp", None))
        shard(c, MESH, ("dp", None))
        h = ops.exp(ops.add(h, b, name=f"add{i}"), name=f"exp{i}")
        return ops.add(h, c, name=f"back{i}")

    def annotate(g: Graph) -> None:
        shard(g.tensor("x"), MESH, ("dp", None))

    r = same_without_replay(_stack(5, 16, layer, annotate))
    assert r.reshards and r.blocks_replayed > 0
    losers = [t.name for t in r.graph.tensors if any(x.reason == "rule" for x in r.rejected(t))]
    assert len(losers) >= 2 * 5 - 1, losers


def test_layers_annotated_in_turn_two_ways() -> None:
    # even layers column-parallel, odd ones row-parallel: each replays the layer two back
    def layer(g: Graph, h: Tensor, i: int) -> Tensor:
        w = g.param(f"w{i}", [16, 16])
        shard(w, MESH, (None, "mp") if i % 2 == 0 else ("mp", None))
        return ops.relu(ops.matmul(h, w, name=f"mm{i}"), name=f"relu{i}")

    def annotate(g: Graph) -> None:
        shard(g.tensor("x"), MESH, ("dp", None))

    r = same_without_replay(_stack(10, 16, layer, annotate))
    assert r.blocks_replayed >= 6


def test_pipeline_stages() -> None:
    # the first half of the stack on one mesh, the second on another: one transfer between them
    def layer(g: Graph, h: Tensor, i: int) -> Tensor:
        w = g.param(f"w{i}", [16, 16])
        shard(w, STAGE0 if i < 4 else STAGE1, (None, "mp") if i % 2 == 0 else ("mp", None))
        return ops.relu(ops.matmul(h, w, name=f"mm{i}"), name=f"relu{i}")

    def annotate(g: Graph) -> None:
        shard(g.tensor("x"), STAGE0, ("dp", None))

    r = same_without_replay(_stack(8, 16, layer, annotate))
    assert sum(1 for e in r.reshards if e.cross_mesh) >= 1


def _masked_stack(layers: int, annotate: Callable[[Graph], None]) -> Callable[[], Graph]:
    """Layers that each add one mask, made once before the stack from its own input (as a
    decoder's attention mask or rotary table): a tensor every block shares."""
    def build() -> Graph:
        with Graph("masked") as g:
            h = g.input("x", [8, 16])
            mask = ops.exp(g.input("m", [8, 16]), name="mask")
            for i in range(layers):
                h = ops.matmul(ops.add(h, mask, name=f"l{i}.masked"), g.param(f"l{i}.w", [16, 16]),
                               name=f"l{i}.mm")
                h = ops.relu(h, name=f"l{i}.relu")
        annotate(g)
        return g

    return build


def _annotated(*marks: tuple[str, tuple[Any, ...], int]) -> Callable[[Graph], None]:
    def annotate(g: Graph) -> None:
        for name, spec, priority in marks:
            shard(g.tensor(name), MESH, spec, priority=priority)

    return annotate


@pytest.mark.parametrize("annotate", [
    # the mask takes the layout the first layer asks of it, and every later block replays
    _annotated(("x", ("dp", None), 0), ("l0.w", (None, "mp"), 0)),
    # the mask annotated itself
    _annotated(("x", ("dp", None), 0), ("m", (None, "mp"), 0)),
    # a layer far down asks the mask for another layout with a higher priority: the mask
    # changes during that layer's visit, which is then not recorded, and the layers after it
    # see the new mask
    _annotated(("x", ("dp", None), 0), ("l5.w", ("mp", None), 2)),
    # the mask's only annotation comes through a middle layer
    _annotated(("l3.w", (None, "mp"), 1)),
], ids=["first-layer", "mask", "late-priority", "middle"])
def test_a_tensor_every_layer_reads(annotate: Callable[[Graph], None]) -> None:
    build = _masked_stack(8, annotate)
    r = same_without_replay(build)
    ix = index.indices(r.graph)
    mask = r.graph.tensor("mask").order
    # the layers are blocks that share the mask (the first holds the mask's producer)
    assert len(ix.blocks) >= 6 and all(b.shared == (mask,) for b in ix.blocks)
    assert r.blocks_replayed > 0


# ---- random stacks ----------------------------------------------------------------------------
_LAYER_OPS = ("matmul", "add", "relu", "softmax", "transpose2", "shared")
_SPECS: tuple[tuple[Any, ...], ...] = (
    ("dp", None), (None, "mp"), ("mp", None), (None, None), ("dp", "mp"), (OPEN, "mp"),
    (OPEN, OPEN), (("dp", "mp"), None),
)


def _random_stack(data: st.DataObject) -> Callable[[], Graph]:
    kinds = data.draw(st.lists(st.sampled_from(_LAYER_OPS), min_size=1, max_size=4), label="ops")
    layers = data.draw(st.integers(2, 7), label="layers")
    width = data.draw(st.sampled_from([8, 12, 16]), label="width")
    # which (layer, tensor) pairs are annotated, how, and with what priority
    n_params = sum(1 for k in kinds if k in ("matmul", "add"))
    # layer -1: the input; -2: the input of the tensor the "shared" ops add in every layer
    marks = data.draw(st.lists(
        st.tuples(st.integers(-2, layers - 1), st.integers(0, max(n_params, 1) - 1),
                  st.sampled_from(_SPECS), st.integers(0, 2)),
        min_size=1, max_size=6), label="annotations")

    def build() -> Graph:
        params: dict[tuple[int, int], Tensor] = {}
        with Graph("random") as g:
            x = g.input("x", [width, width])
            s = g.input("s", [width, width])
            shared = ops.tanh(s, name="shared")
            h = x
            for i in range(layers):
                p = 0
                for j, kind in enumerate(kinds):
                    name = f"l{i}.{j}"
                    if kind in ("matmul", "add"):
                        w = g.param(f"l{i}.p{p}", [width, width])
                        params[(i, p)] = w
                        p += 1
                        h = (ops.matmul(h, w, name=name) if kind == "matmul"
                             else ops.add(h, w, name=name))
                    elif kind == "relu":
                        h = ops.relu(h, name=name)
                    elif kind == "softmax":
                        h = ops.softmax(h, axis=-1, name=name)
                    elif kind == "shared":
                        h = ops.multiply(h, shared, name=name)
                    else:
                        h = ops.transpose(h, perm=[1, 0], name=name)
        for layer, p, spec, prio in marks:
            t = (s if layer == -2 else x if layer < 0 or (layer, p) not in params
                 else params[(layer, p)])
            shard(t, MESH, spec, priority=prio)
        return g

    return build


RANDOM_RUNS: list[tuple[bool, int]] = []  # per example: the pass raised; blocks replayed


@settings(max_examples=80, deadline=None, derandomize=True)  # the counts below are fixed
@given(st.data())
def test_random_stacks(data: st.DataObject) -> None:
    r = same_outcome(_random_stack(data))
    RANDOM_RUNS.append((r is None, 0 if r is None else r.blocks_replayed))


def test_random_stacks_were_mostly_completed() -> None:
    # the comparison above also holds for stacks the pass refuses; most must complete, though,
    # and replay blocks, or it would compare error messages or plain visits only
    if not RANDOM_RUNS:
        test_random_stacks()
    assert sum(1 for raised, _ in RANDOM_RUNS if not raised) >= len(RANDOM_RUNS) // 2
    assert sum(1 for _, replayed in RANDOM_RUNS if replayed) >= len(RANDOM_RUNS) // 4


def test_the_switch_is_on_by_default(replay_off: None) -> None:
    # the fixture turns replay off for one test and back on after it
    assert not state.REPLAY_BLOCKS
    r = complete(examples.gpt_decoder(4, MESH, **SMALL))
    assert r.blocks_replayed == 0
