"""A sweep: every configuration of an experiment, scored at every k, from plain functions.

A configuration is one value of each key of `CONFIG_KEYS`, in its order. A run is one state
(`RunState`) and one list of steps, `STEPS`: `load` (`load_inputs`) → `chunk` (`chunk_one` per chunking job: a
setting, and for a semantic chunker a model) → `embed` (`embed_all`, one call per model) → `score` (`score_all`:
`ranking.retrieve_top` per configuration, once at the largest k, then `chunkeval.engine.scoring.configuration`) → `summarise`
(`summarize_sweep`, `reference_tables`) → `check_gold`. `run_sweep` runs them in one process; the `evaluate` flow
runs each as a task (docs/architecture.md, "One pipeline").
Each distinct text (chunk, question or semantic piece) is embedded once per model across the grid;
a grid whose chunkers and retrievers need no vectors loads no model, and its rows carry model `none`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from chunkeval.engine.chunking import ChunkerSpec, chunk_corpora, needs_embeddings
from chunkeval.engine.embedding import Embedder, probes
from chunkeval.engine.embedding.embedders import Embedders, embed_shard, probe_models
from chunkeval.engine.embedding.late import late_refusals, parse_late
from chunkeval.engine.gold.check import check_gold as gold_report
from chunkeval.engine.gold.judge import judged_lines, run_judged_share
from chunkeval.engine.inputs.corpus import corpus_names, load_documents, skipped_notes
from chunkeval.engine.inputs.document_gold import DocGold, load_document_gold, warn_left_out
from chunkeval.engine.inputs.duplicates import find_copies
from chunkeval.engine.inputs.extract import DocumentReader
from chunkeval.engine.inputs.headings import chunk_headers
from chunkeval.engine.inputs.slices import load_slices
from chunkeval.engine.inputs.span_gold import load_span_gold
from chunkeval.engine.pipeline.experiment import Experiment
from chunkeval.engine.pipeline.fingerprints import input_fingerprints
from chunkeval.engine.pipeline.race import race_all, race_lines
from chunkeval.engine.pipeline.ranking import groups_of, measured_vectors, reranks_with_vectors, retrieve_top
from chunkeval.engine.pipeline.records import Chunking, Config, Embedded, Inputs, RunState
from chunkeval.engine.pipeline.rules import clamped_k_note
from chunkeval.engine.retrieval import retrievers
from chunkeval.engine.retrieval.indexes import reach
from chunkeval.engine.retrieval.indexes.faiss_kinds import check_fits
from chunkeval.engine.retrieval.indexes.measure import STATS as INDEX_STATS
from chunkeval.engine.retrieval.indexes.measure import VECTOR_STATS
from chunkeval.engine.retrieval.indexes.measure import measure as measure_index
from chunkeval.engine.retrieval.vectors import check_fits as check_dims_fit
from chunkeval.engine.retrieval.vectors import compares_vectors, vector_grid, with_found, with_vector_keys
from chunkeval.engine.scoring.configuration import (
    reference_tables,
    score_chunking,
    summarize_slices,
    summarize_sweep,
)
from chunkeval.engine.scoring.doc_metrics import score_documents
from chunkeval.engine.scoring.expansion import Scored, expand_keys, expanded, parse_expand
from chunkeval.engine.scoring.retrieved import kept_qrels, retrieved_table
from chunkeval.progress import Stopwatch
from chunkeval.run_result import RunResult
from chunkeval.vocabulary import (
    AXES,
    CHUNKING_KEYS,
    NO_CONTEXT,
    NO_LATE,
    NO_MODEL,
    NO_RERANKER,
    OPTIONAL_KEYS,
    VECTOR_KEYS,
)

CHUNKING_AXES = [a for a in AXES if a.key in CHUNKING_KEYS]  # what chunk and index statistics are kept by


def load_inputs(exp: Experiment, quiet: bool = False, remedy: bool = True) -> Inputs:
    """The documents and the gold set, checked; what was extracted is cached once they are. Each document left
    out as unreadable gets one warning line, and how the gold set met the corpus one summary line (none when
    `quiet`: a check before the run that reads them again; the readers themselves log nothing; without `remedy`
    where `chunkeval gold update` reads them, the line that recommends it)."""
    reader = DocumentReader(exp.html)
    if exp.doc_gold:
        docs, gold = load_document_gold(exp.beir, exp.split, exp.corpus_dir, exp.queries, exp.qrels, exp.strict, reader)
    else:
        docs = load_documents(Path(exp.corpus_dir), exp.html, exp.strict, exp.corpus, reader)
        shared = None if docs.one_per_corpus() else docs.corpus_of
        gold = load_span_gold(
            Path(exp.questions),
            docs.texts,
            docs.known(),
            shared,
            docs.skipped_reasons(),
            exp.anchor_similarity,
            exp.strict,
        )
    reader.save()
    if not quiet:
        warn_left_out(docs, gold, remedy)
    copies = find_copies(gold, docs.texts) if exp.duplicates == "credit" and not exp.doc_gold else None
    return Inputs(
        docs.texts,
        gold,
        copies,
        None if docs.one_per_corpus() else docs.corpus_of,
        tuple(docs.skipped.values()),
        docs.pages or None,
        load_slices(exp, gold.query_ids),
        docs.outlines,
    )


def chunking_jobs(exp: Experiment) -> list[tuple[ChunkerSpec, str | None]]:
    """Every chunking to make: each setting once, a semantic chunker's once per model."""
    return [
        (spec, model) for spec in exp.grid() for model in (exp.model if needs_embeddings(spec.chunker) else (None,))
    ]


