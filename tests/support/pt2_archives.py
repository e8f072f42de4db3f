""".pt2 archives crafted as an attacker would: a file saved by torch.export.save, with one entry
that torch 2.13's loader would unpickle (or load as code) replaced by a pickle that creates a
file when it is unpickled. Each case names the entry the importer must refuse."""

from __future__ import annotations

import json
import pickle
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class _CreatesFile:
    """Unpickled, it opens ``path`` for writing: the file appears."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def payload(marker: Path) -> bytes:
    return pickle.dumps(_CreatesFile(marker))


def save_model(torch: Any, path: Path) -> Path:
    """A module with a parameter, a buffer and a lifted tensor constant, saved by torch."""

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)
            self.register_buffer("shift", torch.ones(3))

        def forward(self, x: Any) -> Any:
            return self.fc(x) + self.shift + torch.tensor([1.0, 2.0, 3.0])

    torch.export.save(torch.export.export(Model(), (torch.randn(2, 4),)), str(path))
    return path


def rewrite(src: Path, dst: Path, edit: Callable[[dict[str, bytes]], None]) -> Path:
    """``src`` with its entries (named without the archive's folder) changed by ``edit``."""
    with zipfile.ZipFile(src) as z:
        folder = z.namelist()[0].split("/")[0] + "/"
        entries = {n[len(folder):]: z.read(n) for n in z.namelist()}
    edit(entries)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as z:
        for name, data in entries.items():
            z.writestr(folder + name, data)
    return dst


def _config(entries: dict[str, bytes], kind: str) -> dict[str, Any]:
    table: dict[str, Any] = json.loads(entries[f"data/{kind}/model_{kind}_config.json"])
    return table


def _set_config(entries: dict[str, bytes], kind: str, table: dict[str, Any]) -> None:
    entries[f"data/{kind}/model_{kind}_config.json"] = json.dumps(table).encode()


@dataclass(frozen=True)
class Case:
    """An archive whose ``entry`` holds ``payload``, made from a saved model by ``edit``."""

    name: str
    entry: str
    edit: Callable[[dict[str, bytes], bytes], None]


def _pickled(kind: str, fqn: str, path_name: str | None = None,
             use_pickle: bool = True) -> Callable[[dict[str, bytes], bytes], None]:
    def edit(entries: dict[str, bytes], evil: bytes) -> None:
        table = _config(entries, kind)
        meta = table["config"][fqn]
        meta["use_pickle"] = use_pickle
        if path_name is not None:
            meta["path_name"] = path_name
        _set_config(entries, kind, table)
        entries[f"data/{kind}/{meta['path_name']}"] = evil
    return edit


def _put(entry: str) -> Callable[[dict[str, bytes], bytes], None]:
    def edit(entries: dict[str, bytes], evil: bytes) -> None:
        entries[entry] = evil
    return edit


CASES = [
    # torch.load(weights_only=False), as the config asks
    Case("pickled weight", "data/weights/weight_0", _pickled("weights", "fc.weight")),
    Case("pickled tensor constant", "data/constants/tensor_0",
         _pickled("constants", "lifted_tensor_0")),
    # pickle.loads and TorchScript's unpickler, by the constant's file name
    Case("opaque object constant", "data/constants/opaque_obj_0",
         _pickled("constants", "lifted_tensor_0", "opaque_obj_0")),
    Case("custom object constant", "data/constants/custom_obj_0",
         _pickled("constants", "lifted_tensor_0", "custom_obj_0")),
    Case("object constant not marked pickled", "data/constants/opaque_obj_1",
         _pickled("constants", "lifted_tensor_0", "opaque_obj_1", use_pickle=False)),
    # weights_only=True, then weights_only=False when that fails
    Case("legacy weights file", "data/weights/model.pt", _put("data/weights/model.pt")),
    Case("legacy weights file named by the config", "data/weights/model.pt",
         _pickled("weights", "fc.weight", "model.pt", use_pickle=False)),
    Case("legacy constants file", "data/constants/model.pt", _put("data/constants/model.pt")),
    Case("sample inputs", "data/sample_inputs/model.pt", _put("data/sample_inputs/model.pt")),
    # compiled code torch loads into the process, and an entry no config names
    Case("AOTInductor package", "data/aotinductor/model/model.wrapper.so",
         _put("data/aotinductor/model/model.wrapper.so")),
    Case("stray entry", "data/weights/weight_9", _put("data/weights/weight_9")),
]


def craft(torch: Any, case: Case, folder: Path, marker: Path) -> Path:
    src = save_model(torch, folder / "clean.pt2")
    return rewrite(src, folder / "crafted.pt2", lambda e: case.edit(e, payload(marker)))


def legacy_format(torch: Any, folder: Path, marker: Path) -> Path:
    """torch.export.save's older zip (serialized_*.pt beside the program's JSON), which
    torch.export.load falls back to when the archive does not read as a PT2 archive."""
    from torch._export.serde.schema import SCHEMA_VERSION

    src = save_model(torch, folder / "clean.pt2")
    with zipfile.ZipFile(src) as z:
        program = next(z.read(n) for n in z.namelist() if n.endswith("models/model.json"))
    evil = payload(marker)
    dst = folder / "legacy.pt2"
    with zipfile.ZipFile(dst, "w") as z:
        z.writestr("version", ".".join(map(str, SCHEMA_VERSION)))
        z.writestr("serialized_exported_program.json", program)
        for part in ("state_dict", "constants", "example_inputs"):
            z.writestr(f"serialized_{part}.pt", evil)
    return dst
