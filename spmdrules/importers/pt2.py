"""A ``.pt2`` file (``torch.export.save``) read without unpickling anything.

torch 2.13's own loader runs whatever pickle the archive asks it to: a weight or a tensor
constant whose config entry says ``"use_pickle": true`` is read with
``torch.load(weights_only=False)``, an opaque object with ``pickle.loads``, a custom object with
TorchScript's unpickler; the legacy weight and constant files and the sample inputs go through a
``weights_only=True`` load that falls back to ``weights_only=False`` when it fails; an
``data/aotinductor/`` entry is compiled code that torch loads into the process; and
``torch.export.load`` falls back to the pickled pre-2.8 format when the archive does not read.
Every one of those files is the archive's own, so a crafted file runs code on import.

``load`` therefore reads the file once into memory and checks it with torch's own archive reader
(the parser torch then reads it with, so both see the same entries) before torch deserializes
it. Every entry must be one an ExportedProgram archive holds as data: the format markers, each
model's JSON program, weights and tensor constants stored raw (``use_pickle`` false) and named by
their configs, sample inputs that load with ``weights_only=True``, and ``extra/`` text files.
Anything else is refused with ``UnsafeArchiveError`` naming the entry. The checked bytes are then
handed to ``load_pt2``, the reader behind ``torch.export.load``, which has no legacy fallback.
"""

from __future__ import annotations

import importlib
import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spmdrules.importers.errors import ImporterError, UnsafeArchiveError

#: the archive's format markers, read as text
_MARKERS = frozenset({"archive_format", "archive_version", "byteorder", ".data/version",
                      ".data/serialization_id"})
_OLDER = ("the older pickled format of torch.export.save is not read: save the model again with "
          "torch.export.save of torch 2.13")


def load(path: Path) -> Any:
    """The ExportedProgram saved in the ``.pt2`` file ``path``, checked first (module docs)."""
    from spmdrules.importers.torch import _torch

    torch = _torch()
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ImporterError(f"{path}: cannot be read ({e.strerror or e})") from e
    unknown = check(torch, data, path.name)
    try:
        with _stand_ins(torch, unknown):
            contents = _package().load_pt2(io.BytesIO(data))
            for ep in contents.exported_programs.values():
                _as_dicts(torch, ep)
    except Exception as e:
        raise ImporterError(f"{path.name}: torch could not read the archive: "
                            f"{type(e).__name__}: {str(e)[:1000]}") from e
    programs = contents.exported_programs
    if "model" not in programs:
        raise ImporterError(f"{path.name}: the archive holds no program named 'model' (it holds "
                            f"{sorted(programs)}); save one with torch.export.save")
    return programs["model"]


def check(torch: Any, data: bytes, name: str) -> set[str]:
    """Raise ``UnsafeArchiveError`` unless every entry of the archive ``data`` is plain data;
    return the pytree types its programs' inputs and outputs name that are not registered."""
    c = _package()
    try:
        reader = c.PT2ArchiveReader(io.BytesIO(data))
        entries = set(reader.get_file_names())
    except Exception as e:
        raise ImporterError(f"{name}: not a PT2 archive ({type(e).__name__}: {str(e)[:300]}); "
                            f"{_OLDER}") from e
    models = {e[len(c.MODELS_DIR):-len(".json")] for e in entries
              if e.startswith(c.MODELS_DIR) and e.endswith(".json")}
    if not models:
        raise ImporterError(f"{name}: the archive holds no program (no {c.MODELS_DIR}*.json); "
                            f"{_OLDER}")
    allowed = set(_MARKERS)
    unknown: set[str] = set()
    for model in sorted(models):
        for legacy in (f"{c.WEIGHTS_DIR}{model}.pt", f"{c.CONSTANTS_DIR}{model}.pt"):
            if legacy in entries:  # torch reads it before any config, whatever the configs say
                raise UnsafeArchiveError(name, legacy, *_why(c, legacy))
        allowed.add(c.MODELS_FILENAME_FORMAT.format(model))
        unknown |= _tree_types(torch, reader, name, c.MODELS_FILENAME_FORMAT.format(model))
        allowed |= _payloads(reader, entries, name, c.WEIGHTS_CONFIG_FILENAME_FORMAT.format(model),
                             c.WEIGHTS_DIR, "weight", ())
        allowed |= _payloads(reader, entries, name,
                             c.CONSTANTS_CONFIG_FILENAME_FORMAT.format(model), c.CONSTANTS_DIR,
                             "constant", (c.TENSOR_CONSTANT_FILENAME_PREFIX,))
        inputs = c.SAMPLE_INPUTS_FILENAME_FORMAT.format(model)
        if inputs in entries:
            _check_tensors_only(torch, reader, name, inputs)
            allowed.add(inputs)
    for entry in sorted(entries - allowed):
        if not entry.startswith(c.EXTRA_DIR):  # extra files are read as text
            raise UnsafeArchiveError(name, entry, *_why(c, entry))
    return unknown


