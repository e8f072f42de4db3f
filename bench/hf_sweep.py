"""The Hugging Face sweep: every causal-LM architecture transformers registers, as it comes
(issue 26).

    .venv/bin/python bench/hf_sweep.py [--models llama,gpt2,...] [--part 1/2] [--timeout 120]
                                       [--json] [--jsonl ROWS.jsonl]
    .venv/bin/python bench/hf_sweep.py --table ROWS.jsonl [ROWS.jsonl ...]

Each architecture of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``, then five rows of encoders and
encoder-decoders (``bert-mlm`` and ``roberta-mlm`` masked LMs, ``vit-classifier`` image
classification, ``t5-seq2seq`` and ``bart-seq2seq`` conditional generation), is built from its
own config class's defaults, shrunk by name to a tiny size (``TINY``: 2 layers, hidden 32,
4 heads, 2 KV heads, FFN 64, 4 experts of which 2 per token, vocabulary 128), with the default
attention and experts implementations, random weights from seed 0 (a weight matrix the model's
init leaves constant, as a zero-initialised router, drawn at random too: ``untie``), in eval mode,
``use_cache=False``, nothing downloaded (``HF_HUB_OFFLINE=1``). Then, stage by stage, each
stopping the row at its first error:

* ``build``: the config and the model (a config whose fields the shrink leaves inconsistent
  fails here: that is ours, not the importer's, and does not count);
* ``export``: ``torch.export.export`` on batch 2, sequence 8 (ViT: a 2x3x32x32 image; T5 and
  BART: 8 decoder ids too);
* ``import``: ``decompose_program`` and ``from_exported`` (spmdrules.importers.torch);
* ``complete``: ``plan.apply`` with the first input split on dp of a 2x2 (dp x mp) mesh
  (data parallelism; mp replicated), then ``complete``;
* ``run``: the lowered program run on the simulated 4 ranks (``run_simulated``);
* ``compare``: the first output (``logits``) against torch's on the same inputs, allclose at
  rtol 1e-4, atol 1e-4; past that, against the model run in float64: ours may be off from it by
  no more than torch's float32 run is (``compare``; the row's note then gives both);
* ``ok``: all of it.

Each row runs in its own process (forked from one that has imported torch, transformers and
spmdrules), stopped after ``--timeout`` seconds (stage ``timeout``, naming the stage it was in, and in
import the step, torch's decompositions or ``from_exported``: past export, it counts as
exported).
On a slow machine the rows split into parts run side by side (``--part 1/2`` and ``--part 2/2``,
every other row), each appending its rows to a JSON-lines file as they finish (``--jsonl``, so a
stopped run keeps what it measured, and run again skips the rows the file holds unless
``--redo``); ``--table`` prints the table of such files together, each row's last line.

The table gives each row's last stage and its error's first line; the totals count the rows
per stage, and the target's ratio: the rows that reach ``ok`` over the rows that torch.export
itself exports (the issue asks for 90%). Then the errors by cause (the unmapped op, or the
error's first words; each unmapped op of a row that lacks several), most frequent first.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import re
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

STAGES = ("build", "export", "import", "complete", "run", "compare", "ok")
#: config field -> its tiny value; a field a config does not have is left alone
TINY: dict[str, int] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers",
                     "num_decoder_layers", "encoder_layers", "decoder_layers"), 2),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model", "n_embed", "embed_dim"), 32),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads",
                     "decoder_attention_heads"), 4),
    **dict.fromkeys(("num_key_value_heads", "multi_query_group_num"), 2),
    **dict.fromkeys(("intermediate_size", "n_inner", "d_ff", "ffn_dim", "encoder_ffn_dim",
                     "decoder_ffn_dim", "moe_intermediate_size",
                     "shared_expert_intermediate_size"), 64),
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts"), 4),
    **dict.fromkeys(("num_experts_per_tok", "top_k", "moe_topk"), 2),
    "vocab_size": 128, "head_dim": 8, "d_kv": 8, "image_size": 32, "patch_size": 8,
}
BATCH, SEQ = 2, 8
#: the rows beyond the causal LMs: (row name, model type, the auto mapping that names its class)
EXTRA_ROWS = (("bert-mlm", "bert", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
              ("roberta-mlm", "roberta", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
              ("vit-classifier", "vit", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
              ("t5-seq2seq", "t5", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
              ("bart-seq2seq", "bart", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"))


@dataclass
class Row:
    name: str
    stage: str  # the last stage reached: a STAGES entry, or "timeout"
    error: str = ""
    seconds: float = 0.0


def rows() -> list[tuple[str, str, str]]:
    """(row name, model type, auto mapping) of every row, causal LMs first."""
    from transformers.models.auto import modeling_auto

    causal = [(t, t, "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES")
              for t in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES]
    return causal + list(EXTRA_ROWS)


def tiny_config(model_type: str) -> Any:
    """The config class's defaults, every field of TINY it has set to the tiny value, token ids
    past the vocabulary set inside it, sub-configs (a text config) shrunk alike."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    shrink(config)
    for sub in ("text_config", "decoder", "encoder"):
        if hasattr(config, sub) and hasattr(getattr(config, sub), "to_dict"):
            shrink(getattr(config, sub))
    config.use_cache = False
    return config


