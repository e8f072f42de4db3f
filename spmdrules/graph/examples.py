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


#: compute ops per LLaMA decoder layer, and around the layers (rotary tables, mask, head, loss)
LLAMA_OPS_PER_LAYER = 45
LLAMA_OPS_OUTSIDE = 23
LLAMA_ANNOTATED_PER_LAYER = 7
LLAMA_ANNOTATED_OUTSIDE = 4


def _rotate_half(x: Tensor, half: int, n: str) -> Tensor:
    """``concat([-x2, x1])`` of the last dim's halves x1, x2: RoPE's rotate-half, with slices."""
    x1 = ops.slice(x, axes=[3], starts=[0], ends=[half], name=f"{n}.x1")
    x2 = ops.slice(x, axes=[3], starts=[half], ends=[2 * half], name=f"{n}.x2")
    minus_x2 = ops.scale(x2, scale=-1.0, name=f"{n}.neg")
    return _one(ops.concat([minus_x2, x1], axis=-1, name=f"{n}.rotate"))


def _rope(x: Tensor, cos: Tensor, sin: Tensor, half: int, n: str) -> Tensor:
    """``x * cos + rotate_half(x) * sin`` (the Hugging Face form of rotary embeddings)."""
    a = ops.multiply(x, cos, name=f"{n}.cos")
    b = ops.multiply(_rotate_half(x, half, n), sin, name=f"{n}.sin")
    return _one(ops.add(a, b, name=f"{n}.rope"))


