"""Bounds on what chunkeval reads, so that no input can hang it or exhaust the machine.

Each bound is documented in docs/limits.md; each is a one-line error (exit 2 at the command line):
- special files (FIFOs, devices, sockets) are refused by name, before they are opened;
- a CSV header or a JSON Lines file's first line is checked from the file's first `HEADER_BYTES` bytes;
- YAML whose aliases expand past `YAML_NODES` values, and JSON nested deeper than `JSON_DEPTH`, are refused;
- a YAML mapping that gives a key twice, or a key that is not a string (`1:`, `true:`, `null:`, `[a]:`), is
  refused, in every YAML file chunkeval reads;
- names that become part of a path are at most `NAME_LENGTH` characters, and whole numbers at most
  `MAX_INT` (a 32-bit machine integer);
- a document file (or a JSONL corpus's document) is at most `DOCUMENT_BYTES`, a grade at most `MAX_GRADE`,
  a TREC run's score at most `MAX_SCORE`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import reprlib
import stat
from pathlib import Path

from chunkeval.errors import InputError

HEADER_BYTES = 1 << 20  # 1 MiB: the most read before a CSV header or a first JSON line is judged
YAML_NODES = 100_000  # values of an experiment file once its aliases are expanded
JSON_DEPTH = 64  # nesting of arrays and objects in one JSON value
NAME_LENGTH = 100  # characters of an experiment name
MAX_INT = 2**31 - 1  # the largest k, chunk size, overlap or rrf_k
DOCUMENT_BYTES = 64 << 20  # 64 MiB: the largest document file (or JSONL document) read, checked before parsing
MAX_GRADE = 1000  # the largest grade of a qrels row, in magnitude (TREC and BEIR grade 0 to 4 or so)
MAX_SCORE = 1e30  # the largest score of a TREC run row, in magnitude: finite as a float32 too, as scores are kept

NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{NAME_LENGTH - 1}}}")
_short = reprlib.Repr()
_short.maxstring = _short.maxother = 60
_short.maxlist = _short.maxdict = _short.maxtuple = 4
_short.maxlevel = 2


def short(value) -> str:
    """`repr(value)`, cut short: what an error message shows of a value that may be huge or hostile."""
    return _short.repr(value)


def regular_file(path: Path) -> Path:
    """`path` when it is a regular file (or a link to one); a special file is refused without opening it."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError("file not found", path) from None
    except OSError as exc:
        raise InputError(f"cannot read file ({exc.strerror})", path) from None
    if stat.S_ISDIR(mode):
        raise InputError("cannot read file (a folder)", path)
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise InputError(f"is {kind}, not a regular file", path)
    return path


RECORD_BYTES = 64 << 20  # the largest record chunkeval reads back of its own (a manifest, a cache entry, a seal)
INPUT_BYTES = 1 << 30  # the largest text input read whole (an experiment file, a TREC run, a qrels file)


class NotRegular(OSError):
    """A file that is not a regular file where one is expected, or one past its bound: unreadable, as a missing
    file is (an `OSError`, so that whoever reads a record of its own remakes it)."""