def chunk_one(corpora: dict[str, str], spec: ChunkerSpec, model: str | None, embedders: Embedders) -> Chunking:
    embed = embedders.embed_function(model) if model is not None else None
    return Chunking(spec, model, chunk_corpora(corpora, spec, embed))


def with_contexts(exp: Experiment, chunkings: list[Chunking], inputs: Inputs | None = None) -> list[Chunking]:
    """Each chunking once per value of the `context` axis, in its order, sharing its chunks; each with its chunks'
    headers (`chunkeval.engine.inputs.headings`; none without `inputs`: what sizing a grid needs). Then each
    other value of the `late` axis, under context `none` only: a chunk read late is read in its document, where
    a header before its text has no place (docs/design_space.md, "Late chunking")."""
    out = []
    for chunking in chunkings:
        for context in exp.context if NO_LATE in exp.late else ():
            headers = None
            if context != NO_CONTEXT and inputs is not None:
                c = chunking.chunks
                headers = chunk_headers(c.corpus_names, c.corpus, c.start, inputs.outlines or {}, context)
            out.append(replace(chunking, context=context, headers=headers))
        out += [replace(chunking, late=late) for late in exp.late if late != NO_LATE]
    return out


def late_notice(exp: Experiment) -> str | None:
    """The one line a grid with late chunking says of what `plan` leaves out: the models that cannot read late
    (`late_refusals`), and the retrievers that read no vectors (bm25), which run without late only. None where
    nothing is left out."""
    if all(text == NO_LATE for text in exp.late):
        return None
    parts = [
        f"{why.removeprefix('late: ')}: its late configurations are left out" for why in late_refusals(exp).values()
    ]
    lexical = [r for r in exp.retriever if not retrievers.needs_embeddings(r)]
    if lexical:
        parts.append(f"{', '.join(lexical)} reads no vectors: it runs without late chunking only")
    return "late chunking: " + "; ".join(parts) if parts else None


