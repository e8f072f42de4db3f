"""Model files by suffix: what ``spmdrules import SOURCE -o MODEL.json`` reads.

A reader turns a file into a Graph; each importer registers one per suffix it reads (torch's
``.pt2``, an ExportedProgram saved by ``torch.export.save``, read by ``spmdrules.importers.pt2``,
which refuses an archive that would unpickle or load code). A reader imports its framework
only when called. ONNX files (``.onnx``) are read by ``spmdrules.importers.onnx``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from spmdrules.graph.graph import Graph
from spmdrules.importers.errors import ImporterError
from spmdrules.importers.unmapped import UnmappedOpsError, UnmappedReport

Reader = Callable[[Path], Graph]
READERS: dict[str, Reader] = {}


def reader(suffix: str) -> Callable[[Reader], Reader]:
    def reg(fn: Reader) -> Reader:
        READERS[suffix] = fn
        return fn
    return reg


def read(path: str | Path) -> Graph:
    """The Graph of the model file ``path``, read by the reader of its suffix."""
    p = Path(path)
    fn = READERS.get(p.suffix.lower())
    if fn is None:
        known = ", ".join(sorted(READERS))
        raise ImporterError(f"{p.name}: no importer reads {p.suffix or 'files without a suffix'!r}"
                            f" files; the readable suffixes are {known}")
    if not p.exists():
        raise ImporterError(f"{p}: no such file")
    return fn(p)


def check(path: str | Path) -> UnmappedReport:
    """Every op of the model file ``path`` that cannot be mapped (an empty report when all can),
    from one import that goes on past each of them."""
    try:
        g = read(path)
    except UnmappedOpsError as e:
        return e.report
    return UnmappedReport(g.name)


@reader(".pt2")
def _pt2(path: Path) -> Graph:
    from spmdrules.importers import pt2
    from spmdrules.importers import torch as torch_import

    ep = pt2.load(path)  # checked for pickles and code before torch reads it
    return torch_import.from_exported(torch_import.decompose_program(ep), name=path.stem).graph


@reader(".onnx")
def _onnx(path: Path) -> Graph:
    from spmdrules.importers import onnx as onnx_import

    return onnx_import.load(path, name=path.stem)
