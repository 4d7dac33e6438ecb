"""Plug-ins: which may run, and the one resolver that turns a name into what an extension point runs.

Every extension point (a chunker, a retriever, a reranker, an index kind, an embedding backend) is described
once, beside its built-in ones, by an `ExtensionPoint`: its name, its built-ins, its entry-point group, the
arguments a plug-in is called with, and its own check and adaptation of what was loaded. `resolve(point,
name)` is the one way a name becomes one: a built-in, a name the point knows beyond its table (a model
folder), an installed package's entry point, or `module:function` imported on demand, each failure one line
in one wording (unknown, with the closest names; cannot import; not a function; the wrong arguments).

A chunker or retriever named `module:function` imports `module`. Given on the command line or
from Python, it was asked for. Named in an experiment file (or a recorded run's settings, which are
data), it loads only if its module is listed under the file's `plugins:` (or given with `--plugin
MODULE`), or if an installed package declares it as an entry point in the group `chunkeval.chunkers`
or `chunkeval.retrievers` (then `chunker: NAME` names it, as pytest and Prefect find their plug-ins).
Standard-library modules are never plug-ins: `pty:spawn` is no chunker.
The check reads names only; nothing is imported before the whole input has been checked.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from chunkeval.errors import InputError
from chunkeval.limits import short
from chunkeval.vocabulary import close_names, folded

# a module as `import` names it: dotted identifiers, never relative (`.x`, `..x`) or a path
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def check_module_name(module: str, what: str, source=None) -> str:
    """A module name to import: a dotted identifier (`package.module`), checked before any import."""
    if not isinstance(module, str) or not DOTTED.fullmatch(module):
        raise InputError(
            f"{what} {short(module)} is not a module name: dotted identifiers such as package.module "
            "(no relative name, path or space)",
            source,
        )
    return module


def check_plugin_modules(modules, what: str, source=None) -> list[str]:
    """The modules of `plugins:` or `--plugin`, each a dotted identifier."""
    return [check_module_name(str(m).strip(), what, source) for m in modules]


def check_spec(kind: str, spec: str, source=None) -> None:
    """A `module:function` spec whose module and function are dotted identifiers, checked before any import."""
    module, colon, attr = spec.partition(":")
    if not colon:
        return
    if not DOTTED.fullmatch(module.strip()) or not DOTTED.fullmatch(attr.strip()):
        raise InputError(
            f"{kind} {short(spec)} is not module:function (dotted identifiers, such as package.module:function; "
            "no relative module)",
            source,
        )


def module_of(spec: str) -> str | None:
    """The module a `module:function` spec imports; None for a plain name."""
    module, colon, attr = spec.partition(":")
    return module.strip() if colon and module.strip() and attr.strip() else None


def is_stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def check_module(kind: str, spec: str) -> None:
    """Refuse a malformed name, or a standard-library module as a plug-in, wherever the spec comes from."""
    check_spec(kind, spec)
    module = module_of(spec)
    if module is not None and is_stdlib(module):
        raise InputError(f"{kind} {short(spec)}: {module.split('.')[0]!r} is the standard library's, never a plug-in")


def check_allowed(specs: dict[str, tuple[str, ...]], allowed: set[str], source) -> None:
    """For settings read from a file or a recorded run: every `module:function` spec's module (or a
    package above it) must be in `allowed`. `specs` maps a kind (chunker, retriever, …) to its values."""
    check_plugin_modules(allowed, "plugins:", source)
    for kind, values in specs.items():
        for spec in values:
            try:
                check_module(kind, spec)
            except InputError as exc:
                raise InputError(exc.message, source) from None
            module = module_of(spec)
            if module is None:
                continue
            parts = module.split(".")
            if not any(".".join(parts[:i]) in allowed for i in range(1, len(parts) + 1)):
                raise InputError(
                    f"{kind} {short(spec)} runs code from {module!r}, which is not listed under plugins: "
                    f"(list it there, or give --plugin {module}, if you trust it)",
                    source,
                )


@dataclass(frozen=True)
class ExtensionPoint:
    """What one extension point accepts by name, and how a plug-in loaded for it is checked and made usable.
    Declared beside the point's built-ins (`chunkeval.engine.chunking.registry.CHUNKER`, …); `resolve` reads it."""

    name: str  # how its errors name it: "chunker", "index kind"
    builtins: Mapping[str, Any]  # the built-in ones by name (a registry's own table, filled as it registers)
    choices: str = ""  # what an unknown name's error offers, where the built-ins' names do not say it all
    group: str | None = None  # the entry-point group installed packages declare plug-ins in; None: none
    modules: bool = False  # whether `module:function` names one's own
    takes: tuple[str, ...] = ()  # the contract: the positional arguments a plug-in is called with
    keywords: Callable[[Any], tuple[str, ...]] | None = None  # the keyword arguments a loaded one is also given
    check: Callable[[str, Any], None] | None = None  # the point's own check of what was loaded (its attributes)
    adapt: Callable[[str, Any], Any] | None = None  # what was loaded, made into what the point runs
    other: Callable[[str], Any] | None = None  # a name beyond the table that is the point's (a model), else None

    def offered(self) -> str:
        if self.choices:
            return self.choices
        names = folded(self.builtins, 56)
        return f"{names}, or module:function for your own" if self.modules else names


