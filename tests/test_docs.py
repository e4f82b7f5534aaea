"""The README stays a front page and the documentation site stays whole: no network, no mkdocs needed.

`make docs` builds the site with `mkdocs build --strict`; these checks catch the same mistakes earlier (a page in
the nav that does not exist, a page left out of the nav, a broken relative link) and keep the README short.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"

README_MAX_LINES = 300
FIRST_FINETUNE_WITHIN = 80

# [text](target) and ![alt](target); the target up to the first space or ')'.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def readme_lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def nav_pages() -> list[str]:
    """The .md files named in mkdocs.yml's nav (`- Title: page.md` or `- page.md`), in order."""
    pages, in_nav = [], False
    for line in MKDOCS.read_text(encoding="utf-8").splitlines():
        if re.match(r"^nav:\s*$", line):
            in_nav = True
            continue
        if in_nav and line and not line[0].isspace() and not line.startswith("#"):
            break  # the next top-level key
        match = re.match(r"^\s*-\s*(?:[^:]+:\s*)?(\S+\.md)\s*$", line) if in_nav else None
        if match:
            pages.append(match.group(1))
    return pages


def relative_links(path: Path) -> list[str]:
    """Relative link targets in a Markdown file, outside code blocks and code spans; no URLs, no bare anchors."""
    text = CODE_SPAN.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith(("#", "/")):
            continue
        targets.append(target)
    return targets


def test_readme_is_a_front_page():
    lines = readme_lines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}: move details to docs/"


def test_first_finetune_command_is_near_the_top():
    lines = readme_lines()
    first = next((i for i, line in enumerate(lines, 1) if "bertkit finetune" in line), None)
    assert first is not None, "README.md shows no `bertkit finetune` command"
    assert first <= FIRST_FINETUNE_WITHIN, f"the first `bertkit finetune` is on line {first}; it must be within {FIRST_FINETUNE_WITHIN}"


def test_readme_mentions_make_docs():
    assert "make docs" in README.read_text(encoding="utf-8")


def test_mkdocs_config_is_strict_material():
    config = MKDOCS.read_text(encoding="utf-8")
    assert re.search(r"^site_name:\s*bertkit\s*$", config, re.M)
    assert re.search(r"^\s+name:\s*material\s*$", config, re.M)
    assert re.search(r"^strict:\s*true\s*$", config, re.M)
    for check in ("unrecognized_links", "anchors", "omitted_files"):
        assert re.search(rf"^\s+{check}:\s*warn\s*$", config, re.M), f"mkdocs.yml validation should warn on {check}"


def test_every_nav_page_exists():
    pages = nav_pages()
    assert "index.md" in pages and len(pages) >= 20, pages
    missing = [page for page in pages if not (DOCS / page).is_file()]
    assert not missing, f"mkdocs.yml's nav names pages that docs/ lacks: {missing}"
    assert len(pages) == len(set(pages)), "a page is in the nav twice"


def test_every_docs_page_is_in_the_nav():
    pages = set(nav_pages())
    left_out = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if p.relative_to(DOCS).as_posix() not in pages)
    assert not left_out, f"docs pages missing from mkdocs.yml's nav: {left_out}"


def test_readme_links_point_at_existing_files():
    targets = relative_links(README)
    assert any(t.startswith("docs/") for t in targets), "the README should link into docs/"
    broken = [t for t in targets if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not broken, f"README.md links to files that do not exist: {broken}"


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_docs_links_stay_inside_the_site(page):
    """A docs page links to other docs pages only (repository files are named as `code spans`, which
    `mkdocs build --strict` cannot break), and every page it links to exists."""
    path = DOCS / page
    for target in relative_links(path):
        file = target.split("#", 1)[0]
        if not file:
            continue
        resolved = (path.parent / file).resolve()
        assert resolved.is_relative_to(DOCS.resolve()), f"{page} links outside docs/: {target} (name it as `{file}`)"
        assert resolved.is_file(), f"{page} links to a missing page: {target}"


def test_the_docs_site_loads_nothing_from_the_internet():
    """Material's default theme fetches Google Fonts; with `font: false` the site reads offline, and no page, theme or
    extra asset points at another host."""
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["theme"].get("font") is False
    assets = [*config.get("extra_css", []), *config.get("extra_javascript", [])]
    assert not [a for a in assets if "://" in str(a)], assets


def test_the_help_line_counts_the_docs_quote_are_about_right():
    """docs/index.md says how long `--help` is ("about N lines at W columns (`--help-all`: about M)"): within 10%."""
    from typer.testing import CliRunner

    from bertkit.cli.app import app

    text = " ".join((DOCS / "index.md").read_text(encoding="utf-8").split())
    claims = re.findall(r"`bertkit (\w+) --help` is about (\d+) lines at (\d+) columns \(`--help-all`: about (\d+)\)",
                        text)
    assert claims, "docs/index.md no longer says how long --help is: update this test"
    for command, lines, columns, lines_all in claims:
        for flag, claimed in (("--help", lines), ("--help-all", lines_all)):
            output = CliRunner().invoke(app, [command, flag], env={"COLUMNS": columns}).output
            measured = len(output.splitlines())
            assert abs(measured - int(claimed)) <= 0.1 * int(claimed), f"`bertkit {command} {flag}` is {measured} lines"


@pytest.mark.parametrize("path", [README, DOCS / "index.md"])
def test_the_docs_do_not_say_every_command_takes_out(path):
    """push (it uploads) and recipes write nothing: the common-options paragraph says so."""
    text = " ".join(path.read_text(encoding="utf-8").split())
    assert "Every command takes `--out" not in text and "`--out DIR` (its run directory)" not in text
    assert "`push` (it uploads a folder) and `recipes` do not" in text


def test_the_finetune_outputs_list_best_dev_proba_and_say_when_checkpoints_go():
    for path in (README, DOCS / "index.md", DOCS / "finetune.md"):
        text = " ".join(path.read_text(encoding="utf-8").split())
        assert "best_dev_proba.npy" in text, path.name
        assert "--keep-checkpoints" in text[text.index("checkpoints/step-N/"):][:400], path.name