def _tree_types(torch: Any, reader: Any, name: str, entry: str) -> set[str]:
    """The pytree node types the program's input and output specs name that no library in this
    process registered (a Hugging Face ``ModelOutput`` whose module is not imported).

    A spec's context that names an enum is refused: torch's reader imports the enum's module by
    the name the file gives (``enum_object_hook``), and a model's own program never needs it."""
    try:
        program = json.loads(reader.read_string(entry))
        calls = program["graph_module"]["module_call_graph"]
        specs = [json.loads(s) for mc in calls for s in (mc["signature"] or {}).values()
                 if isinstance(s, str)]
    except Exception:
        return set()  # not ours to diagnose: torch's reader says what is wrong with it
    _check_ops(torch, program, name)
    known = torch.utils._pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE  # noqa: SLF001 -- torch's registry
    out: set[str] = set()
    todo = [s[1] for s in specs if isinstance(s, list) and len(s) == 2]
    while todo:
        node = todo.pop()
        if not isinstance(node, dict):
            continue
        ctx = node.get("context")
        if isinstance(ctx, str) and "__enum__" in ctx:
            raise UnsafeArchiveError(name, entry, "has a pytree spec whose context names an enum,"
                                     " which torch's reader imports by the module name the file "
                                     "gives", "export the model with plain outputs")
        if isinstance(node.get("type"), str) and node["type"] not in known:
            out.add(node["type"])
        todo.extend(node.get("children_spec") or ())
    return out


def _check_ops(torch: Any, program: Any, name: str) -> None:
    """Every custom op the program calls is registered in this process (torch's reader resolves
    an op by its name and fails on the first it does not know, deep in its deserializer)."""
    missing: dict[str, int] = {}
    nodes = ((program.get("graph_module") or {}).get("graph") or {}).get("nodes") or []
    for node in nodes:
        target = node.get("target") if isinstance(node, dict) else None
        parts = target.split(".") if isinstance(target, str) else []
        if len(parts) != 5 or parts[:2] != ["torch", "ops"] or parts[2] == "aten":
            continue
        packet = getattr(getattr(torch.ops, parts[2]), parts[3], None)
        if packet is None or not hasattr(packet, parts[4]):
            op = f"{parts[2]}::{parts[3]}"
            missing[op] = missing.get(op, 0) + 1
    if missing:
        listed = ", ".join(f"{op} ({n} node{'s' * (n > 1)})" for op, n in missing.items())
        raise ImporterError(
            f"{name}: the program calls {listed}, which no library in this process registers; "
            "import the library that defines it (its torch.library registration) before reading "
            "the file, and map it with a converter (docs/importers.md, 'Converters from user "
            "code')")


class _StandIn(dict[str, Any]):
    """A pytree output class of the program that this process has not registered, read as the
    dict of its fields: the importer needs only their names."""


@contextmanager
def _stand_ins(torch: Any, names: set[str]) -> Iterator[None]:
    """Register a ``_StandIn`` under each of ``names`` while torch reads the archive; its
    context must be the JSON list of the field names (a ``ModelOutput``'s, a dataclass's)."""
    pytree = torch.utils._pytree  # noqa: SLF001 -- torch.export serialises specs through it
    made: list[type] = []
    try:
        for n in sorted(names):
            cls = type(f"StandIn[{n}]", (_StandIn,), {})
            pytree.register_pytree_node(
                cls, lambda d: (list(d.values()), list(d)),
                lambda vs, keys, cls=cls: cls(zip(keys, vs, strict=True)),
                serialized_type_name=n, to_dumpable_context=json.dumps,
                from_dumpable_context=_field_names(n))
            made.append(cls)
        yield
    finally:
        for cls in made:
            pytree._deregister_pytree_node(cls)  # noqa: SLF001 -- torch has no public undo