def plan(exp: Experiment, chunkings: list[Chunking]) -> list[Config]:
    """Every (chunking, model, retriever, index): a retriever that reads vectors runs once per model and
    index; one that does not runs once, under the model of its chunking (`none` for chunkings that embed
    nothing) and index `none`. The indexes of one chunking and model come one after the other (they share
    vectors, and settings that differ only at search time share one build)."""
    configs = []
    specs = exp.index_specs()
    refused = late_refusals(exp)
    for i, chunking in enumerate(chunkings):
        for retriever in exp.retriever:
            reads = retrievers.needs_embeddings(retriever)
            if chunking.late != NO_LATE and not reads:
                continue  # bm25 reads no vectors: late chunking changes nothing of it (it runs under late none)
            if chunking.model is not None:
                models = [chunking.model]
            else:
                models = list(exp.model) if reads else [NO_MODEL]
            if chunking.late != NO_LATE:
                models = [m for m in models if m not in refused]  # a static model has no words in context
            for model in models:
                configs += (
                    [Config(i, model, retriever, spec) for spec in specs] if reads else [Config(i, model, retriever)]
                )
    configs = [replace(c, vectors=v, dims=d) for c in configs for v, d in vector_grid(exp, c)]
    reranked = [replace(c, reranker=r, candidates=n) for c in configs for r, n in exp.rerank_grid()]
    return [replace(c, expand=e) for c in reranked for e in expand_keys(exp.expand)]


def check_indexes_fit(
    inputs: Inputs, chunkings: list[Chunking], configs: list[Config], embedders: Embedders, own_corpus: bool
) -> None:
    """Before anything is embedded: every Chroma server answers, and every index's parameters fit the
    vectors it will hold (nlist at most their number, per corpus with `own_corpus`; pq_m dividing the
    model's width)."""
    for model in dict.fromkeys(c.model for c in configs if c.dims != VECTOR_KEYS["dims"]):
        check_dims_fit(tuple({c.dims for c in configs if c.model == model}), model, embedders[model].width())

    for url in sorted({c.index.url for c in configs if c.index is not None and c.index.url}):
        reach(url)  # a Chroma URL that is not a server fails here, before anything is embedded
    for c in configs:
        if c.index is None or c.index.kind != "ivf":
            continue
        chunks = chunkings[c.chunking].chunks
        width = embedders[c.model].width() if c.index.get("pq_m") is not None else 0
        if not own_corpus:
            check_fits(c.index, len(chunks), width or c.index.get("pq_m") or 1)
            continue
        asked = set(inputs.gold.query_corpora)
        counts = np.bincount(chunks.corpus.astype(np.int64), minlength=len(chunks.corpus_names))
        per_corpus: dict[str, int] = {}
        for name, n in zip(corpus_names(inputs.corpus_of, chunks.corpus_names), counts.tolist()):
            per_corpus[name] = per_corpus.get(name, 0) + n
        for name, n in per_corpus.items():
            if name in asked:
                check_fits(c.index, n, width or c.index.get("pq_m") or 1, f"corpus {name}")


def _wanted(configs: list[Config]) -> dict[str, list[int]]:
    """model → the chunkings it embeds (those a vector-reading retriever runs on)."""
    wanted: dict[str, list[int]] = {}
    for c in configs:
        if retrievers.needs_embeddings(c.retriever) and c.chunking not in wanted.setdefault(c.model, []):
            wanted[c.model].append(c.chunking)
        if reranks_with_vectors(c) and c.chunking not in wanted.setdefault(c.reranker, []):
            wanted[c.reranker].append(c.chunking)  # a bi-encoder reranker reads its own vectors
    return {model: indices for model, indices in wanted.items() if indices}


def embedding_shards(
    inputs: Inputs, chunkings: list[Chunking], configs: list[Config], embedders: Embedders, parts: int
) -> list[tuple[str, str, list[str]]]:
    """What `embed_all` would embed that the cache lacks, as (model, kind, texts) shards: each model's
    missing questions and chunks split into `parts` shards of about equal size, for separate processes
    (Dask workers) to embed into the shared cache (`embed_shard`), each writing its own part files."""
    shards = []
    for model, indices in _wanted(configs).items():  # chunks read late are embedded by `embed_all` itself
        chunk_texts = [t for i in indices if chunkings[i].late == NO_LATE for t in chunkings[i].texts(inputs.corpora)]
        for kind, texts in (("query", list(inputs.gold.questions)), ("document", chunk_texts)):
            missing = embedders[model].missing(texts, kind)
            n = max(1, min(parts, len(missing)))
            shards += [(model, kind, missing[i::n]) for i in range(n) if missing[i::n]]
    return shards