def shrink(config: Any) -> None:
    fields = config.to_dict()
    for key, value in TINY.items():
        if isinstance(fields.get(key), int) and not isinstance(fields.get(key), bool):
            setattr(config, key, value)
    vocab = getattr(config, "vocab_size", None)
    for key, value in fields.items():
        if key.endswith("token_id") and isinstance(value, int) and vocab and value >= vocab:
            setattr(config, key, vocab - 1 - (hash(key) % 4))
    if isinstance(fields.get("layer_types"), list):  # per-layer kinds: the first ones
        config.layer_types = fields["layer_types"][: getattr(config, "num_hidden_layers", 2)]


def build(model_type: str, mapping: str) -> tuple[Any, dict[str, Any]]:
    """The model (random weights from seed 0, eval mode) and its example inputs."""
    import torch
    import transformers
    from transformers.models.auto import modeling_auto

    config = tiny_config(model_type)
    cls = getattr(transformers, getattr(modeling_auto, mapping)[model_type])
    torch.manual_seed(0)
    model = cls(config).eval()
    g = torch.Generator().manual_seed(1)
    untie(model, g)
    if mapping == "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES":
        size = int(getattr(config, "image_size", 32))
        return model, {"pixel_values": torch.randn(BATCH, 3, size, size, generator=g)}
    vocab = int(getattr(config, "vocab_size", 128) or 128)
    inputs = {"input_ids": torch.randint(2, vocab, (BATCH, SEQ), generator=g)}
    if mapping == "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES":
        inputs["decoder_input_ids"] = torch.randint(2, vocab, (BATCH, SEQ), generator=g)
    return model, inputs


def untie(model: Any, g: Any) -> list[str]:
    """Draw every weight matrix that the model's init leaves constant (a router's ``gate``
    initialised to zeros, as AFMoE's is) from N(0, 0.02), and return their names. A constant
    router scores every expert alike, so its top-k is a tie on every token, which torch breaks
    as its kernel happens to (its contract leaves it unspecified) and the executor otherwise:
    the logits compared would be two readings of an ill-defined choice, not a check."""
    import torch

    names = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2 and p.numel() > 1 and bool((p == p.reshape(-1)[0]).all()):
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.02)
                names.append(name)
    return names


def first_line(e: BaseException) -> str:
    """The error's first line; for the importer's every-unmapped-op error, each op and count."""
    report = getattr(e, "report", None)
    if report is not None and hasattr(report, "counts"):
        return f"{type(e).__name__}: unmapped " + ", ".join(
            f"{op} x{n}" for op, n in report.counts().items())
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def measure(model_type: str, mapping: str, report: Any) -> None:
    """Run one row stage by stage, reporting each stage reached (in a child process)."""
    import torch

    # forked: if the parent's OpenMP pool has run, the child's copy of it is dead (OpenMP is
    # not fork-safe), and the first parallel op would wait on it for ever; one thread never
    # enters the pool
    torch.set_num_threads(1)

    import spmdrules as sr
    from spmdrules import plan
    from spmdrules.completion import complete
    from spmdrules.execution.lowering import lower
    from spmdrules.execution.simulated import run_simulated
    from spmdrules.importers import torch as torch_import

    stage = "build"

    def reached(name: str, step: str = "") -> str:
        report.put(("at", name, step))
        return name

    try:
        model, inputs = build(model_type, mapping)
        stage = reached("export")
        ep = torch.export.export(model, (), kwargs=inputs)
        stage = reached("import", "torch's decompositions")
        decomposed = torch_import.decompose_program(ep)
        reached("import", "from_exported")
        imported = torch_import.from_exported(decomposed)
        stage = reached("complete")
        g = imported.graph
        mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
        plan.apply(g, mesh, {imported.inputs[0]: plan.DataParallel(dim="dp")})
        result = complete(g)
        stage = reached("run")
        args = [inputs[n] for n in inputs]
        feeds = imported.feeds(*args) if len(args) == len(imported.inputs) else None
        if feeds is None:
            raise RuntimeError(f"the program takes inputs {imported.inputs}, given {list(inputs)}")
        run = run_simulated(lower(result), feeds)
        stage = reached("compare")
        with torch.no_grad():
            out = model(**inputs)
        want = (out.logits if hasattr(out, "logits") else out[0]).numpy()
        got = run.fetch(imported.outputs[0])
        report.put(("done", "ok", compare(model, inputs, got, want)))
    except BaseException as e:  # every failure is the row's measurement
        report.put(("done", stage, first_line(e)))