def resolve(point: ExtensionPoint, name: str, source=None) -> Any:
    """What `name` is at `point`: a built-in, a name the point knows beyond its table, an installed package's
    entry point (the point's group), or `module:function` imported now (whether a file may name a module is
    decided before this, by `check_allowed`); a loaded plug-in is checked against the point's contract and
    adapted by it. Every failure is one line: `unknown retriever 'bm26': choose dense, …; did you mean bm25?`."""
    if name in point.builtins:
        return point.builtins[name]
    if point.other is not None and (found := point.other(name)) is not None:
        return found
    if point.modules and ":" in str(name):
        loaded, what = _imported(point, name, source), name.partition(":")[2]
    else:
        found = entry_point(point, name)
        if found is None:
            hint = close_names(name, point.builtins)
            own = " (or module:function for your own)" if point.modules else ""
            said = f"{hint}{own}" if hint else f"choose {point.offered()}"
            raise InputError(f"unknown {point.name} {short(name)}; {said}", source)
        loaded, what = _entry_loaded(point, name, found, source), f"its entry point {found.value}"
    if not callable(loaded):
        raise InputError(f"{point.name} {short(name)}: {what!r} is not a function", source)
    _check_contract(point, name, loaded, source)
    if point.check is not None:
        point.check(name, loaded)
    return point.adapt(name, loaded) if point.adapt is not None else loaded


def entry_point(point: ExtensionPoint, name: str):
    """The installed entry point `name` of `point`'s group, or None (always None for a point without one)."""
    if point.group is None or ":" in str(name):
        return None
    return next(iter(entry_points(group=point.group, name=name)), None)


def _entry_loaded(point: ExtensionPoint, name: str, found, source) -> Any:
    try:
        return found.load()
    except Exception as exc:  # noqa: BLE001 - a broken plug-in package is the user's one line
        raise InputError(
            f"{point.name} {name!r}: its entry point {found.value!r} does not load ({exc})", source
        ) from None


def _imported(point: ExtensionPoint, name: str, source) -> Any:
    """`module:function` (the function may be dotted: `Class.method`), imported."""
    check_module(point.name, name)
    module, _, attr = name.partition(":")
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        raise InputError(f"{point.name} {name!r}: cannot import {module!r} ({exc})", source) from None
    for part in attr.split("."):
        if not hasattr(found, part):
            raise InputError(f"{point.name} {name!r}: {module!r} has no {attr!r}", source)
        found = getattr(found, part)
    return found


def _check_contract(point: ExtensionPoint, name: str, fn, source) -> None:
    """A plug-in that cannot be called as the point calls it is refused now, not in the middle of a run."""
    keywords = point.keywords(fn) if point.keywords is not None else ()
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or extension type that says nothing of its arguments
        return
    try:
        signature.bind(*point.takes, **dict.fromkeys(keywords))
    except TypeError as exc:
        wanted = ", ".join([*point.takes, *(f"{k}=…" for k in keywords)])
        raise InputError(f"{point.name} {name!r} must take ({wanted}): {exc}", source) from None
