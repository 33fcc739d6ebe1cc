"""Docs that cannot drift (issue 29, item 5).

Every fenced block of README.md and docs/*.md that shows a command's output is either
produced by a test (the test runs the command and compares the block line for line) or
marked, at the end of the paragraph right above the fence, as output no test checks:

    (excerpt of: `COMMAND` ...)            some lines of what COMMAND prints ("..." where cut)
    (unchecked output of: `COMMAND` ...)   all of it, with the reason no test runs it

(a colon may follow, as prose that introduces a block ends with one).

A block with no marker that no check names fails here, with its page and line. A block
shows output unless every line is a command of INPUT_COMMANDS (after an optional "$ "),
a comment, or the continuation of a command (the line before ends with "\\" or "|");
a block fenced ```yaml (or another INPUT_INFO) is a file's text, not output.

The packaged config (packaging/tiresias.yaml) is generated from the built-in defaults,
and checked here the same way.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import re
import time
from pathlib import Path

import pytest
import yaml

from controller.cli.main import main
from controller.service.ops.config import REGENERATE_DEFAULTS, Config, defaults_yaml, from_mapping
from tests.conftest import ROOT
from tests.test_queue_explain import cluster as queue_cluster  # noqa: F401  (pytest fixture)
from tests.test_shadow_diff import cluster as diff_cluster  # noqa: F401  (pytest fixture)

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
INPUT_COMMANDS = {"tiresias", "make", "systemctl", "jq", "curl", "sbatch", "srun", "scontrol", "scancel",
                  "squeue", "sacct", "pip", "python", "python3", ".venv/bin/python", "cd", "git", "sudo",
                  "install", "cp", "bash", "docker", "sacctmgr", "mariadb", "chown", "chmod"}
SHELL_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S")  # CLUSTER=mycluster: a variable set for what follows
INPUT_INFO = {"yaml", "ini", "lua", "python", "conf", "toml"}
MARKER = re.compile(r"\((?:excerpt|unchecked output) of: `[^`]+`.*\):?$")  # ends the paragraph above


@dataclasses.dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    info: str  # what follows the opening ```
    lines: tuple[str, ...]
    above: str  # the paragraph right above the opening fence, its lines joined by spaces

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text().split("\n")
    found, start = [], None
    for number, line in enumerate(text):
        if line.startswith("```"):
            if start is None:
                start = number
            else:
                found.append(Block(str(page.relative_to(ROOT)), start + 1, text[start][3:].strip(),
                                   tuple(text[start + 1:number]), _paragraph_above(text, start)))
                start = None
    assert start is None, f"{page}: the fence at line {start + 1} is never closed"
    return found


def _paragraph_above(text: list[str], fence: int) -> str:
    first = fence
    while first > 0 and text[first - 1].strip() and not text[first - 1].startswith("```"):
        first -= 1
    return " ".join(line.strip() for line in text[first:fence])


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def shows_output(block: Block) -> bool:
    if block.info in INPUT_INFO:
        return False
    previous = ""
    for line in block.lines:
        stripped = line.strip()
        command = stripped.removeprefix("$ ")
        words = command.split()
        continued = previous.rstrip().endswith(("\\", "|"))
        if stripped and not continued and not command.startswith("#") and words[0] not in INPUT_COMMANDS \
                and not SHELL_ASSIGNMENT.match(command):
            return True
        previous = line
    return False


def find(page: str, first_line: str) -> Block:
    matches = [b for b in all_blocks() if b.page == page and b.lines and b.lines[0] == first_line]
    assert len(matches) == 1, f"{page}: {len(matches)} blocks begin with {first_line!r} (the check below needs one)"
    return matches[0]


def assert_block_is(block: Block, output: str, command: str) -> None:
    """The block after its first line (the command) is OUTPUT, line for line (trailing
    spaces and blank lines aside); on a difference, the diff and what to paste."""
    shown = [line.rstrip() for line in block.lines[1:]]
    made = [line.rstrip() for line in output.rstrip("\n").split("\n")]
    while shown and not shown[-1]:
        shown.pop()
    diff = "\n".join(difflib.unified_diff(shown, made, f"{block.where} (the doc)", f"{command} (now)", lineterm=""))
    assert shown == made, f"{block.where} no longer shows what {command} prints:\n{diff}"


# A checked block: (page, its first line) -> the test that produces it.
CHECKED = {
    ("README.md", "$ make demo"): "tests/test_cli_simulate.py::test_the_readme_shows_what_make_demo_prints",
    ("docs/admin.md", "$ tiresias queue --config c.yaml"): f"{__name__}::test_admin_guide_queue_block",
    ("docs/admin.md", "$ tiresias explain 1 --config c.yaml"): f"{__name__}::test_admin_guide_explain_block",
    ("docs/admin.md", "$ tiresias explain 1 --story --config c.yaml"):
        f"{__name__}::test_admin_guide_explain_story_block",
    ("docs/admin.md", "$ tiresias shadow-diff --config c.yaml --top 2"): f"{__name__}::test_admin_guide_shadow_diff_block",
}


def test_every_block_with_output_is_checked_or_marked():
    loose = [f"{block.where}: {block.lines[0][:70]!r}" for block in all_blocks()
             if shows_output(block) and (block.page, block.lines[0]) not in CHECKED and not MARKER.search(block.above)]
    assert not loose, ("blocks that show output, with no test that produces them (CHECKED in tests/test_docs_output.py) "
                       "and no '(excerpt of: `COMMAND` ...)' or '(unchecked output of: `COMMAND` ...)' ending the paragraph "
                       "right above:\n"
                       + "\n".join(loose))


def test_every_check_names_a_block_of_the_docs_and_a_test_that_exists():
    import importlib

    for (page, first_line), node in CHECKED.items():
        find(page, first_line)
        module, _, function = node.partition("::")
        name = module.removesuffix(".py").replace("/", ".") if module.endswith(".py") else module
        assert callable(getattr(importlib.import_module(name), function, None)), f"{node} does not exist"


def test_the_output_rule_tells_commands_from_output():
    def block(*lines, info=""):
        return Block("x.md", 1, info, lines, "")

    assert not shows_output(block("make demo", "make test"))
    assert not shows_output(block("jq . f.json |", "  curl -X POST \\", "     --data-binary @- http://h/"))
    assert not shows_output(block("$ tiresias migrate --check   # changes nothing", "# a comment"))
    assert not shows_output(block("mode: enforce", info="yaml"))
    assert shows_output(block("$ tiresias queue", "JOBID  USER"))
    assert shows_output(block("mode: enforce"))  # a config without ```yaml reads as output: tag it
    assert MARKER.search("Accounting: (excerpt of: `tiresias acct -P`; the first rows)")
    assert MARKER.search("and one closing line (excerpt of: `tiresias simulate`, its last line):")
    assert not MARKER.search("(see `tiresias acct`)")
    assert not MARKER.search("(excerpt of: `tiresias acct`) and then prose that goes on")
    assert _paragraph_above(["", "text", "(excerpt of: `x`,", "cut)", "```"], 4) == "text (excerpt of: `x`, cut)"


@pytest.fixture
def utc():
    """The tables print local time: the docs show UTC."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def _run(capsys, *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_admin_guide_queue_block(queue_cluster, utc, capsys):  # noqa: F811
    config_file, _ = queue_cluster
    assert_block_is(find("docs/admin.md", "$ tiresias queue --config c.yaml"),
                    _run(capsys, "queue", "--config", config_file), "tiresias queue")