def embed_all(inputs: Inputs, chunkings: list[Chunking], configs: list[Config], embedders: Embedders) -> Embedded:
    """Per model, one embedding call for the questions and one for the chunks of every chunking it
    retrieves from: repeated texts are embedded once."""
    queries, chunks, truncated = {}, {}, {}
    for model, indices in _wanted(configs).items():
        embedder = embedders[model]
        queries[model] = embedder.embed(list(inputs.gold.questions), kind="query")[0]
        texts, bounds = [], [0]
        alone = [i for i in indices if chunkings[i].late == NO_LATE]
        for i in alone:
            texts += chunkings[i].texts(inputs.corpora)
            bounds.append(len(texts))
        vectors, cut = embedder.embed(texts)
        for i, a, b in zip(alone, bounds, bounds[1:]):
            chunks[(i, model)] = vectors[a:b]
            truncated[(i, model)] = int(cut[a:b].sum())
        for i in indices:
            if chunkings[i].late != NO_LATE:
                chunks[(i, model)], truncated[(i, model)] = embed_late(embedder, inputs.corpora, chunkings[i]), 0
    return Embedded(queries, chunks, truncated)


def embed_late(embedder: Embedder, corpora: dict[str, str], chunking: Chunking) -> np.ndarray:
    """A chunking's vectors read late (`chunkeval.engine.embedding.late`), in chunk order: each document's chunks
    in windows of that document."""
    c = chunking.chunks
    order = np.argsort(c.corpus, kind="stable")
    firsts = np.searchsorted(c.corpus[order], np.arange(len(c.corpus_names) + 1))
    docs, spans = [], []
    for d, (a, b) in enumerate(zip(firsts, firsts[1:])):
        if b > a:
            docs.append(corpora[c.corpus_names[d]])
            spans.append((c.start[order[a:b]], c.end[order[a:b]]))
    vectors, _ = embedder.embed_late(docs, spans, parse_late(chunking.late))
    out = np.empty_like(vectors)
    out[order] = vectors
    return out


def first_stage(config: Config) -> Config:
    """The configuration without its reranking: what chunk and index statistics are kept by."""
    return replace(config, reranker=NO_RERANKER, candidates=None)


def chunk_stats(
    chunkings: list[Chunking], configs: list[Config], embedded: Embedded, index_stats: dict | None = None
) -> pa.Table:
    """Per first-stage configuration (without k or reranking): chunks made, chunks longer than the model's
    input, and what its index cost (`index_stats`, from `score_all`; null for rows that search no index)."""
    configs = list(dict.fromkeys(first_stage(c) for c in configs))
    values = [c.values(chunkings[c.chunking]) for c in configs]
    columns = {
        **{a.key: pa.array([v[a.key] for v in values], pa.int64() if a.number else pa.string()) for a in CHUNKING_AXES},
        "n_chunks": [len(chunkings[c.chunking].chunks) for c in configs],
        "truncated_chunks": [embedded.truncated.get((c.chunking, c.model), 0) for c in configs],
    }
    for name in INDEX_STATS + VECTOR_STATS:
        kind = pa.int64() if name in ("index_bytes", *VECTOR_STATS) else pa.float64()
        columns[name] = pa.array([(index_stats or {}).get(c, {}).get(name) for c in configs], kind)
    return pa.table(columns)


