"""Apply TIRESIAS_INSTANCE_CONF_EXTRA to an isolated instance's slurm.conf (stdin -> stdout).

Used by containers/slurm-cluster.sh so the conformance tests (tests/test_conformance_*.py)
can run a site's settings on a real slurmctld. The value is items separated by ';' or
newlines; '{inst}' stands for the instance's name (its nodes are {inst}g1..{inst}g4):

  KEY=VALUE                       a global line: replaces the line setting KEY, else appended
  NodeName=ALL|NODE OPT=VAL ...   sets OPT on every NodeName line, or on NODE's
  PartitionName=NAME OPT=VAL ...  sets OPT on that partition's line; a new partition when
                                  none is called NAME (give it Nodes=)

A malformed item is refused in one line naming it (exit 2): a test must never run on a
configuration other than the one it names.
"""
from __future__ import annotations

import re
import sys

WORD = re.compile(r"^([A-Za-z][A-Za-z0-9]*)=(\S+)$")


def _words(line: str) -> list[tuple[str, str]]:
    out = []
    for word in line.split():
        match = WORD.match(word)
        if not match:
            raise ValueError(word)
        out.append((match.group(1), match.group(2)))
    return out


def _set_options(line: str, options: list[tuple[str, str]]) -> str:
    words = line.split()
    for key, value in options:
        for i, word in enumerate(words):
            if word.split("=", 1)[0].lower() == key.lower():
                words[i] = f"{key}={value}"
                break
        else:
            words.append(f"{key}={value}")
    return " ".join(words)


def apply(conf: str, extra: str, inst: str) -> str:
    lines = conf.splitlines()
    for item in re.split(r"[;\n]", extra.replace("{inst}", inst)):
        item = item.strip()
        if not item:
            continue
        try:
            words = _words(item)
        except ValueError as bad:
            raise SystemExit(f"TIRESIAS_INSTANCE_CONF_EXTRA: {item!r}: {str(bad)!r} is not KEY=VALUE") from None
        (head, name), options = words[0], words[1:]
        if head.lower() in ("nodename", "partitionname"):
            if not options:
                raise SystemExit(f"TIRESIAS_INSTANCE_CONF_EXTRA: {item!r}: no OPT=VALUE to set")
            prefix = head.lower() + "="
            hits = [i for i, line in enumerate(lines) if line.lower().startswith(prefix)
                    and (name.upper() == "ALL" and head.lower() == "nodename"
                         or line.split()[0].split("=", 1)[1] == name)]
            # (slurm-cluster.sh first checks the items against no conf at all: the form alone)
            if not hits and head.lower() == "nodename" and any(line.lower().startswith(prefix) for line in lines):
                raise SystemExit(f"TIRESIAS_INSTANCE_CONF_EXTRA: {item!r}: no node {name!r}")
            if not hits:
                lines.append(item)
            for i in hits:
                lines[i] = _set_options(lines[i], options)
            continue
        if options:
            raise SystemExit(f"TIRESIAS_INSTANCE_CONF_EXTRA: {item!r}: a global setting is one KEY=VALUE")
        key = head.lower() + "="
        hits = [i for i, line in enumerate(lines) if line.lower().startswith(key)]
        if hits:
            lines[hits[0]] = item
            for i in reversed(hits[1:]):
                del lines[i]
        else:
            # before the first NodeName line: slurm.conf reads globals before nodes
            first_node = next((i for i, line in enumerate(lines) if line.lower().startswith("nodename=")),
                              len(lines))
            lines.insert(first_node, item)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(apply(sys.stdin.read(), sys.argv[1] if len(sys.argv) > 1 else "",
                           sys.argv[2] if len(sys.argv) > 2 else ""))
