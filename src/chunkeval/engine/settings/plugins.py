"""Which plug-ins may run: code is imported only when the user asked for it.

A chunker, retriever or reranker named `module:function` imports `module`. Given on the command line or
from Python, it was asked for. Named in an experiment file (or a recorded run's settings, which are
data), it loads only if its module is listed under the file's `plugins:` (or given with `--plugin
MODULE`), or if an installed package declares it as an entry point in the group `chunkeval.chunkers`,
`chunkeval.retrievers` or `chunkeval.rerankers` (then `chunker: NAME` names it, as pytest and Prefect
find their plug-ins). Standard-library modules are never plug-ins: `pty:spawn` is no chunker.
The check reads names only; nothing is imported before the whole input has been checked.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import entry_points

from chunkeval.errors import InputError
from chunkeval.limits import short

GROUPS = {"chunker": "chunkeval.chunkers", "retriever": "chunkeval.retrievers", "reranker": "chunkeval.rerankers"}


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


def entry_point(kind: str, name: str):
    """The installed entry point `name` of `kind`'s group, or None."""
    found = entry_points(group=GROUPS[kind], name=name)
    return next(iter(found), None)


def load_entry_point(kind: str, name: str):
    """The object an installed package declares as `kind` plug-in `name` (None when none does)."""
    ep = entry_point(kind, name)
    if ep is None:
        return None
    try:
        return ep.load()
    except Exception as exc:  # noqa: BLE001 - a broken plug-in package is the user's one line
        raise InputError(f"{kind} {name!r}: its entry point {ep.value!r} does not load ({exc})") from None


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