def score_config(
    inputs: Inputs,
    chunkings: list[Chunking],
    config: Config,
    embedded: Embedded,
    exp: Experiment,
    scorers: dict | None = None,
    measured: dict | None = None,
    kept: list | None = None,
    clock: Stopwatch | None = None,
) -> tuple[pa.Table, dict]:
    """Retrieve once at the largest k, score at every k: one configuration's per-query table (with its
    `index` and `ann_recall_at_k`), and what its index cost (`chunkeval.engine.retrieval.indexes.measure`, measured
    once per chunking, model and index in `measured`: dense, hybrid and reranked rows share it). With
    `kept`, its retrieved lists (`chunkeval.engine.scoring.retrieved`) are appended to it. With `clock`, the seconds
    of its retrieval (reranking and the index's measures included) and of its scoring are added to it."""
    clock = clock or Stopwatch()
    with clock.stage("retrieval"):
        topk, scores, ks = retrieve_top(inputs, chunkings, config, embedded, exp, scorers)
    with clock.stage("scoring"):
        table = _score_top(inputs, chunkings, config, embedded, exp, topk, scores, ks, kept)
    table = with_vector_keys(table, config)
    if kept:
        kept[-1] = with_vector_keys(kept[-1], config)
    if compares_vectors(config, exp):
        with clock.stage("retrieval"):  # what the vectors setting costs against exact float search
            return measured_vectors(inputs, chunkings, config, embedded, exp, table, ks, measured)
    if config.index is None:
        nothing = pa.nulls(table.num_rows, pa.float64())
        for name in ("ann_recall_at_k", "ann_found", "ann_depth"):
            table = table.append_column(name, nothing)
        return table, {}
    with clock.stage("retrieval"):  # the index's measures
        chunking = chunkings[config.chunking]
        every = tuple(sorted(set(exp.k)))
        key = (config.chunking, config.model, config.index)
        measured = {} if measured is None else measured
        if key not in measured:
            measured[key] = measure_index(
                config.index,
                embedded.queries[config.model],
                embedded.chunks[(config.chunking, config.model)],
                every,
                group_names=chunking.chunks.corpus_names,
                timed=config.index.approximate or any(spec.approximate for spec in exp.index_specs()),
                **groups_of(inputs, chunking, exp.own_corpus),
            )
        found = measured[key]
        return with_found(table, found, every, ks), found.stats()


def _score_top(
    inputs: Inputs,
    chunkings: list[Chunking],
    config: Config,
    embedded: Embedded,
    exp: Experiment,
    topk: np.ndarray,
    scores: np.ndarray | None,
    ks: tuple[int, ...],
    kept: list | None,
) -> pa.Table:
    """A configuration's per-query table at every k (with its retrieved lists and their scores appended to
    `kept`)."""
    chunking = chunkings[config.chunking]
    doc = isinstance(inputs.gold, DocGold)
    if doc:
        keys = {"index": config.index_key, "reranker": config.reranker, "candidates": config.candidates}
        table, _ = score_documents(
            inputs.gold,
            chunking.spec,
            chunking.chunks,
            topk,
            ks,
            config.model,
            config.retriever,
            **keys,
            scores=scores,
            ties=exp.ties,
        )
    else:
        keys = (config.model, config.retriever, inputs.copies, config.reranker, config.candidates, config.index_key)
        by_k = expand_top(inputs, chunking.chunks, topk, scores, ks, config.expand, exp.relevance)
        table = pa.concat_tables(
            score_chunking(
                inputs.gold,
                chunking.spec,
                s.chunks,
                s.topk,
                k,
                *keys,
                exp.relevance,
                s.scores,
                config.expand,
                s.counted,
            )
            for k, s in by_k
        )
        top_k = by_k[-1][1]  # what the largest k returns
        chunking = replace(chunking, chunks=top_k.chunks)
        topk, scores = top_k.topk, top_k.scores
    for key, before in OPTIONAL_KEYS.items():  # the chunking's own axes (scoring writes each at its default)
        if getattr(chunking, key, before) != before:
            at = table.schema.get_field_index(key)
            table = table.set_column(at, key, pa.array([getattr(chunking, key)] * table.num_rows, pa.string()))
    if kept is not None:  # at the largest k (under document gold, not the depth MaxP looked at)
        top = max(ks)
        scores = None if scores is None else scores[:, :top]
        kept.append(
            retrieved_table(inputs.gold, chunking.chunks, topk[:, :top], table, inputs.copies, scores, inputs.pages)
        )
    return table