def llama_decoder(
    num_layers: int,
    mesh: ProcessMesh,
    *,
    batch: int = 4,
    seq: int = 16,
    hidden: int = 32,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 64,
    vocab: int = 128,
    rope_base: float = 10000.0,
    epsilon: float = 1e-6,
    annotate: bool = True,
    fused: bool = False,
    sequence_parallel: bool = False,
) -> Graph:
    """A LLaMA decoder training step: RMSNorm, grouped-query attention with rotary embeddings and
    a causal mask, a SwiGLU MLP; embedding before the layers, final norm, LM head and loss after.

    Each layer: fused_rms_norm; q/k/v projections; reshape to heads; RoPE on q and k
    (``x*cos + rotate_half(x)*sin``, rotate-half by two ``slice``s, a ``scale`` by -1 and a
    ``concat``); the KV heads repeated ``heads // kv_heads`` times for grouped-query attention
    (``unsqueeze``, ``tile``, ``reshape``); transposes to [b, h, s, d]; scores scaled by
    1/sqrt(head_dim); the causal mask by ``where``; softmax; context; output projection; residual;
    fused_rms_norm; gate and up projections, ``swiglu``, down projection; residual. The rotary
    tables come from constants (``arange``, ``exp``, ``cos``, ``sin``) and the mask from ``triu``
    of a ``full`` matrix, all built once before the layers.

    With ``annotate`` (7 per layer plus 4): ``input_ids`` and ``labels`` on dp; the q, k, v, gate
    and up weights column-parallel on mp, the o and down weights row-parallel on mp (so each layer
    ends its attention and its MLP with one all-reduce); the embedding vocab-parallel; the LM head
    (None, mp). Everything else is left to completion, which puts the heads on mp.

    With ``fused``, each layer's RoPE is a ``fused_rotary_position_embedding`` of q and one of k
    (``layers.<i>.q.rope``, ``layers.<i>.k.rope``: rotate-half style, the same tables) and its
    attention core one ``flash_attention`` of q, k and the KV heads as they are
    (``layers.<i>.attention``, causal, ``is_test``: no dropout; the grouped-query heads are the
    op's own); there is no mask. The
    rules split the heads over mp (and keep each q head group beside its KV head); the sequence
    stays whole inside attention, as flash_attention's rule requires.

    With ``sequence_parallel`` (and ``annotate``) the embedding's output is annotated (dp, mp,
    None) as well: completion then keeps the sequence split over mp wherever the rules allow it
    (the norms, the residual adds; Megatron's sequence parallelism), gathers it before each
    column-parallel projection (an all-gather) and splits the row-parallel results back by
    sequence (a reduce-scatter) instead of all-reducing them.

    Tensor names: ``input_ids``, ``labels``, ``embed.weight``, ``layers.<i>.<part>.weight`` (parts
    attn_norm, q, k, v, o, mlp_norm, gate, up, down), ``final_norm.weight``, ``lm_head.weight``;
    the loss is ``loss``.
    """
    where = "llama_decoder"
    dp, mp = _axes(mesh, where)
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
        raise ShapeError(f"{where}: num_layers must be an int >= 0, got {num_layers!r}")
    if heads <= 0 or kv_heads <= 0 or hidden % heads or heads % kv_heads:
        raise ShapeError(
            f"{where}: hidden {hidden}, heads {heads} and kv_heads {kv_heads} must have heads "
            "dividing hidden and kv_heads dividing heads; e.g. hidden=32, heads=4, kv_heads=2"
        )
    hd = hidden // heads
    if hd % 2:
        raise ShapeError(f"{where}: head_dim {hd} must be even for rotary embeddings")
    half, groups = hd // 2, heads // kv_heads
    g = Graph(f"llama_decoder_L{num_layers}")
    with g:

        def sh(t: Tensor, *spec: str | int | None) -> None:
            if annotate:
                shard(t, mesh, spec)

        ids = g.input("input_ids", [batch, seq], "int64")
        labels = g.input("labels", [batch, seq, 1], "int64")
        emb = g.param("embed.weight", [vocab, hidden])
        sh(ids, dp, None)
        sh(labels, dp, None, None)
        sh(emb, mp, None)

        # rotary tables [1, seq, 1, hd]: angle[s, j] = s * base^(-2j/hd), the halves repeated;
        # float32 as the activations (float64 tables would promote q, k and all after them)
        pos = ops.reshape(ops.arange(0, seq, 1, "float32", name="rope.pos"), shape=[seq, 1],
                          name="rope.pos_col")
        j = ops.arange(0, half, 1, "float32", name="rope.j")
        inv = ops.exp(ops.scale(j, scale=-2.0 * math.log(rope_base) / hd, name="rope.exponent"),
                      name="rope.inv_freq")
        ang = ops.matmul(pos, ops.reshape(inv, shape=[1, half], name="rope.inv_row"),
                         name="rope.angles")
        ang = ops.concat([ang, ang], axis=-1, name="rope.angles2")
        cos = ops.reshape(ops.cos(ang, name="rope.cos_table"), shape=[1, seq, 1, hd],
                          name="rope.cos")
        sin = ops.reshape(ops.sin(ang, name="rope.sin_table"), shape=[1, seq, 1, hd],
                          name="rope.sin")
        allowed, blocked = (None, None) if fused else _causal_mask(seq)
        h = _one(ops.embedding(ids, emb, name="embed"))
        if sequence_parallel:
            sh(h, dp, mp, None)
        for i in range(num_layers):
            n = f"layers.{i}"
            w = {part: g.param(f"{n}.{part}.weight", shape) for part, shape in (
                ("attn_norm", [hidden]), ("q", [hidden, heads * hd]),
                ("k", [hidden, kv_heads * hd]), ("v", [hidden, kv_heads * hd]),
                ("o", [heads * hd, hidden]), ("mlp_norm", [hidden]), ("gate", [hidden, ffn]),
                ("up", [hidden, ffn]), ("down", [ffn, hidden]),
            )}
            for part in ("q", "k", "v", "gate", "up"):
                sh(w[part], None, mp)
            sh(w["o"], mp, None)
            sh(w["down"], mp, None)

            x, _ = ops.fused_rms_norm(h, w["attn_norm"], epsilon, name=f"{n}.attn_norm")
            q = ops.reshape(ops.matmul(x, w["q"], name=f"{n}.q"), shape=[0, 0, heads, hd],
                            name=f"{n}.q_heads")
            k = ops.reshape(ops.matmul(x, w["k"], name=f"{n}.k"), shape=[0, 0, kv_heads, hd],
                            name=f"{n}.k_heads")
            v = ops.reshape(ops.matmul(x, w["v"], name=f"{n}.v"), shape=[0, 0, kv_heads, hd],
                            name=f"{n}.v_heads")
            if fused:
                # one call each: the op rotates tensors of q's shape, and k has fewer heads
                q, k = (ops.fused_rotary_position_embedding(
                    t, None, None, sin, cos, None, use_neox_rotary_style=False,
                    rotary_emb_base=rope_base, name=f"{n}.{t_n}.rope")[0]
                    for t, t_n in ((q, "q"), (k, "k")))
                c = ops.flash_attention(q, k, v, None, None, causal=True, is_test=True,
                                        name=f"{n}.attention")[0]
            else:
                assert allowed is not None and blocked is not None
                c = _attention(q, k, v, cos, sin, allowed, blocked, half, groups, heads, hd, n)
            c = ops.reshape(c, shape=[0, 0, hidden], name=f"{n}.merge")
            h = _one(ops.add(h, ops.matmul(c, w["o"], name=f"{n}.o"), name=f"{n}.residual1"))

            x, _ = ops.fused_rms_norm(h, w["mlp_norm"], epsilon, name=f"{n}.mlp_norm")
            gate = ops.matmul(x, w["gate"], name=f"{n}.gate")
            up = ops.matmul(x, w["up"], name=f"{n}.up")
            f = ops.matmul(ops.swiglu(gate, up, name=f"{n}.swiglu"), w["down"], name=f"{n}.down")
            h = _one(ops.add(h, f, name=f"{n}.residual2"))

        norm_w = g.param("final_norm.weight", [hidden])
        w_lm = g.param("lm_head.weight", [hidden, vocab])
        sh(w_lm, None, mp)
        x, _ = ops.fused_rms_norm(h, norm_w, epsilon, name="final_norm")
        logits = ops.matmul(x, w_lm, name="lm_head")
        _, loss = ops.cross_entropy_with_softmax(logits, labels, axis=-1, name="loss.cross_entropy")
        ops.mean_all(loss, name="loss")
    return g


