"""The documentation holds together: every relative link of README.md and docs/*.md reaches a file (and, with a
#anchor, a heading of it), the architecture page's module map names exactly the modules under src/chunkeval,
the README stays a five-minute read, and its test commands are the ones CI runs. Plain file reads: fast."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from module_map import PAGE, ROOT, modules, named

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (word characters, spaces and hyphens kept),
    spaces made hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for match in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", FENCE.sub("", path.read_text(encoding="utf-8")), re.M):
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text(encoding="utf-8"))) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_a_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_link_check_sees_links_and_headings() -> None:
    """The checks above would pass on pages they cannot read; this one says they read these."""
    assert "docs/architecture.md" in links(README)
    assert "metrics.md#repeated-passages-duplicates-positional--credit" in links(ROOT / "docs" / "commands.md")
    assert (
        slug("Repeated passages: `duplicates: positional | credit`")
        == "repeated-passages-duplicates-positional--credit"
    )
    assert "the-module-map" in anchors(PAGE)


def test_the_module_map_names_every_module_and_only_modules() -> None:
    on_page = named(PAGE.read_text(encoding="utf-8"))
    in_code = [p.as_posix() for p in modules()]
    assert len(on_page) == len(set(on_page)), "a module is named twice in docs/architecture.md's map"
    missing, gone = sorted(set(in_code) - set(on_page)), sorted(set(on_page) - set(in_code))
    assert not missing and not gone, (
        f"docs/architecture.md's module map is out of date (missing {missing}, no longer there {gone}): "
        "run `python tests/module_map.py`"
    )


def test_the_readme_is_a_five_minute_read() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


PYTEST = "python -m pytest -n 2 --dist loadfile"  # the suite on two workers, a test file on each


def test_the_readme_sets_up_and_tests_as_ci_does() -> None:
    """The README's test block is commands of .ci/run, word for word, ending with CI's pytest command."""
    ci = {line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()}
    blocks = re.findall(r"^```sh[^\n]*\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)
    tests = [b for b in blocks if PYTEST in b.splitlines()]
    assert tests, f"README.md has no ```sh block ending with `{PYTEST}`"
    commands = [line.split("  #")[0].strip() for line in tests[0].splitlines() if line.strip()]
    assert commands[-1] == PYTEST and PYTEST in ci
    assert [c for c in commands if c not in ci] == []


# --------------------------------------------------------------------------- every documented command (issue 52)

SH_BLOCK = re.compile(r"^```sh(?: \((?P<kind>[a-z ]+)(?::\s*(?P<detail>.*?))?\))?\n(?P<body>.*?)^```", re.M | re.S)
KINDS = {
    None: "runs as written in the demo's home, each <placeholder> replaced (tests/test_first_run.py)",
    "your files": "runs in a folder where the suite's files stand in for the reader's (tests/test_first_run.py)",
    "repository": "runs from the root of a checkout (tests/test_first_run.py)",
    "synopsis": "a command's forms, [optional] parts and all: each names a command whose --help runs",
    "install": "set-up lines: those .ci/run or .ci/wheel-check run",
    "server": "needs a server or a peer: the test file it names runs it against the suite's",
    "benchmark": "a bench script of minutes: the script exists",
    "untested": "said so in the docs, with why: Prefect's own commands no test runs yet (the work pool's)",
}
PLACEHOLDER = re.compile(r"<[a-z][a-z-]*>")


def documented_commands() -> list[dict]:
    """Every shell command of README.md and docs/*.md: each ```sh block's lines (continuations joined, comment
    lines dropped), with the kind its info string gives (```sh (kind: detail)), its page and line."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in SH_BLOCK.finditer(text):
            joined = re.sub(r"\\\n\s*", "", m.group("body"))
            lines = [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
            where = f"{page.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"
            found.append({"where": where, "kind": m.group("kind"), "detail": m.group("detail"), "lines": lines})
    return found


def test_every_documented_command_is_of_a_known_kind_and_what_it_names_exists(capsys) -> None:
    """Each ```sh block is runnable as written (the slow test runs it), or says what it needs: a synopsis names
    commands whose --help runs, an install block is CI's own lines, a server block names the test file that runs it
    against the suite's servers (and that file runs that command), a benchmark names scripts that exist. An
    unlabelled block holding other than shell is the mistake this catches (a command left in a plain ``` block)."""
    from chunkeval.cli import main

    blocks = documented_commands()
    assert len(blocks) >= 20 and sum(len(b["lines"]) for b in blocks) >= 70  # 23 blocks, 77 commands (2026-12-02)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8") + (ROOT / ".ci" / "wheel-check").read_text(encoding="utf-8")
    for b in blocks:
        assert b["kind"] in KINDS, b
        for line in b["lines"]:
            if b["kind"] == "synopsis" and line.startswith("chunkeval "):
                words = [w for w in line.split()[1:] if re.fullmatch(r"[a-z][a-z-]*", w)][:2]
                for depth in (2, 1):  # `gold check`, else `run`
                    try:
                        main([*words[:depth], "--help"])
                    except SystemExit as exc:
                        if exc.code == 0:
                            break
                else:
                    raise AssertionError(f"{b['where']}: {line}: no command {' '.join(words)}")
                capsys.readouterr()
            elif b["kind"] == "install":
                for part in line.split(" && "):  # the plain install is CI's wheel without extras (.ci/wheel-check)
                    assert part.strip() in ci or part.strip() in ("chunkeval run", "pip install -e ."), (
                        b["where"],
                        part,
                    )
            elif b["kind"] == "server":
                test_file = ROOT / re.split(r"[\s:,]", b["detail"])[0]
                assert test_file.is_file(), b
                named = test_file.read_text(encoding="utf-8")
                words = line.split()
                if words[0] in ("chunkeval", "prefect"):  # the command it runs: its (sub)command is in that file
                    assert len(words) > 1 and words[1].split("=")[0] in named, (b["where"], line, test_file.name)
            elif b["kind"] == "untested":
                assert b["detail"] and all(line.split()[0] == "prefect" for line in b["lines"]), b  # never chunkeval's
            elif b["kind"] == "benchmark":
                scripts = re.findall(r"bench/\w+\.py", line + " " + (b["detail"] or ""))
                assert all((ROOT / s).is_file() for s in scripts), (b["where"], line)
            else:  # runnable: a placeholder is one the test knows, written so a reader sees it must be replaced
                assert set(PLACEHOLDER.findall(line)) <= {"<run-id>", "<older-run-id>"}, (b["where"], line)
                assert not re.search(r"\bRUN_ID\b|…", line), (b["where"], line)


def test_every_command_chunkeval_tells_a_reader_to_run_exists_with_its_flags(capsys) -> None:
    """Every `chunkeval …` a message, a notice, an alarm or a docstring of the code names (issue 52: an alarm told
    the reader to run `gold update` without the flag it needs) is a command whose --help runs and whose every flag it
    names is one of that command's. Where a command line is built from an experiment (the gold-drift alarm's), a test
    runs the very line: tests/test_gold_anchoring.py."""
    from chunkeval.cli import main

    named = set()
    for path in (ROOT / "src" / "chunkeval").rglob("*.py"):
        named |= set(re.findall(r"`(chunkeval [^`]+)`", path.read_text(encoding="utf-8")))
    assert len(named) >= 30
    for command in sorted(named):
        words = command.split()[1:]
        sub = [w for w in words[:2] if re.fullmatch(r"[a-z][a-z-]*", w)]
        helped = None
        for depth in (2, 1, 0):
            try:
                main([*sub[:depth], "--help"])
            except SystemExit as exc:
                if exc.code == 0:
                    helped = capsys.readouterr().out
                    break
            capsys.readouterr()
        assert helped is not None, command
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", command):
            assert flag in helped, f"{command}: no flag {flag} in `chunkeval {' '.join(sub[:depth])} --help`"