def expand_top(
    inputs: Inputs,
    chunks,
    topk: np.ndarray,
    scores: np.ndarray | None,
    ks: tuple[int, ...],
    expand: str,
    relevance: str,
) -> list[tuple[tuple[int, ...], Scored]]:
    """What span scoring sees of a configuration's top k, per depth: the chunks themselves at every k at once
    (`expand: none`, `window:n=0`), else each k's merged units (`chunkeval.engine.scoring.expansion`)."""
    expansion = parse_expand(expand)
    if expansion.identity:
        return [(ks, Scored(chunks, topk, scores, None))]
    judged = inputs.gold if inputs.copies is None else inputs.copies.gold_set(inputs.gold)
    by_k = expanded(inputs.gold, chunks, inputs.corpora, topk, scores, ks, expansion, judged, relevance)
    return [((k,), s) for k, s in by_k.items()]


def score_all(
    inputs: Inputs,
    chunkings: list[Chunking],
    configs: list[Config],
    embedded: Embedded,
    exp: Experiment,
    kept: list | None = None,
    clock: Stopwatch | None = None,
) -> tuple[pa.Table, dict]:
    """Every configuration's per-query table, one after the other (each is a few vectorised steps), and per
    first-stage configuration what its index cost; with `kept`, what each retrieved; with `clock`, the
    seconds of retrieval and of scoring."""
    scorers: dict = {}  # CrossEncoder rerankers, loaded once for the grid
    measured: dict = {}  # index measures, once per chunking, model and index
    stats: dict = {}
    tables = []
    for c in configs:
        table, cost = score_config(inputs, chunkings, c, embedded, exp, scorers, measured, kept, clock)
        tables.append(table)
        stats.setdefault(first_stage(c), cost)
    return pa.concat_tables(tables), stats


# --------------------------------------------------------------------------- the steps of a run
# One list of steps, each reading and filling in the run's state (`RunState`): `run_sweep` (`chunkeval sweep`,
# the Python API) runs them one after the other; the `evaluate` flow (`chunkeval run`, deployments) runs each as
# a task, chunking and embedding in shards on its task runner's workers. `begin` makes the state they start from.


def begin(exp: Experiment, embedders: Embedders | Embedder, probe: str = "run", fingerprint: bool = False) -> RunState:
    """A run's state before its steps: the (validated) experiment and its embedders, its served models probed as
    `probe` says (a model that changed behind its name embeds into a new cache generation: the lines that say so
    are notes), and with `fingerprint` its inputs' fingerprints (a run that is recorded)."""
    state = RunState(exp, Embedders.of(embedders).for_experiment(exp))
    if fingerprint:
        seen = len(probes.CHANGED)
        state.fingerprints = input_fingerprints(exp, probe)  # probes the served models as it fingerprints them
        state.notes += probes.CHANGED[seen:]
    elif probe != "none":
        state.notes += probe_models(exp, probe)
    return state


def load(state: RunState) -> RunState:
    """The documents and the gold set, read and checked once for the run (`load_inputs`)."""
    state.inputs = load_inputs(state.exp)
    state.notes += state.exp.notes() + skipped_notes(state.inputs.skipped)
    return state


def load_cold_models(state: RunState) -> None:
    """Start loading, each in a thread, the models the first stage embeds with whose cache holds no vector yet
    (`Embedder.load_if_cold`): a first run's model loads while the documents are chunked."""
    if state.exp.first_stage_embeds():
        for model in state.exp.model:
            state.embedders[model].load_if_cold()


