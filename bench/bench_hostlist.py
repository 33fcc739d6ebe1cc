"""Slurm hostlist expansion: slurm_plugin.grammar.expand_hostlist against python-hostlist.

Prints microseconds per call for typical hostlists (a job's nodes, a partition's
nodes) and how long refusing a hostile one takes. python-hostlist is only compared
when it is installed (`pip install python-hostlist`; not a dependency: GPL-2.0+).

    python bench/bench_hostlist.py
"""
from __future__ import annotations

import time

from slurm_plugin.grammar import SlurmParseError, expand_hostlist

CASES = ["gpu[001-004]", "gpu[1-3,5],login01", "rack[1-8]-n[01-32]", "node[0001-2048]"]
HOSTILE = ["gpu[1-99999999]", "a[1-1000]b[1-1000]"]


def per_call_us(function, text: str) -> float:
    """Median of 5 timings of a loop, in microseconds per call."""
    loops = max(1, 20000 // max(1, len(expand_hostlist(text))))
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(loops):
            function(text)
        timings.append((time.perf_counter() - started) / loops * 1e6)
    return sorted(timings)[2]


def main() -> None:
    try:
        import hostlist

        def library(text: str) -> list[str]:
            return hostlist.expand_hostlist(text, allow_duplicates=True)
    except ImportError:
        library = None
    print(f"{'hostlist':24s} {'names':>6s} {'ours us':>9s} {'python-hostlist us':>19s} {'ratio':>6s}")
    for text in CASES:
        ours = per_call_us(expand_hostlist, text)
        if library is not None:
            assert library(text) == expand_hostlist(text), text
            theirs = per_call_us(library, text)
            print(f"{text:24s} {len(expand_hostlist(text)):6d} {ours:9.1f} {theirs:19.1f} {ours / theirs:6.2f}")
        else:
            print(f"{text:24s} {len(expand_hostlist(text)):6d} {ours:9.1f} {'(not installed)':>19s}")
    for text in HOSTILE:
        started = time.perf_counter()
        try:
            expand_hostlist(text)
            outcome = "expanded (!)"
        except SlurmParseError as err:
            outcome = str(err)
        print(f"{text}: refused in {1e6 * (time.perf_counter() - started):.0f} us: {outcome}")


if __name__ == "__main__":
    main()
