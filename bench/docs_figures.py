"""The counts docs/ quotes from benches, rerun and compared (issue 38, item 8).

A figure in the docs comes from the code that runs, not from a copy of it: each entry
names the page, the words it quotes, the bench command that prints them and the words
that command must print. This script runs each command once (they read the public
traces in ../shared/traces, minutes in all) and fails, naming page and quote, when the
page no longer says it or the bench prints something else. Only what a run determines
is listed (rounds, preemptions, audit counts); wall times vary with the machine and are
quoted with the command and machine beside them instead.

tests/test_docs_figures.py checks, on every test run, that each quote is still on its
page, so a docs edit that drops or changes one fails at once; this script checks that
the code still prints it.

Usage: nice -n 19 python bench/docs_figures.py [--list]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Figure:
    page: str  # relative to the repository root
    quote: str  # what the page says, exactly (line breaks as spaces)
    command: tuple[str, ...]  # the bench, from the repository root
    printed: tuple[str, ...]  # what its output must contain


AUDIT = ("bench/bench_handoff_audit.py", "--repeat", "1")
FIGURES = (
    Figure("docs/simulate.md", "`preemptions that started nobody: 0 of 3683; jobs that waited behind a usable victim > 2 rounds: 0`",
           AUDIT + ("--jobs", "10000", "--kinds-only"),
           ("kinds: preemptions that started nobody: 0 of 3683; jobs that waited behind a usable victim > 2 rounds: 0",)),
    Figure("docs/simulate.md", "`1939 of 3483; 291`", AUDIT + ("--jobs", "10000", "--kinds-only", "--grace-s", "30"),
           ("kinds: preemptions that started nobody: 1939 of 3483; jobs that waited behind a usable victim > 2 rounds: 291",)),
    Figure("docs/simulate.md", "cost 262 of 655 preemptions started nobody", AUDIT + ("--jobs", "3000", "--grace-s", "30"),
           ("plain: preemptions that started nobody: 262 of 655;",)),
    Figure("docs/simulate.md", "9,313 rounds and 6,426 preemptions against 4,728 and 869",
           ("bench/bench_replay_cost.py", "--jobs", "3000"),
           ("rounds    9,313  preemptions    6,426", "rounds    4,728  preemptions      869")),
    Figure("docs/simulate.md", "45,484 rounds, 37,945 preemptions against 18,988 and 4,996",
           ("bench/bench_replay_cost.py", "--jobs", "10000"),
           ("rounds   45,484  preemptions   37,945", "rounds   18,988  preemptions    4,996")),
)


def page_text(page: str) -> str:
    """The page with its line breaks as spaces (a quote may wrap)."""
    return " ".join((ROOT / page).read_text().split())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the figures and their commands, run nothing")
    args = parser.parse_args(argv)
    failures = 0
    outputs: dict[tuple[str, ...], str] = {}
    for figure in FIGURES:
        where = f"{figure.page}: {figure.quote[:70]}"
        if args.list:
            print(f"{where}\n    python {' '.join(figure.command)}")
            continue
        if figure.quote not in page_text(figure.page):
            print(f"DRIFT {where}: no longer on the page")
            failures += 1
            continue
        if figure.command not in outputs:
            proc = subprocess.run([sys.executable, *figure.command], cwd=ROOT, capture_output=True, text=True)
            outputs[figure.command] = proc.stdout + proc.stderr
        missing = [text for text in figure.printed if text not in outputs[figure.command]]
        if missing:
            print(f"DRIFT {where}: `python {' '.join(figure.command)}` no longer prints {missing[0]!r}")
            failures += 1
        else:
            print(f"ok    {where}")
    if not args.list:
        print(f"{len(FIGURES) - failures} of {len(FIGURES)} figures as the docs quote them")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