def chunk_jobs(state: RunState) -> list[tuple]:
    """The chunk step's jobs: each chunking to make (`chunking_jobs`), with what every job reads; a first run's
    model starts loading meanwhile (not on a cluster, whose workers embed)."""
    if not state.shards:
        load_cold_models(state)
    return [(state.inputs.corpora, spec, model, state.embedders) for spec, model in chunking_jobs(state.exp)]


def chunk_job(corpora: dict, spec: ChunkerSpec, model: str | None, embedders: Embedders) -> tuple:
    """One chunking (`chunk_one`), and what its semantic chunker embedded meanwhile (counted by the state when the
    job ran on a worker, with its own copy of the embedders)."""
    before = embedders.counters()
    chunking = chunk_one(corpora, spec, model, embedders)
    after = embedders.counters()
    return chunking, {m: tuple(a - b for a, b in zip(c, before.get(m, (0, 0, 0.0, 0)))) for m, c in after.items()}


def chunked(state: RunState, done: list[tuple]) -> RunState:
    """The chunkings kept (each with its context headers, `with_contexts`), every configuration planned on them,
    and every index checked to fit its vectors; what jobs on workers embedded, counted."""
    if state.shards:
        for _, counted in done:
            for model, counters in counted.items():
                state.embedders.count(model, counters)
    chunkings = with_contexts(state.exp, [c for c, _ in done], state.inputs)
    state.chunkings, state.configs = chunkings, plan(state.exp, chunkings)
    check_indexes_fit(state.inputs, chunkings, state.configs, state.embedders, state.exp.own_corpus)
    state.notes += clamped_k_note(state.exp.k, chunkings)
    return state


def embed_jobs(state: RunState) -> list[tuple]:
    """The embed step's jobs on a cluster (`shards` of them): what the cache lacks, split for the workers to embed
    into the shared cache (`embedding_shards`); none in one process, where `embed` embeds it all."""
    if not state.shards:
        return []
    work = embedding_shards(state.inputs, state.chunkings, state.configs, state.embedders, state.shards)
    return [(model, kind, texts, state.embedders) for model, kind, texts in work]


def embed_job(model: str, kind: str, texts: list, embedders: Embedders) -> dict:
    """One worker's share of the embedding, written into the shared cache as its own part files."""
    return embed_shard(
        model, kind, texts, embedders.cache_dir, embedders.batch_size, embedders.device, embedders.backend,
        embedders.quantize, embedders.precision, embedders[model].served,
    )  # fmt: skip


def embedded(state: RunState, done: list[dict]) -> RunState:
    """Every vector the configurations read (`embed_all`: what jobs on workers embedded, the cache answers)."""
    for found in done:
        state.embedders.count(found["model"], found["counters"])
    state.embedded = embed_all(state.inputs, state.chunkings, state.configs, state.embedders)
    return state


def score(state: RunState) -> RunState:
    """Every configuration retrieved at its largest k and scored at every k (`score_all`), with what each
    retrieved and what each index cost; in a race, the cells the race evaluated (`race.race_all`)."""
    kept: list = []
    if state.exp.race:
        state.per_query, state.index_stats, state.race = race_all(
            state.inputs, state.chunkings, state.configs, state.embedded, state.exp, score_config, first_stage,
            kept, state.clock,
        )  # fmt: skip
        state.notes += race_lines(state.race, width=114)  # `sweep` prints each as "note: …"
    else:
        state.per_query, state.index_stats = score_all(
            state.inputs, state.chunkings, state.configs, state.embedded, state.exp, kept, state.clock
        )
    state.retrieved = pa.concat_tables(kept) if kept else None
    return state


def summarise(state: RunState) -> RunState:
    """The summary per configuration, per corpus and per slice, and the references of each question."""
    stats = chunk_stats(state.chunkings, state.configs, state.embedded, state.index_stats)
    skip = state.exp.skip_empty_gold
    state.summary, state.by_corpus = summarize_sweep(state.per_query, stats, skip)
    state.by_slice = summarize_slices(state.per_query, state.inputs.slices, skip)
    state.references = reference_tables(state.inputs.gold, state.inputs.corpora, state.chunkings)
    return state


