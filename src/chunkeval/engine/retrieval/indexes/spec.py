"""Index settings: `exact`, `hnsw:m=16:ef_search=64`, `ivf:nlist=1024:nprobe=16[:pq_m=48]`, `chroma[:url=…]`.

A setting is a kind and `key=value` parameters. The text is split on `:` only where a known key and `=`
follow, so that `chroma:url=http://127.0.0.1:8000:ef_search=50` reads as a URL and a parameter. A
parameter not given takes the library's or database's own default, read from the installed library, so
that the value recorded in the configuration key (`IndexSpec.key`: the kind and every parameter that
decides the answer, sorted) says exactly what was searched. Where the server lives (`url`) is not part of
the key: the same collection settings answer the same on an embedded and a served Chroma.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from chunkeval.engine.settings.plugins import ExtensionPoint, resolve
from chunkeval.errors import InputError
from chunkeval.limits import MAX_INT, short

EXACT = "exact"

# kind → {parameter: (lowest value, whether it is set when the index is built)}
PARAMETERS: dict[str, dict[str, tuple[int, bool]]] = {
    "exact": {},
    "hnsw": {"m": (2, True), "ef_construction": (1, True), "ef_search": (1, False)},
    "ivf": {"nlist": (1, True), "nprobe": (1, False), "pq_m": (1, True), "pq_nbits": (1, True)},
    "chroma": {"m": (2, True), "ef_construction": (1, True), "ef_search": (1, False)},
}
KINDS = tuple(PARAMETERS)
INDEX = ExtensionPoint("index kind", PARAMETERS)  # built-in kinds only: a new kind is a module here (docs/indexes.md)
LIBRARY = {"hnsw": "faiss", "ivf": "faiss", "chroma": "chromadb"}  # what each kind searches with
_TEXT_KEYS = {"chroma": ("url",)}  # parameters that are not numbers, and not part of the key
_KNOWN = sorted({p for params in PARAMETERS.values() for p in params} | {"url"}, key=len, reverse=True)
_SPLIT = re.compile(":(?=(?:" + "|".join(_KNOWN) + ")=)")


@dataclass(frozen=True, order=True)
class IndexSpec:
    """One index setting, resolved: `params` holds every parameter (given or the library's default)."""

    kind: str
    params: tuple[tuple[str, int], ...] = ()
    url: str | None = None

    @property
    def key(self) -> str:
        """The value of the `index` configuration key: kind and parameters, sorted by name."""
        return ":".join([self.kind, *(f"{k}={v}" for k, v in sorted(self.params))])

    @property
    def text(self) -> str:
        """The setting as an experiment records it (the key, and where the server is)."""
        return self.key + (f":url={self.url}" if self.url else "")

    def get(self, name: str) -> int | None:
        return dict(self.params).get(name)

    @property
    def build_params(self) -> tuple[tuple[str, int], ...]:
        """The parameters an index is built with: settings that differ only in the others share a build."""
        return tuple((k, v) for k, v in sorted(self.params) if PARAMETERS[self.kind][k][1])

    @property
    def approximate(self) -> bool:
        return self.kind != EXACT


def parse_index(value, source: str | None = None) -> IndexSpec:
    """An index setting from its text (`hnsw:m=16`) or a mapping (`{kind: hnsw, m: 16}`), with the
    installed library's defaults filled in and every range checked (the number of vectors is checked when
    the index is built)."""
    kind, given = _split(value, source)
    url = given.pop("url", None)
    params = dict(_defaults(kind, source))
    for name, raw in given.items():
        params[name] = _number(kind, name, raw, source)
    if kind == "ivf":
        if "nlist" not in params:
            raise InputError("index ivf needs nlist (faiss has no default): ivf:nlist=1024", source)
        if params["nprobe"] > params["nlist"]:
            raise InputError(f"index ivf: nprobe {params['nprobe']} is above nlist {params['nlist']}", source)
        if "pq_m" in params:
            params.setdefault("pq_nbits", 8)  # faiss's IndexIVFPQ default: 256 centroids per sub-vector
        if "pq_nbits" in given and "pq_m" not in given:
            raise InputError("index ivf: pq_nbits goes with pq_m (product quantisation)", source)
        if "pq_m" in params and not 1 <= params.get("pq_nbits", 8) <= 16:
            raise InputError(f"index ivf: pq_nbits must be between 1 and 16, got {params['pq_nbits']}", source)
    if url is not None:
        url = _check_url(url, source)
    return IndexSpec(kind, tuple(sorted(params.items())), url)


def parse_indexes(values, source: str | None = None) -> tuple[IndexSpec, ...]:
    """The index axis: each setting parsed; two that mean the same index are an error."""
    specs = tuple(parse_index(v, source) for v in values)
    seen: dict[str, str] = {}
    for spec, value in zip(specs, values):
        if spec.key in seen:
            raise InputError(
                f"index settings {short(seen[spec.key])} and {short(value)} are the same index ({spec.key})", source
            )
        seen[spec.key] = value
    return specs


def _split(value, source) -> tuple[str, dict[str, str]]:
    if isinstance(value, dict):
        data = {str(k): v for k, v in value.items()}
        kind = str(data.pop("kind", "")).strip()
        if not kind:
            raise InputError(f"an index mapping needs a kind ({', '.join(KINDS)}), got {short(value)}", source)
        given = {}
        for k, v in data.items():
            if isinstance(v, (dict, list, tuple)) or v is None:
                raise InputError(f"index {kind}: {k} takes one value, got {short(v)}", source)
            given[k] = v
    else:
        text = str(value).strip()
        kind, *pairs = _SPLIT.split(text)
        if ":" in kind and kind.split(":")[0] in KINDS:  # a parameter whose name is not known
            kind, rest = kind.split(":", 1)
            _unknown(kind.strip(), rest.split("=")[0], source)
        given = {}
        for pair in pairs:
            name, _, v = pair.partition("=")
            if name in given:
                raise InputError(f"index {kind}: {name} given twice", source)
            given[name] = v
    kind = kind.strip().lower()
    resolve(INDEX, kind, source)
    for name in given:
        if name not in PARAMETERS[kind] and name not in _TEXT_KEYS.get(kind, ()):
            _unknown(kind, name, source)
    return kind, given


def _unknown(kind: str, name: str, source) -> None:
    known = [*PARAMETERS.get(kind, {}), *_TEXT_KEYS.get(kind, ())]
    raise InputError(
        f"index {kind}: unknown parameter {short(name)}"
        + (f"; known: {', '.join(known)}" if known else " (it takes none)"),
        source,
    )


def _number(kind: str, name: str, raw, source) -> int:
    low = PARAMETERS[kind][name][0]
    text = str(raw).strip()
    if isinstance(raw, (bool, float)) or not re.fullmatch(r"-?\d+", text):
        raise InputError(f"index {kind}: {name} must be a whole number, got {short(raw)}", source)
    number = int(text)
    if not low <= number <= MAX_INT:
        raise InputError(f"index {kind}: {name} must be at least {low}, got {number}", source)
    return number


def _check_url(url, source) -> str:
    text = str(url).strip().rstrip("/")
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None or parts.path or parts.query:
        raise InputError(f"index chroma: url must be http(s)://HOST:PORT, got {short(url)}", source)
    return text


def _defaults(kind: str, source) -> dict[str, int]:
    """The parameters the installed library uses when none is given."""
    if kind == "exact":
        return {}
    if kind in ("hnsw", "ivf"):
        faiss = load_library("faiss", source)
        if kind == "hnsw":
            probe = faiss.IndexHNSWFlat(4, 32)  # faiss's own default M (its index_factory "HNSW")
            return {"m": 32, "ef_construction": probe.hnsw.efConstruction, "ef_search": probe.hnsw.efSearch}
        quantizer = faiss.IndexFlatIP(4)
        return {"nprobe": faiss.IndexIVFFlat(quantizer, 4, 1).nprobe}
    load_library("chromadb", source)  # its one line when chromadb is not installed
    from chromadb.api.collection_configuration import populate_create_hnsw_defaults

    hnsw = populate_create_hnsw_defaults({"space": "cosine"})
    return {"m": hnsw["max_neighbors"], "ef_construction": hnsw["ef_construction"], "ef_search": hnsw["ef_search"]}


def load_library(name: str, source=None):
    """faiss or chromadb, or the one line that says how to install it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        package = {"faiss": "faiss-cpu", "chromadb": "chromadb"}[name]
        raise InputError(
            f"this index needs {package}: pip install 'chunkeval[indexes]' (or {package} alone)", source
        ) from None


def library_versions(specs) -> dict[str, str]:
    """The index libraries a grid searches with, and their versions (recorded per run)."""
    versions = {}
    for spec in specs:
        if spec.kind in LIBRARY:
            name = LIBRARY[spec.kind]
            versions[name] = getattr(load_library(name), "__version__", "unknown")
    return dict(sorted(versions.items()))
