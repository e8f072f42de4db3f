"""What one completion run reads: the graph, its index and working state, the annotations and
meshes, and the specs the rules are called on."""

from __future__ import annotations

from collections.abc import Callable

from spmdrules.completion import state
from spmdrules.completion.cost import CostModel
from spmdrules.completion.index import indices
from spmdrules.completion.memo import cached_spec, canonical_annotation
from spmdrules.completion.rank import WEAK as WEAK_RANK
from spmdrules.completion.reshard_plans import fits
from spmdrules.completion.result import NoAnnotationError
from spmdrules.completion.state import State
from spmdrules.core.attr import DistAttr
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import TensorSpec
from spmdrules.graph.annotation import Annotation
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor


class RunState:
    """What one completion run reads: the graph and its index, the working state, the
    annotations and meshes; and the spec of a tensor as an op on a mesh sees it.

    The parts of the run (``Rules``, ``Sweeps``, ``Worklists``, ``Run``) are each given this."""

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
        self.placeholders: dict[tuple[ProcessMesh, tuple[int, ...]], TensorSpec] = {}
        self.fit_cache: dict[tuple[DistAttr, tuple[int, ...]], bool] = {}
        index = indices(graph)
        self.ins, self.outs, self.consumers = index.ins, index.outs, index.consumers
        self.queued, self.calls, self.shapes = index.queued, index.calls, index.shapes
        self.constants = index.constants
        self.sources, self.base = index.sources, index.base
        # a replayed block reuses an earlier block's answers, which may pair masks that this run
        # must see as plain sums: a run with ``plain_ops`` visits every op
        self.block_of, self.blocks = index.block_of, (index.blocks if state.REPLAY_BLOCKS and not
                                                      plain_ops else ())
        # the tensors that blocks share (``blocks``)
        self.is_shared = bytearray(len(tensors))
        for b in self.blocks:
            for i in b.shared:
                self.is_shared[i] = 1
        self.ann_keys: list[Annotation | None] = []  # canonical annotations, with blocks
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


def first_of(entry: tuple[int, ProcessMesh]) -> int:
    return entry[0]