def check_gold(state: RunState) -> RunState:
    """What the gold set says about itself on the run's inputs (`chunkeval.engine.gold.check`), and under gold a
    chat model judged, how much of each configuration's top k it judged (`chunkeval.engine.gold.judge`)."""
    inputs = state.inputs
    state.gold_check = gold_report(inputs.gold, inputs.corpora, min(state.exp.chunk_sizes), inputs.skipped).to_dict()
    shares = run_judged_share(state.exp, inputs.gold, state.retrieved)  # judged gold: how much of the top k was
    if shares:
        state.gold_check["judged_share"] = shares
        state.notes += judged_lines(shares)
    return state


@dataclass(frozen=True)
class Step:
    """One step of a run: `name` (its stage in the seconds a run reports), and either `run` (the whole step, on the
    run's state) or its fan-out: `jobs` (the independent jobs it splits into, each a tuple of arguments), `job` (one
    of them: what a task runner may run on a worker) and `merge` (their results folded into the state). Whoever
    runs the steps runs them alike (`run_step`): `run_sweep` in one process, the `evaluate` flow as tasks, the jobs
    mapped over its task runner."""

    name: str
    stage: str  # where its seconds go (`RunState.clock`): `scoring` holds summarising and the gold check too
    run: Callable[[RunState], RunState] | None = None
    jobs: Callable[[RunState], list[tuple]] | None = None
    job: Callable | None = None
    merge: Callable[[RunState, list], RunState] | None = None
    io: bool = False  # reads or writes files (the flow retries its task)


STEPS = (
    Step("load", "loading", load, io=True),
    Step("chunk", "chunking", jobs=chunk_jobs, job=chunk_job, merge=chunked),
    Step("embed", "embedding", jobs=embed_jobs, job=embed_job, merge=embedded, io=True),
    Step("score", "scoring", score),
    Step("summarise", "scoring", summarise),
    Step("check_gold", "scoring", check_gold),
)  # the order a run's state is filled in


def run_step(step: Step, state: RunState, map_jobs=None) -> RunState:
    """One step on the state: `run`, or its jobs (through `map_jobs(job, jobs)` where given: a task runner's map;
    else one after the other here) then `merge`."""
    if step.run is not None:
        return step.run(state)
    jobs = step.jobs(state)
    done = map_jobs(step.job, jobs) if map_jobs is not None and jobs else [step.job(*j) for j in jobs]
    return step.merge(state, done)


def result(state: RunState) -> RunResult:
    """What the run made, whole, once every step has run."""
    embedders, inputs = state.embedders, state.inputs
    return RunResult(
        state.per_query,
        state.summary,
        state.by_corpus,
        state.references,
        embedders.table(),
        embedders.texts_embedded,
        embedders.model_loaded,
        tuple(state.notes),
        state.retrieved,
        dict(inputs.corpora),
        state.by_slice,
        inputs.slices,
        kept_qrels(inputs.gold),
        state.gold_check,
        state.race,
    )


def run_steps(state: RunState) -> RunResult:
    """Every step of `STEPS` in order in one process, from where the state is (`load` done already by
    `chunkeval.engine.pipeline.prepare`), then the run's result. The flow runs the same steps as tasks."""
    for step in STEPS:
        if step.run is load and state.inputs is not None:
            continue
        with state.clock.stage(step.stage):
            state = run_step(step, state)
    return result(state)


def run_sweep(exp: Experiment, embedders: Embedders | Embedder) -> RunResult:
    """The whole sweep of a validated experiment in one process, with the embedders given (what the tests and
    benches call; the commands and the API prepare a run first: `prepare`, then `run_steps`)."""
    return run_steps(begin(exp, embedders))
