"""The ``spmdrules`` command: complete a model file, explain a tensor, write an example model.

Exit codes follow the usual conventions: 0 success, 1 the job failed (unreadable or invalid
model or plan file, a conflict completion cannot settle, an unknown tensor, an output path that
is not a regular file; ``import --check``: an op that cannot be mapped), 2 bad usage (argparse's
own).

Everything the command prints passes through ``printable``: a name, a path or an argument that
holds terminal controls is shown escaped, on stdout and on stderr. Every file is written by
``spmdrules.core.output`` (atomically, over a regular file or a new name only).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from spmdrules import auto
from spmdrules.completion.driver import Completion, complete
from spmdrules.completion.explain import explain
from spmdrules.completion.result import DroppedSplitWarning
from spmdrules.core import progress
from spmdrules.core.errors import SpmdError, printable
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.output import check_target, write_text
from spmdrules.core.plugins import add_plugin_option, load_plugins
from spmdrules.graph import examples
from spmdrules.graph.exchange import dump, load
from spmdrules.graph.graph import Graph
from spmdrules.importers import sources
from spmdrules.plan import apply
from spmdrules.plan import file as plan_file

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse quotes a bad choice but echoes unrecognized arguments as given."""

    def error(self, message: str) -> NoReturn:
        super().error(printable(message))


def _say(text: str) -> None:
    print(printable(text, indent=""))


def _fail(err: Exception | str) -> int:
    print(printable(f"spmdrules: error: {err}"), file=sys.stderr)
    return EXIT_FAILED


def _complete(g: Graph) -> Completion:
    # the summary and explain print the dropped splits, through ``printable``: a warning would
    # say it twice, and raw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DroppedSplitWarning)
        return complete(g)


def _import(args: argparse.Namespace) -> int:
    if args.no_progress:
        progress.enabled(False)
    mesh_plan = plan_file.load(args.plan) if args.plan else None  # before the import's minutes
    if args.check:
        report = sources.check(args.source)
        _say(report.format())
        return EXIT_FAILED if report else EXIT_OK
    g = sources.read(args.source)
    if mesh_plan is not None:
        done = apply(g, *mesh_plan)
        _say(f"{args.plan}: {len(mesh_plan[1])} plan entries annotated "
             f"{len(done.tensors())} tensors")
    dump(g, args.output)
    _say(f"wrote {args.output}: {g!r}")
    return EXIT_OK


def _auto(args: argparse.Namespace) -> int:
    if args.optimizer_states < 0:
        return _fail("--optimizer-states must be >= 0")
    found = auto.plan(load(args.model), args.devices, memory_per_rank=args.memory,
                      objective=args.objective,
                      options=auto.Options(optimizer_states=args.optimizer_states))
    _say(found.report())
    if args.output:
        write_text(args.output, found.to_json())
        _say(f"wrote {args.output}: {len(found)} annotations on mesh {list(found.mesh.shape)}")
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="spmdrules",
        description="Complete the distributed attributes of a model graph from a few "
                    "annotations, plan its reshards, and explain every decision.",
    )
    add_plugin_option(ap)  # before the command: spmdrules --plugin my_ops complete MODEL.json
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    c = sub.add_parser("complete", help="complete MODEL.json and print the summary table",
                       description="Complete every tensor's attribute of MODEL.json, print the "
                                   "totals and the reshards, and write the completed model.")
    c.add_argument("model", metavar="MODEL.json", help="a model file (docs/model.schema.json)")
    c.add_argument("-o", "--output", metavar="OUT.json",
                   help="write the model with its completed attributes here")
    c.add_argument("--table", action="store_true", help="also print every tensor's attribute")
    e = sub.add_parser("explain", help="explain where one tensor's attribute came from",
                       description="Complete MODEL.json and explain TENSOR's attribute: its "
                                   "annotation or chain of ops, the alternatives that lost, and "
                                   "the reshards it causes.")
    e.add_argument("model", metavar="MODEL.json")
    e.add_argument("tensor", metavar="TENSOR", help="a tensor name, e.g. layers.0.attn.softmax")
    i = sub.add_parser("import", help="import a model file into the JSON exchange format",
                       description="Read SOURCE with the importer of its suffix ("
                                   + ", ".join(sorted(sources.READERS)) + ") and write it as "
                                   "a model file (docs/model.schema.json), unannotated.")
    i.add_argument("source", metavar="SOURCE", help="e.g. model.pt2 (torch.export.save)")
    out = i.add_mutually_exclusive_group(required=True)
    out.add_argument("-o", "--output", metavar="OUT.json")
    out.add_argument("--check", action="store_true",
                     help="write nothing: list every op that cannot be mapped, with its count, "
                          "its nodes and the rule family that serves it (exit 1 if any)")
    i.add_argument("--plan", metavar="PLAN.json",
                   help="annotate the model by this plan file (docs/plan.schema.json)")
    i.add_argument("--no-progress", action="store_true",
                   help="no progress bars (they show only on a terminal, for long graphs)")
    a = sub.add_parser("auto", help="find the fastest plan of MODEL.json within a memory budget",
                       description="Search the meshes of DEVICES processes for the fastest plan "
                                   "of MODEL.json whose memory per rank fits; print its predicted "
                                   "step time and memory and the next two alternatives.")
    a.add_argument("model", metavar="MODEL.json")
    a.add_argument("--devices", type=int, required=True, help="the number of processes")
    a.add_argument("--memory", required=True, help="memory per rank, e.g. 2GiB or 512MiB")
    a.add_argument("--objective", choices=["time", "memory"], default="time")
    a.add_argument("--optimizer-states", type=int, default=2, metavar="N",
                   help="parameter-sized optimizer buffers per parameter (Adam 2, SGD 0)")
    a.add_argument("-o", "--output", metavar="PLAN.json", help="write the plan file here")
    x = sub.add_parser("example", help="write an example model (annotated, not completed)",
                       description="Write the GPT decoder or the Megatron MLP as a model file.")
    x.add_argument("which", choices=["gpt", "mlp"])
    x.add_argument("-o", "--output", metavar="OUT.json", required=True)
    x.add_argument("--layers", type=int, default=2, help="GPT decoder layers (default 2)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # exits with 2 on bad usage
    try:
        load_plugins(args.plugin)  # the installed ones and --plugin's, before any op is read
        if getattr(args, "output", None):
            check_target(args.output)  # before the work, which may take minutes
        if args.command == "complete":
            g = load(args.model)
            r = _complete(g)
            if args.table:
                _say(r.table())
            _say(r.summary())
            if args.output:
                dump(g, args.output)
                _say(f"wrote {args.output}")
        elif args.command == "import":
            return _import(args)
        elif args.command == "auto":
            return _auto(args)
        elif args.command == "explain":
            g = load(args.model)
            _say(explain(_complete(g), g.tensor(args.tensor)))
        else:
            mesh = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
            if args.layers < 0:
                _fail("--layers must be >= 0")
                return EXIT_USAGE
            g = (examples.gpt_decoder(args.layers, mesh) if args.which == "gpt"
                 else examples.mlp(mesh))
            dump(g, args.output)
            _say(f"wrote {args.output}: {g!r}")
    except (SpmdError, OSError) as err:
        return _fail(err)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
