"""The documentation finds its way (issue 20, item 7): every relative link of README.md and
docs/*.md names a file of the repository and, after '#', a heading of that file, so a
section moved or renamed breaks this test rather than the reader's click; README's quick
start keeps its two commands first."""
from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_anchor(h) for h in HEADING.findall(FENCE.sub("", page.read_text()))}


def _links(page: Path) -> list[str]:
    return [target for target in LINK.findall(FENCE.sub("", page.read_text()))
            if not re.match(r"[a-z]+:", target)]  # http:, https:, mailto: are not ours


def test_the_guides_exist_and_readme_links_each():
    readme_links = {link.split("#")[0] for link in _links(ROOT / "README.md")}
    for guide in ("admin", "user", "simulate", "measurements", "policies"):
        assert (ROOT / "docs" / f"{guide}.md").is_file()
        assert f"docs/{guide}.md" in readme_links, f"README has no link to docs/{guide}.md"


def test_every_relative_link_names_a_file_and_a_heading_of_it():
    broken = []
    for page in PAGES:
        for link in _links(page):
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(ROOT)}: {link}: no file {path}")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"{page.relative_to(ROOT)}: {link}: no heading #{anchor}")
    assert not broken, "\n".join(broken)


def test_readme_quick_start_keeps_its_two_commands_first():
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"## Quick start\s+```\n(.*?)```", readme, re.S)
    assert first_block and first_block.group(1).split("\n")[:2] == ["make demo", "make test"]


def test_anchor_rule_on_headings_the_docs_use():
    assert _anchor("The store: who reads it, one controller, upgrades and the way back") == \
        "the-store-who-reads-it-one-controller-upgrades-and-the-way-back"
    assert _anchor("Two controllers (standby)") == "two-controllers-standby"
    assert _anchor("`tiresias show-config`, `tiresias report`") == "tiresias-show-config-tiresias-report"