def _causal_mask(seq: int) -> tuple[Tensor, Tensor]:
    """The causal mask [1, 1, seq, seq] (True on and below the diagonal, where a query may look)
    and the score that replaces a blocked one."""
    ones = ops.full(shape=[seq, seq], value=1.0, dtype="float32", name="mask.ones")
    future = ops.cast(ops.triu(ones, diagonal=1, name="mask.triu"), "bool", name="mask.future")
    allowed = ops.reshape(ops.logical_not(future, name="mask.allowed"),
                          shape=[1, 1, seq, seq], name="mask")
    blocked = ops.full(shape=[1, 1, seq, seq], value=-1e9, dtype="float32", name="mask.fill")
    return _one(allowed), _one(blocked)


def _attention(q: Tensor, k: Tensor, v: Tensor, cos: Tensor, sin: Tensor, allowed: Tensor,
               blocked: Tensor, half: int, groups: int, heads: int, hd: int, n: str) -> Tensor:
    """RoPE on q and k, the KV heads repeated, masked softmax attention: [b, s, heads, hd]."""
    q = _rope(q, cos, sin, half, f"{n}.q")
    k = _rope(k, cos, sin, half, f"{n}.k")
    k, v = (_repeat_kv(t, groups, heads, hd, f"{n}.{t_n}") for t, t_n in ((k, "k"), (v, "v")))
    q, k, v = (ops.transpose(t, perm=[0, 2, 1, 3], name=f"{n}.{t_n}_t")
               for t, t_n in ((q, "q"), (k, "k"), (v, "v")))
    s = ops.matmul(q, k, trans_y=True, name=f"{n}.scores")
    s = ops.scale(s, scale=1.0 / math.sqrt(hd), name=f"{n}.scaled")
    s = ops.where(allowed, s, blocked, name=f"{n}.masked")
    p = ops.softmax(s, axis=-1, name=f"{n}.probs")
    return _one(ops.transpose(ops.matmul(p, v, name=f"{n}.context"), perm=[0, 2, 1, 3],
                              name=f"{n}.context_t"))


