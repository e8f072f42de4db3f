"""The ``spmdrules`` command: complete a model file, explain a tensor, write an example model.

Exit codes follow the usual conventions: 0 success, 1 the job failed (unreadable or invalid
model, a conflict completion cannot settle, an unknown tensor), 2 bad usage (argparse's own).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from spmdrules.completion.driver import complete
from spmdrules.completion.explain import explain
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph import examples
from spmdrules.graph.exchange import dump, load
from spmdrules.importers import sources

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spmdrules",
        description="Complete the distributed attributes of a model graph from a few "
                    "annotations, plan its reshards, and explain every decision.",
    )
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
    i.add_argument("-o", "--output", metavar="OUT.json", required=True)
    x = sub.add_parser("example", help="write an example model (annotated, not completed)",
                       description="Write the GPT decoder or the Megatron MLP as a model file.")
    x.add_argument("which", choices=["gpt", "mlp"])
    x.add_argument("-o", "--output", metavar="OUT.json", required=True)
    x.add_argument("--layers", type=int, default=2, help="GPT decoder layers (default 2)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # exits with 2 on bad usage
    try:
        if args.command == "complete":
            g = load(args.model)
            r = complete(g)
            if args.table:
                print(r.table())
            print(r.summary())
            if args.output:
                dump(g, args.output)
                print(f"wrote {args.output}")
        elif args.command == "import":
            g = sources.read(args.source)
            dump(g, Path(args.output))
            print(f"wrote {args.output}: {g!r}")
        elif args.command == "explain":
            g = load(args.model)
            print(explain(complete(g), g.tensor(args.tensor)))
        else:
            mesh = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
            if args.layers < 0:
                print("spmdrules: error: --layers must be >= 0", file=sys.stderr)
                return EXIT_USAGE
            g = (examples.gpt_decoder(args.layers, mesh) if args.which == "gpt"
                 else examples.mlp(mesh))
            dump(g, Path(args.output))
            print(f"wrote {args.output}: {g!r}")
    except SpmdError as err:
        print(f"spmdrules: error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as err:
        print(f"spmdrules: error: {err}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