def compare(model: Any, inputs: dict[str, Any], got: Any, want: Any) -> str:
    """Pass when ``got`` equals torch's ``want`` at rtol = atol = 1e-4 (and say nothing), or
    else when it is no farther from the model run in float64 than torch's float32 run is (and
    say so): large logits (CPM-Ant's reach 21) differ from torch past 1e-4 by float32 rounding
    alone, which the float64 run tells from a wrong result. Raise otherwise."""
    import numpy as np
    import torch

    if np.allclose(got, want, rtol=1e-4, atol=1e-4):
        return ""
    far = float(np.abs(got - want).max())
    try:
        with torch.no_grad():
            out = model.double()(**{k: v.double() if v.is_floating_point() else v
                                     for k, v in inputs.items()})
        ref = (out.logits if hasattr(out, "logits") else out[0]).numpy()
    except Exception as e:  # a model that cannot run in float64: the float32 check stands
        raise AssertionError(f"max |ours - torch| {far:.3g} beyond 1e-4; no float64 run to "
                             f"judge rounding ({type(e).__name__})") from e
    ours, theirs = float(np.abs(got - ref).max()), float(np.abs(want - ref).max())
    if ours > max(theirs, 1e-4):
        raise AssertionError(f"max |ours - torch| {far:.3g} beyond 1e-4; against float64, ours "
                             f"is off by {ours:.3g}, torch's float32 by {theirs:.3g}")
    return (f"float32 rounding: |ours - torch| {far:.2g}; against float64 ours {ours:.2g}, "
            f"torch {theirs:.2g}")


def run_row(name: str, model_type: str, mapping: str, timeout: float) -> Row:
    """One row in a forked child (torch, transformers and spmdrules already imported here, so
    the child starts at once), stopped after ``timeout`` seconds at the stage it reached."""
    ctx = mp.get_context("fork")
    report: Any = ctx.Queue()
    start = time.perf_counter()
    proc = ctx.Process(target=measure, args=(model_type, mapping, report), daemon=True)
    proc.start()
    stage, error = "build", ""
    while True:
        left = timeout - (time.perf_counter() - start)
        try:
            kind, stage, error = report.get(timeout=max(left, 0.01))
        except queue.Empty:  # the step of an "at" message says whose time it was
            step = f" (in {error})" if error else ""
            stage, error = "timeout", f"no result within {timeout:.0f} s{step}, in stage {stage}"
            break
        if kind == "done":
            break
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    return Row(name, stage, error, time.perf_counter() - start)


def preload() -> None:
    """What every row imports, once, before the children fork."""
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import spmdrules.completion
    import spmdrules.execution.simulated
    import spmdrules.importers.torch  # noqa: F401


def cause(error: str) -> str:
    """What to count an error as: the unmapped ATen op, or its first words."""
    m = re.search(r"op (aten\.[\w.]+|[\w]+::[\w.]+)", error)
    if m and "UnmappedOpError" in error:
        return f"unmapped {m.group(1)}"
    if error.startswith("no result within"):
        return f"timeout in stage {error.rsplit(' ', 1)[-1]}"
    return " ".join(re.sub(r"'[^']*'|\d+", "_", error).split()[:8])


def row_causes(error: str) -> list[str]:
    """What a row's error counts as: each op of an every-unmapped-op error, else its cause."""
    if error.startswith("UnmappedOpsError: unmapped "):
        return [f"unmapped {part.rsplit(' x', 1)[0]}" for part in
                error.removeprefix("UnmappedOpsError: unmapped ").split(", ")]
    return [cause(error)]