def test_admin_guide_explain_block(queue_cluster, utc, capsys):  # noqa: F811
    config_file, _ = queue_cluster
    assert_block_is(find("docs/admin.md", "$ tiresias explain 1 --config c.yaml"),
                    _run(capsys, "explain", "1", "--config", config_file), "tiresias explain 1")


def test_admin_guide_shadow_diff_block(diff_cluster, utc, capsys):  # noqa: F811
    config_file, _ = diff_cluster
    assert_block_is(find("docs/admin.md", "$ tiresias shadow-diff --config c.yaml --top 2"),
                    _run(capsys, "shadow-diff", "--config", config_file, "--top", "2"), "tiresias shadow-diff --top 2")


def test_admin_guide_explain_story_block(tmp_path, utc, capsys):
    """The chain of tests/test_executor.py's story test: job 1 preempted for job 2,
    requeued after its 10 s grace, job 2 started in its place."""
    from tests.test_executor import preemption_story

    config_file, _ = preemption_story(tmp_path)
    assert_block_is(find("docs/admin.md", "$ tiresias explain 1 --story --config c.yaml"),
                    _run(capsys, "explain", "1", "--story", "--config", str(config_file)), "tiresias explain 1 --story")


def test_the_packaged_config_is_the_built_in_defaults():
    packaged = ROOT / "packaging" / "tiresias.yaml"
    shown, made = packaged.read_text(), defaults_yaml()
    diff = "\n".join(difflib.unified_diff(shown.splitlines(), made.splitlines(), "packaging/tiresias.yaml",
                                          "the built-in defaults", lineterm=""))
    assert shown == made, f"packaging/tiresias.yaml is not the built-in defaults; regenerate it:\n" \
                          f"  {REGENERATE_DEFAULTS}\n{diff}"
    # what the file says is what it does: loading it changes nothing
    assert from_mapping(yaml.safe_load(made)) == Config()


def test_a_changed_default_shows_in_the_rendered_file(monkeypatch):
    """The check above would catch a drifted default: the rendering follows SCHEMA."""
    from controller.service.ops import config

    changed = tuple(dataclasses.replace(s, default=120.0) if s.name == "full_observe_s" else s
                    for s in config.SCHEMA)
    monkeypatch.setattr(config, "SCHEMA", changed)
    assert "\nfull_observe_s: 120.0\n" in config.defaults_yaml()


def test_no_paragraph_is_printed_twice():
    """A paragraph pasted twice (docs/simulate.md had one) reads as a different fact."""
    for page in PAGES:
        seen: dict[str, int] = {}
        for number, para in enumerate(page.read_text().split("\n\n")):
            text = " ".join(para.split())
            if len(text) > 80 and not text.startswith("```"):
                assert text not in seen, f"{page.name}: paragraph {number} repeats paragraph {seen[text]}: {text[:80]}"
                seen[text] = number
