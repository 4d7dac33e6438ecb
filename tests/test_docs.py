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
    blocks = re.findall(r"^```sh\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)
    tests = [b for b in blocks if PYTEST in b.splitlines()]
    assert tests, f"README.md has no ```sh block ending with `{PYTEST}`"
    commands = [line.split("  #")[0].strip() for line in tests[0].splitlines() if line.strip()]
    assert commands[-1] == PYTEST and PYTEST in ci
    assert [c for c in commands if c not in ci] == []