def _regular_bytes(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`: opened without blocking and checked as opened (a FIFO or
    a device, even one swapped in after a check by name, is never waited on or read), read no further than the
    bound. `NotRegular` otherwise; a missing file is FileNotFoundError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "a folder"
                if stat.S_ISDIR(mode)
                else "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a socket"
                if stat.S_ISSOCK(mode)
                else "a device"
            )
            raise NotRegular(errno.EINVAL, f"{kind}, not a regular file", str(path))
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise NotRegular(errno.EFBIG, f"more than {max_bytes:,} bytes", str(path))
    return data


def record_text(path: Path, max_bytes: int = RECORD_BYTES) -> str:
    """`Path.read_text(encoding="utf-8")` of a record chunkeval wrote itself (a manifest, a cache entry, a seal),
    but never blocking on a FIFO and never past `max_bytes`: both raise an `OSError` (`NotRegular`), as an
    unreadable file does, so that the record is treated as missing or damaged and made again."""
    return _regular_bytes(Path(path), max_bytes).decode("utf-8")


def read_bytes(path: Path, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `max_bytes`, read where a file is expected (`_regular_bytes`); one
    line (`InputError`) naming the file otherwise."""
    path = Path(path)
    try:
        return _regular_bytes(path, max_bytes)
    except FileNotFoundError:
        raise InputError(f"{what} not found", path) from None
    except NotRegular as exc:
        raise InputError(f"the {what} is {exc.strerror} (docs/limits.md)", path) from None
    except OSError as exc:
        raise InputError(f"cannot read the {what} ({exc.strerror})", path) from None


def read_text(path: Path, max_bytes: int, what: str = "file") -> str:
    """`read_bytes` as UTF-8 text (a file that is not UTF-8 is one line too)."""
    try:
        return read_bytes(path, max_bytes, what).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"the {what} is not UTF-8 text", path) from None


def head(path: Path) -> bytes:
    """The first `HEADER_BYTES` bytes of a regular file."""
    with open(regular_file(path), "rb") as fh:
        return fh.read(HEADER_BYTES)


def check_name(name: str, what: str = "experiment name", source=None) -> str:
    """A name that becomes part of a path: letters, digits, `.`, `_`, `-`, starting with a letter or a
    digit, at most `NAME_LENGTH` characters (so never `.`, `..`, a path or a control character)."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InputError(
            f"{what} {short(name)} must be one word of letters, digits, '.', '_' or '-', starting with a "
            f"letter or digit, at most {NAME_LENGTH} characters",
            source,
        )
    return name


def check_path_length(path: Path, what: str) -> Path:
    """A path chunkeval will write, refused before any work when the file system could not hold it (a
    component past NAME_MAX, or the whole past PATH_MAX, of the nearest existing folder's file system)."""
    path = Path(path)
    probe = path
    while probe.parent != probe:
        try:
            if probe.exists():
                break
        except OSError:  # too long to even ask about
            pass
        probe = probe.parent
    try:
        name_max, path_max = os.pathconf(probe, "PC_NAME_MAX"), os.pathconf(probe, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    longest = max((len(part.encode()) for part in path.parts), default=0)
    if longest > name_max or len(str(path).encode()) >= path_max:
        raise InputError(f"{what} would be a path too long for this file system ({len(str(path))} characters)", path)
    return path


def expanded_size(value, limit: int = YAML_NODES) -> int:
    """How many values `value` holds once shared parts (YAML aliases) are counted every time they appear;
    counting stops past `limit`. Computed without expanding anything."""
    memo: dict[int, int] = {}

    def size(v) -> int:
        if isinstance(v, (list, tuple, dict)):
            key = id(v)
            if key not in memo:
                memo[key] = limit + 1  # a cycle counts as past the limit
                items = list(v.items()) if isinstance(v, dict) else [(None, x) for x in v]
                total = 1
                for k, x in items:
                    total += size(x) + (size(k) if k is not None else 0)
                    if total > limit:
                        break
                memo[key] = min(total, limit + 1)
            return memo[key]
        return 1

    return size(value)


@functools.cache
def _strict_loader():
    """YAML's safe loader, where a mapping's keys are strings, each given once (PyYAML keeps the last of a key given
    twice, and takes numbers, booleans, null and lists as keys). Made on first use: PyYAML is imported by what reads
    YAML, not by every command."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    def strict_mapping(loader: StrictLoader, node: yaml.MappingNode) -> dict:
        seen = set()
        for key_node, _ in node.value:  # the keys written here; merged ones (`<<: *alias`) may be overridden
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if key_node.tag != "tag:yaml.org,2002:str":
                shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else f"a {key_node.id}"
                raise _BadKey(f"a mapping key must be a name, got {short(shown)}", key_node.start_mark)
            if key_node.value in seen:
                raise _BadKey(f"key {short(key_node.value)} given twice", key_node.start_mark)
            seen.add(key_node.value)
        loader.flatten_mapping(node)
        return loader.construct_mapping(node, deep=True)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, strict_mapping)
    return StrictLoader


class _BadKey(Exception):
    def __init__(self, message: str, mark):
        super().__init__(message)
        self.message, self.mark = message, mark


def yaml_problem(exc) -> str:
    """PyYAML's error as a short phrase with its place (`line 5, column 2: expected ',' or ']', but got ':'`),
    without the quoted lines and the caret it draws under them."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{' '.join(str(problem).split())}"


def yaml_load(text: str, source) -> object:
    """`yaml.safe_load`, with a key given twice or a key that is no string refused, and aliases that expand
    past `YAML_NODES` values refused (a 'billion laughs')."""
    import yaml

    try:
        data = yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader, stricter
    except _BadKey as exc:
        raise InputError(f"{exc.message} (line {exc.mark.line + 1})", source) from None
    except yaml.YAMLError as exc:
        raise InputError(f"broken YAML: {yaml_problem(exc)}", source) from None
    except RecursionError:
        raise InputError("YAML nested too deeply", source) from None
    if expanded_size(data) > YAML_NODES:
        raise InputError(f"YAML whose aliases expand past {YAML_NODES:,} values is refused", source)
    return data


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings skipped), without parsing it."""
    import numpy as np

    _OPEN, _CLOSE = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)
    raw = np.frombuffer(_STRING.sub(b'""', text.encode("utf-8", "surrogatepass")), np.uint8)
    steps = np.isin(raw, _OPEN).astype(np.int64) - np.isin(raw, _CLOSE).astype(np.int64)
    return int(np.cumsum(steps).max(initial=0))


def json_loads(text: str):
    """`json.loads`, refusing values nested deeper than `JSON_DEPTH` with a `json.JSONDecodeError` (as any
    broken JSON) instead of a RecursionError. Only a text with that many brackets is scanned."""
    if text.count("[") + text.count("{") > JSON_DEPTH and json_depth(text) > JSON_DEPTH:
        raise json.JSONDecodeError(f"nested deeper than {JSON_DEPTH} levels", text, 0)
    return json.loads(text)


def data_bytes() -> int | None:
    """This process's private writable memory now (Linux's VmData: what RLIMIT_DATA counts), None where unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


@contextlib.contextmanager
def capped_memory(extra: int):
    """While the block runs, this process may take at most `extra` bytes more private memory than it has now
    (RLIMIT_DATA, Linux: DuckDB's allocations, Arrow's and Python's alike); past it an allocation fails (DuckDB's
    Out of Memory Error, Python's MemoryError) instead of the machine's memory filling. The limit is put back
    after. Nothing is capped where the platform cannot say how much the process has."""
    import resource

    now = data_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    wanted = None if now is None else now + extra
    if wanted is None or (hard != resource.RLIM_INFINITY and wanted > hard):
        yield
        return
    resource.setrlimit(resource.RLIMIT_DATA, (wanted if soft == resource.RLIM_INFINITY else min(soft, wanted), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
