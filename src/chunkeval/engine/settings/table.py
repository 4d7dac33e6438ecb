"""The experiment settings, declared once: each is a field of `chunkeval.engine.pipeline.experiment.Experiment` made by
`setting(...)`, whose `Setting` record says its kind, help, docs section, flag, bounds, choices and old
spellings. From that one table come the flags of `run` and `sweep` (`chunkeval.cli.options`), the reading of
experiment files and mappings (`Experiment.from_dict`), the Python API's keyword arguments
(`chunkeval.evaluate`), the range checks every value passes however it arrives, and the reference table of
docs/settings.md (`reference`). Adding a setting is one field plus its implementation.

Kinds: `path` (one path; relative to an experiment file's folder), `text` (one value), `bool`, `int` (one
whole number), `number` (one finite number), `ints` (whole numbers: a list or a comma-separated string), `names` (a list, or a string split
on commas), and the settings with a reader of their own (`index`, `models`, `alerts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from chunkeval.errors import InputError
from chunkeval.limits import MAX_INT, short
from chunkeval.paths import DEMO_DIR
from chunkeval.vocabulary import AXES, FIRST, close_names, split_flags, split_list

# documented maxima (docs/limits.md): past them a value is refused before anything is allocated
MAX_K = 10_000  # retrieval depth: ten times the deepest MaxP looks (`DOC_DEPTH`); TREC pools stop at 1,000
MAX_CANDIDATES = 10_000  # first-stage chunks a reranker re-scores
MAX_CHUNK_SIZE = 1_000_000  # tokens (characters for fixed_char) of one chunk
LARGE_GRID = 500  # configurations (each at each k) past which a run asks first (`max_configurations`)

SECTIONS = {
    "experiment": "The experiment",
    "inputs": "Inputs: corpus and gold set",
    "chunking": "Chunking",
    "embedding": "Embedding",
    "retrieval": "Retrieval and reranking",
    "scoring": "Scoring",
    "racing": "Racing: fewer cells, with a guarantee",
    "output": "Where results go",
}


@dataclass(frozen=True)
class Setting:
    """One experiment setting: the YAML key and API keyword `name`, its flag (None: files and the API
    only), and what the docs and `--help` say of it."""

    kind: str
    help: str
    section: str
    name: str = ""  # filled from the field
    default: object = None  # filled from the field
    flag: str | None = ""  # "" : --NAME with - for _
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    repeatable: bool = False  # the flag may be given more than once (--corpus a --corpus b)
    deprecated: tuple[str, ...] = ()  # old spellings of the key, read with a one-line note
    recorded: bool = True  # False: where results go, not how they are computed (runs record it not)
    # added after runs were first recorded: a run at its default leaves it out of the settings it records, as runs
    # recorded before it existed did (`as_recorded`), so that their settings read alike
    added: bool = False
    axis: str = ""  # the configuration axis it sweeps (`chunkeval.vocabulary.AXES`), for a setting of the grid

    @property
    def dest(self) -> str:
        """The attribute of the parsed command line."""
        return self.name

    @property
    def bounds(self) -> str:
        """The range the docs state: `1 … 10,000`."""
        if self.minimum is None and self.maximum is None:
            return ""
        low = "" if self.minimum is None else f"{self.minimum:,}"
        return f"{low} … {self.maximum if self.maximum is not None else MAX_INT:,}"


def setting(default, kind: str, help: str, section: str, **details):
    """A field of the experiment that is a setting (its default, and the `Setting` details)."""
    return field(default=default, metadata={"setting": Setting(kind, help, section, **details)})


def table_of(cls) -> tuple[Setting, ...]:
    """The settings of a dataclass built with `setting`, names, flags and defaults filled in."""
    out = []
    for f in fields(cls):
        s = f.metadata["setting"]
        flag = "--" + f.name.replace("_", "-") if s.flag == "" else s.flag
        out.append(replace(s, name=f.name, default=f.default, flag=flag))
    return tuple(out)


# --------------------------------------------------------------------------- reading a value


def whole_number(value, what: str) -> int:
    """A whole number from YAML or a flag: `5` or `"5"`; never `18.9`, `5.0`, `true`, or one past `MAX_INT`."""
    if isinstance(value, bool) or isinstance(value, float):
        raise InputError(f"{what} must be whole numbers, got {short(value)}")
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be whole numbers, got {short(value)}") from None
    if abs(number) > MAX_INT:
        raise InputError(f"{what} must be at most {MAX_INT}, got {short(value)}")
    return number


def parse_ints(values, what: str) -> tuple[int, ...]:
    """Whole numbers from a YAML list (item by item) or a comma-separated string."""
    if isinstance(values, (list, tuple)):
        split_list(values, what)  # items must be single values
        return tuple(whole_number(v, what) for v in values)
    return tuple(whole_number(v, what) for v in split_list(values, what))


def read_value(value, s: Setting):
    """A setting's value as a file, a mapping or the API gives it, of the setting's kind (not `index` or
    `models`, which have readers of their own)."""
    if s.kind == "names":
        if not isinstance(value, (str, int, float, list, tuple)):
            raise InputError(f"{s.name} must be a name or a list of names, got {short(value)}")
        return tuple(split_list(value, s.name))
    if s.kind == "ints":
        return parse_ints(value, s.name)
    if s.kind == "int":
        if isinstance(value, (list, tuple, dict)):
            raise InputError(f"{s.name} takes one whole number, got {short(value)}")
        return whole_number(value, s.name)
    if s.kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise InputError(f"{s.name} takes one number, got {short(value)}")
        try:
            number = float(value)
        except ValueError:
            raise InputError(f"{s.name} takes one number, got {short(value)}") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise InputError(f"{s.name} takes a finite number, got {short(value)}")
        return number
    if s.kind == "bool":
        if not isinstance(value, bool):
            raise InputError(f"{s.name} must be true or false, got {short(value)}")
        return value
    if isinstance(value, (list, tuple, dict, set)):
        raise InputError(f"{s.name} takes one value, got {short(value)}")
    return str(value)


def read_flag(s: Setting, value):
    """A setting's value as the command line gives it (None where the flag was not given): lists are split
    on commas, whole numbers are named by their flag."""
    if value is None:
        return None
    if s.kind in ("names", "index"):
        return tuple(split_flags(value, s.flag))
    if s.kind == "ints":
        return parse_ints(value, s.flag)
    if s.kind == "int":
        return whole_number(value, s.flag)  # within MAX_INT, as a file's value is (`read_value`)
    if s.kind == "number":
        return read_value(value, s)
    return value


def check_bounds(s: Setting, value, source=None) -> None:
    """A number (or each of a list) within the setting's documented range: one line naming the setting."""
    for number in value if isinstance(value, tuple) else (value,):
        if s.minimum is not None and number < s.minimum:
            least = "0 or more" if s.minimum == 0 else f"at least {s.minimum}"
            raise InputError(f"{s.name} must be {least}, got {number}", source)
        if s.maximum is not None and number > s.maximum:
            raise InputError(f"{s.name} must be at most {s.maximum} (docs/limits.md), got {short(number)}", source)