def _repeat_kv(t: Tensor, groups: int, heads: int, hd: int, n: str) -> Tensor:
    """[b, s, kv, d] -> [b, s, kv * groups, d], each KV head repeated ``groups`` times in place."""
    t = ops.unsqueeze(t, axis=[3], name=f"{n}.expand_dim")
    t = ops.tile(t, repeat_times=[1, 1, 1, groups, 1], name=f"{n}.repeat")
    return _one(ops.reshape(t, shape=[0, 0, heads, hd], name=f"{n}.repeated"))


#: compute ops of the ResNet block (two conv+bn, relus, residual add, pools, flatten, head)
RESNET_OPS = 12
RESNET_LAYOUTS = ("data", "spatial", "both")


def resnet_block(
    mesh: ProcessMesh,
    *,
    layout: str = "spatial",
    batch: int = 4,
    channels: int = 4,
    size: int = 8,
    classes: int = 5,
    training: bool = True,
    dtype: str = "float64",
) -> Graph:
    """A small ResNet: a basic residual block, max pool, global average pool and a linear head.

    ``conv3x3 -> batch_norm -> relu -> conv3x3 -> batch_norm -> + x -> relu -> max pool 3x3/2
    -> global avg pool -> flatten -> matmul + bias`` (12 ops). The convolutions opt into spatial
    sharding (``spatial_sharding=True``), so a sharded H/W stays sharded through them, with the
    halos the lowering exchanges; batch_norm keeps only its channel shard (Paddle's rule), so
    completion reshards around it. ``training`` selects batch statistics (else the running
    statistics, inference).

    ``layout`` annotates the input ``x`` [batch, channels, size, size] on a 2-D mesh:
    ``"data"`` puts the batch on mesh dim 0, ``"spatial"`` H on mesh dim 0 and W on mesh dim 1,
    ``"both"`` the batch on mesh dim 0 and H on mesh dim 1. The output is ``head.add``.
    """
    if not isinstance(mesh, ProcessMesh) or mesh.ndim != 2:
        raise InvalidSpecError(f"resnet_block: needs a 2-D ProcessMesh, got {mesh!r}")
    specs = {"data": (0, None, None, None), "spatial": (None, None, 0, 1),
             "both": (0, None, 1, None)}
    if layout not in specs:
        raise InvalidSpecError(
            f"resnet_block: layout {layout!r} is not one of {list(RESNET_LAYOUTS)}")
    c = channels
    g = Graph(f"resnet_block[{layout}]")
    with g:
        x = g.input("x", [batch, c, size, size], dtype)
        shard(x, mesh, specs[layout])
        h = x
        for i in (1, 2):
            w = g.param(f"conv{i}.weight", [c, c, 3, 3], dtype)
            stats = [g.param(f"bn{i}.{n}", [c], dtype)
                     for n in ("running_mean", "running_var", "weight", "bias")]
            h = ops.conv2d(h, w, paddings=[1, 1], spatial_sharding=True, name=f"conv{i}")
            h = _one(ops.batch_norm(h, *stats, is_test=not training, name=f"bn{i}")[0])
            if i == 1:
                h = ops.relu(h, name="relu1")
        h = ops.add(h, x, name="residual")
        h = ops.relu(h, name="relu2")
        h = ops.pool2d(h, kernel_size=[3, 3], strides=[2, 2], paddings=[1, 1], name="maxpool")
        h = ops.pool2d(h, kernel_size=[1, 1], global_pooling=True, pooling_type="avg",
                       name="avgpool")
        h = ops.flatten(h, start_axis=1, stop_axis=-1, name="flatten")
        wf = g.param("head.weight", [c, classes], dtype)
        bf = g.param("head.bias", [classes], dtype)
        h = ops.matmul(h, wf, name="head.matmul")
        ops.add(h, bf, name="head.add")
    return g
