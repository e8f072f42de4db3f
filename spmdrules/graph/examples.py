"""Model builders: the GPT decoder of the completion benchmark, and a Megatron MLP.

Both annotate only what a Megatron user writes by hand (data on ``dp``, weights column- or
row-parallel on ``mp``) and leave every other tensor to completion. On a mesh whose dims are
named ``dp`` and ``mp`` the annotations use those names; on any other 2-D mesh they use mesh dims
0 and 1.
"""

from __future__ import annotations

import math

from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph import ops
from spmdrules.graph.annotate import shard
from spmdrules.graph.errors import InvalidSpecError, ShapeError
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor

#: compute ops per decoder layer, and around the layers (embeddings, head, loss)
GPT_OPS_PER_LAYER = 22
GPT_OPS_OUTSIDE = 7
#: annotated tensors per decoder layer, and outside the layers
GPT_ANNOTATED_PER_LAYER = 6
GPT_ANNOTATED_OUTSIDE = 6


def _axes(mesh: ProcessMesh, builder: str) -> tuple[str | int, str | int]:
    if not isinstance(mesh, ProcessMesh) or mesh.ndim != 2:
        raise InvalidSpecError(
            f"{builder}: needs a 2-D ProcessMesh (data parallel x model parallel), got {mesh!r}; "
            "e.g. ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=['dp', 'mp'])"
        )
    names = mesh.dim_names
    if "dp" in names and "mp" in names:
        return "dp", "mp"
    return 0, 1


def _one(x: object) -> Tensor:
    assert isinstance(x, Tensor)
    return x