def check_k(k: int, what: str = "k", source: str | None = None) -> int:
    """A retrieval depth: from 1 to `MAX_K` (`what` names it as the caller's user wrote it: k, --k)."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise InputError(f"{what} must be a whole number, got {short(k)}", source)
    if k < 1:
        raise InputError(f"{what} must be at least 1, got {k}", source)
    if k > MAX_K:
        raise InputError(f"{what} must be at most {MAX_K} (docs/limits.md), got {short(k)}", source)
    return k


def did_you_mean(name: str, known) -> str:
    """`name`, and the known names it most looks like (`chunk_szes; did you mean chunk_sizes?`), else where to look."""
    return f"{short(name)}; {close_names(name, known) or 'docs/settings.md lists every key'}"


def renamed(data: dict, table: tuple[Setting, ...], source=None, warn=None) -> dict:
    """`data` with each old spelling of a key read as its new name (a one-line note through `warn`); an old
    and a new spelling of the same setting together are refused."""
    old = {alias: s.name for s in table for alias in s.deprecated}
    out = {}
    for key, value in data.items():
        name = old.get(key, key)
        if name in out:
            raise InputError(f"{key} is an old spelling of {name}: give one of them", source)
        if name != key and warn is not None:
            warn(f"note: {source + ': ' if source else ''}{key} is deprecated; write {name}")
        out[name] = value
    return out


# --------------------------------------------------------------------------- the reference in docs/settings.md

BEGIN = "<!-- settings reference: generated from chunkeval.engine.pipeline.experiment; regenerate with "
BEGIN += "`python -m chunkeval.engine.pipeline.experiment docs/settings.md` -->"
END = "<!-- end of the generated settings reference -->"


def _default_text(s: Setting) -> str:
    value = s.default
    if isinstance(value, tuple):
        value = ", ".join(map(str, value))
    if value in ("", None) or (s.kind == "models" and not value):
        return "—"
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if text.startswith(str(DEMO_DIR) + "/"):  # the packaged demo's, or $CHUNKEVAL_DEMO_DIR's: not a path to print
        return "the demo's " + text.rsplit("/", 1)[-1]
    return f"`{text}`"


def reference(table: tuple[Setting, ...]) -> str:
    """The reference table of docs/settings.md: one section per part of a run, one row per setting."""
    lines = [BEGIN]
    for section, title in SECTIONS.items():
        rows = [s for s in table if s.section == section]
        if not rows:
            continue
        lines += [
            "",
            f"### {title}",
            "",
            "| key | flag | default | range | what it sets |",
            "| --- | --- | --- | --- | --- |",
        ]
        for s in rows:
            flag = f"`{s.flag}`" if s.flag else "(files and API only)"
            rng = s.bounds or (" \\| ".join(s.choices) if s.choices else "")
            old = f" Old spelling: {', '.join(s.deprecated)}." if s.deprecated else ""
            what = s.help.replace("%%", "%").replace("|", "\\|") + old
            lines.append(f"| `{s.name}` | {flag} | {_default_text(s)} | {rng} | {what} |")
    return "\n".join(lines + axes_reference(table) + ["", END])


def axes_reference(table: tuple[Setting, ...]) -> list[str]:
    """The table of configuration axes (`chunkeval.vocabulary.AXES`): each one's column in every results table,
    the setting that sweeps it, how a label writes it and what runs recorded before it existed read."""
    swept = {s.axis: s.name for s in table if s.axis}
    lines = [
        "",
        "### Configuration axes",
        "",
        "The key of every results row, in this order; a configuration's label names the keys away from their "
        "default, and its `config_id` hashes their values, leaving out an axis added later at the value older runs "
        "read (so their ids stay).",
        "",
        "| column | type | swept by | in a label | runs recorded before it read |",
        "| --- | --- | --- | --- | --- |",
    ]
    for a in AXES:
        label = {"hidden": "never", "reranker": "`>name@candidates`", "path": "its last part"}.get(a.show, "its value")
        label = f"`{a.label}=…`" if a.label else label
        before = "(recorded from the first)" if a.before is FIRST else ("null" if a.before is None else f"`{a.before}`")
        before = a.before_said or before
        kind = "BIGINT" if a.number else "VARCHAR"
        lines.append(f"| `{a.key}` | {kind} | `{swept.get(a.key, '')}` | {label} | {before} |")
    return lines


def with_reference(text: str, table: tuple[Setting, ...]) -> str:
    """A page's text with its generated reference replaced by the one of `table`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError("the page holds no generated settings reference")
    return text[:start] + reference(table) + text[end + len(END) :]