def summary(results: list[Row]) -> dict[str, Any]:
    counts = Counter(r.stage for r in results)
    exported = sum(1 for r in results if r.stage not in ("build", "export", "timeout")
                   ) + sum(1 for r in results if r.stage == "timeout" and not r.error.endswith(
                       ("stage build", "stage export")))
    ok = counts.get("ok", 0)
    causes = Counter(c for r in results if r.stage not in ("ok", "build", "export")
                     for c in row_causes(r.error))
    return {"rows": len(results), "stages": dict(counts), "exported": exported, "ok": ok,
            "ok_of_exported": ok / exported if exported else 0.0,
            "causes": causes.most_common()}


def print_table(results: list[Row], totals: dict[str, Any]) -> None:
    width = max(len(r.name) for r in results)
    print(f"| {'model':<{width}} | stage    | s     | error |")
    print(f"| {'-' * width} | -------- | ----- | ----- |")
    for r in results:
        print(f"| {r.name:<{width}} | {r.stage:<8} | {r.seconds:5.1f} | {r.error} |")
    print()
    print(f"rows {totals['rows']}: " + ", ".join(
        f"{s} {totals['stages'].get(s, 0)}" for s in (*STAGES, "timeout")
        if totals["stages"].get(s)))
    print(f"ok {totals['ok']} of the {totals['exported']} that torch.export exports: "
          f"{100 * totals['ok_of_exported']:.0f}% (target 90%)")
    print("past export, the causes by count:")
    for c, n in totals["causes"]:
        print(f"  {n:3d}  {c}")


def read_rows(paths: list[str]) -> dict[str, Row]:
    """The rows of these --jsonl files by name; a row measured again keeps its last line."""
    found: dict[str, Row] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = Row(**json.loads(line))
                    found[row.name] = row
    return found


def part(text: str) -> tuple[int, int]:
    """``I/N`` (1 <= I <= N) for ``--part``."""
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise argparse.ArgumentTypeError(f"{text!r}: give I/N with 1 <= I <= N, as 1/2")
    return int(m.group(1)), int(m.group(2))


def main(argv: list[str] | None = None) -> list[Row]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="",
                    help="comma-separated row names: causal-LM model types (llama, gpt2, ...) "
                    "and bert-mlm, roberta-mlm, vit-classifier, t5-seq2seq, bart-seq2seq "
                    "(default: every row)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per row")
    ap.add_argument("--json", action="store_true", help="print the rows and totals as JSON")
    ap.add_argument("--part", type=part, default=(1, 1), metavar="I/N",
                    help="run every N-th row from the I-th (parts run side by side)")
    ap.add_argument("--jsonl", default="",
                    help="append each row to this file as a JSON line as soon as it finishes")
    ap.add_argument("--redo", action="store_true",
                    help="run the rows --jsonl already holds again (default: skip them, so a "
                    "stopped run resumes; --table keeps each row's last line)")
    ap.add_argument("--table", nargs="+", default=[], metavar="ROWS.jsonl",
                    help="run nothing: print the table of the rows in these --jsonl files")
    args = ap.parse_args(argv)
    if args.table:
        results = list(read_rows(args.table).values())
        print_table(results, summary(results))
        return results
    wanted = {m.strip() for m in args.models.split(",") if m.strip()}
    todo = [r for r in rows() if not wanted or r[0] in wanted]
    if wanted and not todo:
        ap.error(f"--models {args.models}: no such row; the rows are the model types of "
                 "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and " + ", ".join(r[0] for r in EXTRA_ROWS))
    i, n = args.part
    todo = todo[i - 1::n]
    if args.jsonl and not args.redo and os.path.exists(args.jsonl):
        done = read_rows([args.jsonl])
        todo = [r for r in todo if r[0] not in done]
    preload()
    results = []
    for name, model_type, mapping in todo:
        results.append(run_row(name, model_type, mapping, args.timeout))
        print(f"  {name}: {results[-1].stage}", file=sys.stderr, flush=True)
        if args.jsonl:
            with open(args.jsonl, "a", encoding="utf-8") as f:
                f.write(json.dumps(asdict(results[-1])) + "\n")
    totals = summary(results)
    if args.json:
        print(json.dumps({"rows": [asdict(r) for r in results], "totals": totals}, indent=1))
    else:
        print_table(results, totals)
    return results


if __name__ == "__main__":
    main()