def _as_dicts(torch: Any, ep: Any) -> None:
    """Every ``_StandIn`` node of the program's specs as a dict of the same fields, so the
    program runs (decomposition retraces it) once the stand-ins are unregistered."""
    pytree = torch.utils._pytree  # noqa: SLF001 -- torch.export serialises specs through it

    def plain(spec: Any) -> Any:
        if spec is None or spec.is_leaf():
            return spec
        kids = [plain(c) for c in spec.children()]
        if isinstance(spec.type, type) and issubclass(spec.type, _StandIn):
            return pytree.TreeSpec(dict, list(spec.context), kids)
        return pytree.TreeSpec(spec.type, spec.context, kids)

    for entry in ep.module_call_graph:
        sig = entry.signature
        if sig is not None:
            sig.in_spec, sig.out_spec = plain(sig.in_spec), plain(sig.out_spec)
    codegen = ep.graph_module.graph._codegen  # noqa: SLF001 -- fx keeps the specs only there
    info = getattr(codegen, "pytree_info", None)
    if info is not None:
        codegen.pytree_info = info._replace(in_spec=plain(info.in_spec),
                                            out_spec=plain(info.out_spec))


def _field_names(type_name: str) -> Any:
    def read(context: str) -> list[str]:
        try:
            keys = json.loads(context)
        except ValueError:
            keys = None
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ImporterError(
                f"the program's output class {type_name} is not registered as a pytree node "
                f"in this process, and its context {context[:200]!r} is not a list of field "
                "names to read it by; import the library that defines it (it registers the "
                "class) before loading, or export the model with plain outputs (a tuple or a "
                "dict; return_dict=False for Hugging Face models)")
        return keys
    return read


def _package() -> Any:
    """torch's archive module: its reader, ``load_pt2`` and the archive's names."""
    return importlib.import_module("torch.export.pt2_archive._package")


def _payloads(reader: Any, entries: set[str], name: str, config: str, folder: str, kind: str,
              prefixes: tuple[str, ...]) -> set[str]:
    """The config and the raw tensor files it names; a pickled entry is refused."""
    if config not in entries:
        return set()
    try:
        table = json.loads(reader.read_string(config))["config"]
        items = list(table.items())
    except Exception as e:
        raise ImporterError(f"{name}: entry {config!r} is not a payload config "
                            f"({type(e).__name__}: {e})") from e
    out = {config}
    for fqn, meta in items:
        path = meta.get("path_name") if isinstance(meta, dict) else None
        if not isinstance(path, str):
            raise ImporterError(f"{name}: entry {config!r}: {kind} {fqn!r} names no file")
        entry = folder + path
        if meta.get("use_pickle", False) is not False:
            raise UnsafeArchiveError(
                name, entry, f"holds {kind} {fqn!r} pickled (use_pickle in {config}, as "
                "torch.export.save writes a tensor subclass)", "export the model with plain "
                "tensors")
        if prefixes and not path.startswith(prefixes):
            raise UnsafeArchiveError(name, entry, f"holds {kind} {fqn!r} as a pickled object, "
                                     "not a tensor", "export a model whose constants are tensors")
        out.add(entry)
    return out


def _check_tensors_only(torch: Any, reader: Any, name: str, entry: str) -> None:
    """torch reads the sample inputs with ``weights_only=True`` and, if that fails, unpickles
    them; they are checked to load the safe way, so torch's first attempt is the one that
    succeeds (both read the same bytes)."""
    try:
        torch.load(io.BytesIO(reader.read_bytes(entry)), weights_only=True)
    except Exception as e:
        first = (str(e).splitlines() or [""])[0][:200]
        raise UnsafeArchiveError(
            name, entry, "holds sample inputs that are not plain tensors (a weights_only load "
            f"refuses them: {type(e).__name__}: {first})", "save the model with tensor example "
            "inputs") from e


def _why(c: Any, entry: str) -> tuple[str, str]:
    """What an entry outside the allowed ones is, and the fix."""
    if entry.startswith(c.AOTINDUCTOR_DIR):
        return ("is AOTInductor compiled code, which torch would load into the process",
                "import the ExportedProgram saved without it (torch.export.save)")
    if entry.endswith(".pt") and entry.startswith((c.WEIGHTS_DIR, c.CONSTANTS_DIR)):
        return ("is a legacy pickled weights or constants file", "save the model again with "
                "torch.export.save of torch 2.13, which stores tensors raw")
    return ("is no file an ExportedProgram archive holds as data (no config names it)",
            "save the model with torch.export.save")


__all__ = ["check", "load"]
