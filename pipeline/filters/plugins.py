"""Plugins: a user's Python file registering filters, and the line that blames it when it fails.

A plugin's failure is the plugin's, never "an internal error" (so is that of a filter the application
registers in its own code): at load (whatever it raises, ``sys.exit``
included) it is a config error naming the file; while the chain is built, the same; during the run, a
:class:`~pipeline.errors.PluginError` naming the filter, the file and the frame.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import signal
import sys
from pathlib import Path
from typing import Iterable, Iterator

from ..checks import check_reachable, special_kind
from ..errors import ConfigError, Interrupted, PipelineError, PluginError
from .registry import FILTERS

_LOADED_PLUGINS: set[Path] = set()
PLUGIN_FILES: dict[str, Path] = {}  # filter name -> the plugin file that registered it


def load_plugin(path: str | Path) -> None:
    """Import a user's Python file; its ``@register_filter`` classes join the registry.

    A file already loaded is not run again (a bench runs the pipeline several times in one process).
    Any name is read as Python source (the import system would refuse ``notes.txt`` with an obscure
    AttributeError); a file that fails leaves no filter of its own registered.
    """
    path = Path(path)
    check_reachable(path, "plugin", ConfigError)
    if not path.is_file():
        kind = "directory" if path.is_dir() else special_kind(path)
        raise ConfigError(f"plugin {path}: is a {kind}; a plugin is a Python file" if kind else
                          f"plugin not found: {path}")
    resolved = path.resolve()
    if resolved in _LOADED_PLUGINS:
        return
    from . import builtin  # noqa: F401  registered before: a failing plugin's own names are the ones removed

    before = set(FILTERS)
    try:
        _exec(path)
    except BaseException as e:  # SystemExit too: a plugin does not decide how the run ends
        if isinstance(e, Interrupted) or (isinstance(e, KeyboardInterrupt) and not _sigint_ignored()):
            raise  # the user's stop, not the plugin's failure
        for name in set(FILTERS) - before:
            del FILTERS[name]
        if isinstance(e, ConfigError):
            raise ConfigError(f"plugin {path}: {e}") from e
        raise ConfigError(f"cannot load plugin {path}: {_describe(e)}") from e
    _LOADED_PLUGINS.add(resolved)
    for name in set(FILTERS) - before:
        PLUGIN_FILES[name] = resolved


def _sigint_ignored() -> bool:
    """Whether SIGINT is ignored in this process (a batch's workers, a job started in the background): a
    KeyboardInterrupt there is raised by code, not by a Ctrl-C."""
    try:
        return signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    except ValueError:  # no signals here
        return False


def _exec(path: Path) -> None:
    name = f"pipeline_plugin_{path.stem}"
    loader = importlib.machinery.SourceFileLoader(name, os.fspath(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)


def _describe(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"it called sys.exit({error.code!r})"
    said = str(error)
    return f"{type(error).__name__}: {said}" if said else type(error).__name__


def blamed_plugin(error: BaseException) -> Path | None:
    """The loaded plugin file in whose code ``error`` was raised (the innermost one), if any."""
    loaded = [Path(name).resolve() for name in _raised_in(error) if name]
    return next((path for path in reversed(loaded) if path in _LOADED_PLUGINS), None)


def _raised_through(error: BaseException) -> list:
    """The code objects ``error`` went through, outermost first."""
    codes, tb = [], error.__traceback__
    while tb is not None:
        codes.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    return codes


def _raised_in(error: BaseException) -> list[str]:
    """The files of the code ``error`` went through, outermost first."""
    return [code.co_filename for code in _raised_through(error)]


def _plugin_filters(filters: Iterable) -> list:
    from .fuse import members_of

    return [m for f in filters for m in members_of(f) if _origin(m) is not None]


def _module_file(f) -> str | None:
    return getattr(sys.modules.get(type(f).__module__), "__file__", None)


def _raised_by(f, error: BaseException) -> bool:
    """Whether ``error`` went through the code of ``f``'s class: its module's file, or for a class whose
    module has none (``python -c``, a notebook's cell) its own methods, not whatever else shares the name
    "<string>" (the methods a dataclass generates)."""
    path = _module_file(f)
    if path is not None:
        return path in _raised_in(error)
    methods = {getattr(value, "__code__", None) for value in vars(type(f)).values()} - {None}
    return not methods.isdisjoint(_raised_through(error))


def _origin(f) -> str | None:
    """Where a filter that is not a built-in was written: its plugin file, or for a class registered by
    the application itself (``@register_filter`` in its own code), its module's file; None for a built-in."""
    if (path := PLUGIN_FILES.get(f.name)) is not None:
        return f"plugin {path}"
    module = type(f).__module__
    if module == "pipeline" or module.startswith("pipeline."):
        return None
    return _module_file(f) or module


def plugin_failure(filters: Iterable, error: BaseException, where: str) -> PluginError | None:
    """A PluginError for ``error`` if a plugin's filter is among ``filters`` (fused ones opened up): the
    one whose file raised it, else every plugin filter there. None: no plugin's filter is involved."""
    from ..gpu.failures import is_cuda_error

    if isinstance(error, (PipelineError, KeyboardInterrupt)) or is_cuda_error(error):
        return None  # ours, the user's stop, or a CUDA error (a GPUError, whichever code met it)
    # A plugin file's filter is blamed when a plugin's code raised or none did (its step failed); one the
    # application registered only when its own module's code raised.
    involved = [f for f in _plugin_filters(filters) if f.name in PLUGIN_FILES or _raised_by(f, error)]
    path = blamed_plugin(error)
    culprits = [f for f in involved if PLUGIN_FILES.get(f.name) == path] or involved
    if not culprits:
        return None
    names = ", ".join(repr(f.name) for f in culprits)
    files = ", ".join(sorted({_origin(f) for f in culprits}))
    return PluginError(f"filter {names} from {files} failed {where}: {_describe(error)}")


@contextlib.contextmanager
def plugin_errors_are_config_errors() -> Iterator[None]:
    """While a chain is parsed and planned: a plugin's exception is a config error naming its file."""
    try:
        yield
    except PipelineError:
        raise
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        path = blamed_plugin(e)
        if path is None:
            raise
        raise ConfigError(f"plugin {path}: {_describe(e)}") from e
