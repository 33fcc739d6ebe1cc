"""Print the effective settings: every key with its value and what it does.

Values come from the YAML file (--config, or /etc/tiresias/tiresias.yaml when
present) over the built-in defaults. SOURCE says which. With --yaml the output
is a config file: paste it, edit it, load it. A bad file is one line naming the
key and the value, exit 2.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from controller.service.ops.config import DEFAULT_PATH, SCHEMA, effective, load, yaml_value
from controller.cli.reports import emit, format_plain_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help=f"YAML settings (default {DEFAULT_PATH} if present)")
    p.add_argument("--yaml", action="store_true", help="print a YAML config file with each doc as a comment")


def _file_keys(path: Path) -> set[str]:
    import yaml

    if not path.exists():
        return set()
    data = yaml.safe_load(path.read_text()) or {}
    return set(data) if isinstance(data, dict) else set()


def run(args) -> int:
    config = load(args.config)  # InputError (exit 2) names the bad key and value
    path = Path(args.config or DEFAULT_PATH)
    from_file = _file_keys(path)
    origin = f"# effective settings: {path} over the defaults" if path.exists() else \
        f"# effective settings: built-in defaults ({path} does not exist)"
    choices = {s.name: s.choices for s in SCHEMA}
    if args.yaml:
        print(origin)
        for key, value, doc in effective(config):
            extra = f" (one of: {', '.join(choices[key])})" if choices[key] else ""
            print(f"\n# {doc}{extra}\n{key}: {yaml_value(value)}")
        return 0
    print(origin)
    rows = [[key, yaml_value(value), "file" if key in from_file else "default", doc]
            for key, value, doc in effective(config)]
    emit(format_plain_table(["KEY", "VALUE", "SOURCE", "DOC"], rows))
    return 0
