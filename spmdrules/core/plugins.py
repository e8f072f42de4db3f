"""Plugins: code from outside the package that registers ops (``spmdrules.register_op``).

A plugin is a module that registers when it is imported, or a function (``module:function``)
that registers when it is called. An installed distribution names its plugins in the entry-point
group ``spmdrules.plugins`` (``[project.entry-points."spmdrules.plugins"]`` in its
pyproject.toml); ``load_plugins`` loads each of them once per process, and also each module it is
given (the commands' ``--plugin MODULE``) and each module named in ``SPMDRULES_PLUGINS``
(separated by commas). It names the given modules there too, so that every process this one
starts (the ranks of an MPI job, the launcher's workers) loads the same plugins.

Whatever a plugin raises while it loads becomes a ``PluginError`` naming the entry point (or the
module) and the cause; a plugin that registers a name that is taken raises the
``DuplicateRegistrationError`` of that table, which names the plugin.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Final

from spmdrules.core.errors import DuplicateRegistrationError, SpmdError
from spmdrules.core.tables import loading

#: the entry-point group an installed plugin declares
GROUP: Final = "spmdrules.plugins"
#: modules every process loads, comma-separated (the given ones pass to child processes so)
ENV: Final = "SPMDRULES_PLUGINS"
#: set (non-empty), the installed plugins are not loaded; given modules still are. A process
#: that must see the package's own ops only sets it, as pytest's PYTEST_DISABLE_PLUGIN_AUTOLOAD
#: (the test suite: its checks over every registered op call the commands in its own process)
NO_AUTOLOAD: Final = "SPMDRULES_DISABLE_PLUGIN_AUTOLOAD"

#: what was loaded in this process: the entry point's value or the module's name -> its label
_loaded: dict[str, str] = {}


class PluginError(SpmdError, ImportError):
    """A plugin that could not be loaded: the message names it and the cause."""


def _run(label: str, key: str, load: Callable[[], object], fix: str) -> None:
    if key in _loaded:
        return
    with loading(label):
        try:
            target = load()
            if callable(target) and not isinstance(target, ModuleType):
                target()
        except (DuplicateRegistrationError, PluginError):
            raise
        except Exception as e:
            raise PluginError(f"{label} failed to load: {type(e).__name__}: {e}. {fix}") from e
    _loaded[key] = label


def _entry_point(ep: EntryPoint) -> None:
    dist = ep.dist.name if ep.dist is not None else "an unknown distribution"
    _run(f"entry point {ep.name!r} = {ep.value!r} of group {GROUP!r} (from {dist})", ep.value,
         ep.load, f"Fix the plugin, or uninstall it (pip uninstall {dist})")


def _module(name: str) -> None:
    def load() -> ModuleType:
        return importlib.import_module(name)

    _run(f"plugin module {name!r}", name, load,
         f"Check that {name!r} is importable here (python -c 'import {name}')")


def load_plugins(modules: Sequence[str] = (), *, installed: bool = True) -> tuple[str, ...]:
    """Load the installed plugins (unless ``installed`` is False or ``NO_AUTOLOAD`` is set),
    the modules named in ``SPMDRULES_PLUGINS`` and ``modules``, each once; return what this
    process has loaded.

    ``modules`` are added to ``SPMDRULES_PLUGINS`` in this process's environment, which the
    processes it starts inherit."""
    bad = [m for m in modules if not isinstance(m, str) or not all(
        part.isidentifier() for part in m.split("."))]
    if bad:
        raise PluginError(f"load_plugins: {bad[0]!r} is not a module name (dotted identifiers, "
                          "as for import)")
    if installed and not os.environ.get(NO_AUTOLOAD):
        for ep in sorted(entry_points(group=GROUP), key=lambda ep: (ep.name, ep.value)):
            _entry_point(ep)
    named = [m for m in os.environ.get(ENV, "").split(",") if m.strip()]
    for name in (*(m.strip() for m in named), *modules):
        _module(name)
    if modules:
        os.environ[ENV] = ",".join(dict.fromkeys((*named, *modules)))
    return tuple(_loaded.values())


def add_plugin_option(parser: argparse.ArgumentParser) -> None:
    """The commands' ``--plugin MODULE`` (repeatable), read as ``args.plugin``."""
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help=f"load this plugin module (repeatable), besides the installed "
                             f"ones (entry-point group {GROUP})")


def loaded_plugins() -> tuple[str, ...]:
    """What ``load_plugins`` has loaded in this process, in order."""
    return tuple(_loaded.values())


__all__ = ["ENV", "GROUP", "NO_AUTOLOAD", "PluginError", "add_plugin_option", "load_plugins",
           "loaded_plugins"]