def gpt_decoder(
    num_layers: int,
    mesh: ProcessMesh,
    *,
    batch: int = 8,
    seq: int = 1024,
    hidden: int = 1024,
    heads: int = 16,
    ffn: int = 4096,
    vocab: int = 50304,
    annotate: bool = True,
) -> Graph:
    """A GPT decoder training step's forward graph: 22 ops per layer plus 7 (22L+7 ops).

    Around the layers: word and position embedding lookups and their add; after them a final
    layer_norm, the LM-head matmul, ``cross_entropy_with_softmax`` and ``mean_all``. Each layer:
    layer_norm, QKV matmul + bias add, reshape [0, 0, heads, 3*hidden/heads], transpose
    [0, 2, 1, 3], split into q/k/v, matmul(q, k^T), scale by 1/sqrt(head_dim), softmax,
    matmul(., v), transpose, reshape [0, 0, hidden], out-projection matmul + bias add, residual
    add, layer_norm, FC1 matmul + bias add, gelu, FC2 matmul + bias add, residual add.

    With ``annotate`` (6L+6 tensors): ``input_ids``, ``position_ids`` and ``labels`` on dp;
    per layer the QKV and FC1 weights and biases column-parallel on mp and the out-projection
    and FC2 weights row-parallel on mp; the word embedding vocab-parallel (dim 0 on mp); the
    position embedding replicated; the LM head (None, mp). Every annotation is closed.

    Tensor names: ``input_ids``, ``position_ids``, ``labels``, ``embed.word``, ``embed.pos``,
    ``layers.<i>.<part>.weight|bias`` (parts ln1, qkv, out, ln2, fc1, fc2; ln's are
    ``scale|bias``), ``final_ln.scale|bias``, ``lm_head.weight``; results are named after
    their op (``layers.3.attn.softmax``); the loss is ``loss``.
    """
    where = "gpt_decoder"
    dp, mp = _axes(mesh, where)
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
        raise ShapeError(f"{where}: num_layers must be an int >= 0, got {num_layers!r}")
    if heads <= 0 or hidden % heads:
        raise ShapeError(
            f"{where}: hidden {hidden} is not divisible by heads {heads}; pick heads dividing hidden"
        )
    head3 = 3 * hidden // heads
    g = Graph(f"gpt_decoder_L{num_layers}")
    with g:

        def sh(t: Tensor, *spec: str | int | None) -> None:
            if annotate:
                shard(t, mesh, spec)

        ids = g.input("input_ids", [batch, seq], "int64")
        pos = g.input("position_ids", [batch, seq], "int64")
        labels = g.input("labels", [batch, seq, 1], "int64")
        wte = g.param("embed.word", [vocab, hidden])
        wpe = g.param("embed.pos", [seq, hidden])
        sh(ids, dp, None)
        sh(pos, dp, None)
        sh(labels, dp, None, None)
        sh(wte, mp, None)
        sh(wpe, None, None)
        h = _one(ops.embedding(ids, wte, name="embed.word_lookup"))
        p = _one(ops.embedding(pos, wpe, name="embed.pos_lookup"))
        h = _one(ops.add(h, p, name="embed.add"))

        for i in range(num_layers):
            n = f"layers.{i}"
            ln1_s = g.param(f"{n}.ln1.scale", [hidden])
            ln1_b = g.param(f"{n}.ln1.bias", [hidden])
            w_qkv = g.param(f"{n}.qkv.weight", [hidden, 3 * hidden])
            b_qkv = g.param(f"{n}.qkv.bias", [3 * hidden])
            w_out = g.param(f"{n}.out.weight", [hidden, hidden])
            b_out = g.param(f"{n}.out.bias", [hidden])
            ln2_s = g.param(f"{n}.ln2.scale", [hidden])
            ln2_b = g.param(f"{n}.ln2.bias", [hidden])
            w_fc1 = g.param(f"{n}.fc1.weight", [hidden, ffn])
            b_fc1 = g.param(f"{n}.fc1.bias", [ffn])
            w_fc2 = g.param(f"{n}.fc2.weight", [ffn, hidden])
            b_fc2 = g.param(f"{n}.fc2.bias", [hidden])
            sh(w_qkv, None, mp)
            sh(b_qkv, mp)
            sh(w_fc1, None, mp)
            sh(b_fc1, mp)
            sh(w_out, mp, None)
            sh(w_fc2, mp, None)

            x, _, _ = ops.layer_norm(h, ln1_s, ln1_b, begin_norm_axis=2, name=f"{n}.ln1")
            qkv = ops.matmul(x, w_qkv, name=f"{n}.qkv.matmul")
            qkv = ops.add(qkv, b_qkv, name=f"{n}.qkv.add")
            qkv = ops.reshape(qkv, shape=[0, 0, heads, head3], name=f"{n}.attn.reshape")
            qkv = ops.transpose(qkv, perm=[0, 2, 1, 3], name=f"{n}.attn.transpose")
            q, k, v = ops.split_with_num(qkv, num=3, axis=-1, name=f"{n}.attn.split")
            s = ops.matmul(q, k, trans_y=True, name=f"{n}.attn.scores")
            s = ops.scale(s, scale=1.0 / math.sqrt(hidden // heads), name=f"{n}.attn.scale")
            s = ops.softmax(s, axis=-1, name=f"{n}.attn.softmax")
            c = ops.matmul(s, v, name=f"{n}.attn.context")
            c = ops.transpose(c, perm=[0, 2, 1, 3], name=f"{n}.attn.transpose_back")
            c = ops.reshape(c, shape=[0, 0, hidden], name=f"{n}.attn.merge")
            o = ops.matmul(c, w_out, name=f"{n}.out.matmul")
            o = ops.add(o, b_out, name=f"{n}.out.add")
            h = _one(ops.add(h, o, name=f"{n}.residual1"))
            x, _, _ = ops.layer_norm(h, ln2_s, ln2_b, begin_norm_axis=2, name=f"{n}.ln2")
            f = ops.matmul(x, w_fc1, name=f"{n}.fc1.matmul")
            f = ops.add(f, b_fc1, name=f"{n}.fc1.add")
            f = ops.gelu(f, name=f"{n}.gelu")
            f = ops.matmul(f, w_fc2, name=f"{n}.fc2.matmul")
            f = ops.add(f, b_fc2, name=f"{n}.fc2.add")
            h = _one(ops.add(h, f, name=f"{n}.residual2"))

        lnf_s = g.param("final_ln.scale", [hidden])
        lnf_b = g.param("final_ln.bias", [hidden])
        w_lm = g.param("lm_head.weight", [hidden, vocab])
        sh(w_lm, None, mp)
        x, _, _ = ops.layer_norm(h, lnf_s, lnf_b, begin_norm_axis=2, name="final_ln")
        logits = ops.matmul(x, w_lm, name="lm_head.matmul")
        _, loss = ops.cross_entropy_with_softmax(logits, labels, axis=-1, name="loss.cross_entropy")
        ops.mean_all(loss, name="loss")
    return g


def mlp(
    mesh: ProcessMesh,
    *,
    batch: int = 8,
    seq: int = 1024,
    hidden: int = 1024,
    ffn: int = 4096,
    annotate: bool = True,
) -> Graph:
    """The Megatron MLP block: ``fc2(gelu(x @ W1 + b1)) @ W2 + b2`` (5 ops).

    With ``annotate`` (4 tensors): ``x`` [batch, seq, hidden] on dp, ``fc1.weight`` and
    ``fc1.bias`` column-parallel on mp, ``fc2.weight`` row-parallel on mp; ``fc2.bias`` is left
    to completion. The output is ``fc2.add``.
    """
    dp, mp = _axes(mesh, "mlp")
    g = Graph("mlp")
    with g:
        x = g.input("x", [batch, seq, hidden])
        w1 = g.param("fc1.weight", [hidden, ffn])
        b1 = g.param("fc1.bias", [ffn])
        w2 = g.param("fc2.weight", [ffn, hidden])
        b2 = g.param("fc2.bias", [hidden])
        if annotate:
            shard(x, mesh, (dp, None, None))
            shard(w1, mesh, (None, mp))
            shard(b1, mesh, (mp,))
            shard(w2, mesh, (mp, None))
        f = ops.matmul(x, w1, name="fc1.matmul")
        f = ops.add(f, b1, name="fc1.add")
        f = ops.gelu(f, name="gelu")
        f = ops.matmul(f, w2, name="fc2.matmul")
        ops.add(f, b2, name="fc2.add")
    return g
