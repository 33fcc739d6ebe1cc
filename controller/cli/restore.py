"""Reset every lever the controller set on Slurm jobs, from what its store recorded:
SiteFactor back to 0, the ReqNodeList pins it wrote cleared (a job's own --nodelist
is kept), its [tiresias: ...] AdminComment line removed (the site's text is kept).
Prints one line per job and lever, then the totals.

An explicit admin action: it acts on Slurm whatever mode the config names. Safe to
run again (a second run changes nothing). A pin on a job that runs now is kept and
reported (changing it would resize the job); run restore again once it waits.
Exit 0 when everything was reset, 1 when Slurm did not answer or a lever failed.
"""
from __future__ import annotations

import argparse
import os
import sys

from controller.cli import queue as cmd_queue


def add_arguments(p: argparse.ArgumentParser) -> None:
    cmd_queue.add_source_arguments(p)


def run(args) -> int:
    from controller.service.acting.backend import BackendUnavailable
    from controller.service.ops.config import load
    from controller.service.acting.executor import acts
    from controller.service.acting.restore import restore
    from controller.service.state.store import Store, StoreError

    config = load(args.config, {"database_url": args.database_url, "cluster": args.cluster})
    path = cmd_queue.sqlite_path(config.database_url)
    if path is not None and not os.path.exists(path):
        # Nothing recorded to read: only AdminComment lines (ours by their marker) are found.
        print(f"tiresias restore: note: no store at {path}: no SiteFactor or pin known; removing the "
              "controller's AdminComment lines only", file=sys.stderr)
        store = Store("sqlite://")
    else:
        try:
            store = Store(config.database_url)
        except StoreError as err:
            print(f"tiresias restore: error: {err}", file=sys.stderr)
            return 1
    with store:
        try:
            report = restore(cmd_queue.backend_for(config), store, config.cluster)
        except BackendUnavailable as err:
            print(f"tiresias restore: Slurm did not answer: {err}; what was not reset stays recorded, "
                  "run it again", file=sys.stderr)
            return 1
        for line in report.lines():
            print(line)
        if acts(store.last_mode(config.cluster)):
            print(f"tiresias restore: note: cluster {config.cluster}'s controller last started in enforce: while it "
                  "runs in enforce its next round sets the levers again; switch it to shadow instead (its start "
                  "then restores by itself)", file=sys.stderr)
    return 1 if report.count("failed") else 0
