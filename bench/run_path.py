"""The path of one run through chunkeval's modules, before and after a change of shape (issue 42, "Walking one run").

    python bench/run_path.py [--base REV] [--grid demo|small]

A trace of calls (`sys.setprofile`, and `threading.setprofile` for Prefect's task threads) over one
`chunkeval run` of the demo (the demo's grid; `--grid small`: one chunking, bm25, for a quick look), in this tree and,
with `--base`, in another commit checked out beside it (a git worktree), each in a fresh `CHUNKEVAL_HOME` with the
suite's pin of backend auto. What it counts is the code a reader walks, not how often a loop runs:

- from the command's handler on (`chunkeval.cli.commands.run.run`: the arguments parsed), a call counts once per
  (calling function, called function) edge, in the order edges first occur, and only calls from one chunkeval
  module into another, made by a function (a module's own code as it is imported is no walk);
- a *stay* is a run of those calls into one module; *modules* the modules stayed in; *returns* the stays in a module
  already left once; *before the first input* the stays before the first call into the corpus reader
  (`engine.inputs.corpus`, or `engine.corpus` in trees of before the engine's packages).

Prints one row per tree (`RUN_PATH_KEEP=FOLDER` keeps each tree's raw edges there, as `<tree>.json`). Exit 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TRACE = r"""
import json, sys, threading, time
from pathlib import Path

src = Path(sys.argv[1]).resolve()
edges, seen, lock, begun = [], set(), threading.Lock(), []


def module_of(frame):
    name = frame.f_globals.get("__name__", "")
    return name if name.startswith("chunkeval") else None


def profile(frame, event, arg):
    if event != "call":
        return
    callee = module_of(frame)
    caller = frame.f_back
    if callee is None or caller is None:
        return
    if not begun:  # the walk starts at the command's handler, its arguments parsed
        if callee == "chunkeval.cli.commands.run" and frame.f_code.co_name == "run":
            begun.append(True)
        return
    source = module_of(caller)
    if source is None or source == callee or caller.f_code.co_name == "<module>":  # imports are no walk
        return
    edge = (source, caller.f_code.co_qualname, callee, frame.f_code.co_qualname)
    with lock:
        if edge not in seen:
            seen.add(edge)
            edges.append((time.perf_counter(), callee, source, caller.f_code.co_qualname, frame.f_code.co_qualname))


threading.setprofile(profile)
sys.setprofile(profile)
from chunkeval.cli import main

try:
    code = main(json.loads(sys.argv[2]))
finally:
    sys.setprofile(None)
    threading.setprofile(None)
edges.sort()
Path(sys.argv[3]).write_text(json.dumps({"code": code, "modules": [e[1] for e in edges], "edges": edges}))
"""


def walk(modules: list[str]) -> dict:
    """Stays, modules, returns and stays before the first input, of the called modules in order."""
    stays = [m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m]
    left, returns = set(), 0
    for i, m in enumerate(stays):
        returns += m in left
        if i:
            left.add(stays[i - 1])
    first = next((i for i, m in enumerate(stays) if m.endswith(("inputs.corpus", "engine.corpus"))), len(stays))
    return {"stays": len(stays), "modules": len(set(stays)), "returns": returns, "before_first_input": first}


def trace(tree: Path, argv: list[str], work: Path, name: str) -> dict:
    home = work / "home"
    out = work / "trace.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(tree / "src"),
        "CHUNKEVAL_HOME": str(home),
        "CHUNKEVAL_AUTO_BACKEND": "torch",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("PREFECT_API_URL", None)
    script = work / "trace.py"
    script.write_text(TRACE)
    done = subprocess.run(
        [sys.executable, str(script), str(tree / "src"), json.dumps(argv), str(out)],
        env=env, cwd=work, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"the traced run failed in {tree}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    found = json.loads(out.read_text())
    if os.environ.get("RUN_PATH_KEEP"):
        keep = Path(os.environ["RUN_PATH_KEEP"])
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{name.replace(' ', '-')}.json").write_text(json.dumps(found))
    return walk(found["modules"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="another commit to walk beside this tree")
    parser.add_argument("--grid", choices=["demo", "small"], default="demo")
    args = parser.parse_args()
    demo = ROOT / "data" / "demo"
    argv = ["run", "--experiment", "path"]
    argv += ["--corpus-dir", str(demo / "corpora"), "--questions", str(demo / "questions.csv")]
    if args.grid == "small":
        argv += ["--chunker", "fixed_token", "--chunk-sizes", "100", "--retriever", "bm25", "--k", "3"]
    else:
        argv += ["--chunker", "fixed_token,recursive_token", "--chunk-sizes", "100,200", "--overlaps", "0,25%"]
        argv += ["--k", "1,5", "--model", "all-MiniLM-L6-v2", "--retriever", "dense,bm25"]
    rows = {}
    with tempfile.TemporaryDirectory(prefix="chunkeval-path-") as scratch:
        scratch = Path(scratch)
        trees = {"this tree": ROOT}
        if args.base:
            base = scratch / "base"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base],
                           check=True, capture_output=True)  # fmt: skip
            trees = {f"base {args.base}": base, **trees}
        try:
            for name, tree in trees.items():
                work = scratch / name.replace(" ", "-")
                work.mkdir()
                rows[name] = trace(tree, argv, work, name)
        finally:
            if args.base:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(scratch / "base")])
    print(f"{'tree':<24} {'stays':>6} {'modules':>8} {'returns':>8} {'before first input':>19}")
    for name, r in rows.items():
        print(f"{name:<24} {r['stays']:>6} {r['modules']:>8} {r['returns']:>8} {r['before_first_input']:>19}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
