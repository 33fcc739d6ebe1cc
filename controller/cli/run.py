"""Run the controller next to slurmctld: observe, plan and (in enforce mode) act.

Modes: observe (accounts only), shadow (logs what it would do, changes nothing in
Slurm), enforce. Settings come from the YAML config file; flags override.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from controller.cli import argtypes
from controller.service.ops.config import DEFAULT_PATH, load
from controller.service.acting.executor import MODES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help=f"YAML settings (default {DEFAULT_PATH} if present)")
    p.add_argument("--mode", choices=MODES)
    p.add_argument("--database-url", metavar="URL")
    p.add_argument("--cluster", metavar="NAME")
    p.add_argument("--partitions", metavar="P1,P2", help="partitions to manage (default: all)")
    p.add_argument("--interval-s", type=argtypes.seconds)
    p.add_argument("--poll-s", type=argtypes.seconds)
    p.add_argument("--policy")
    p.add_argument("--metrics-port", type=argtypes.port)
    p.add_argument("--once", action="store_true", help="run a single round and exit")


def overrides_from(args) -> dict:
    return {"mode": args.mode, "database_url": args.database_url, "cluster": args.cluster,
            "partitions": args.partitions.split(",") if args.partitions else None,
            "interval_s": args.interval_s, "poll_s": getattr(args, "poll_s", None), "policy": args.policy,
            "metrics_port": getattr(args, "metrics_port", None)}


def run(args) -> int:
    """Exit 0; 2 for a bad config or flag (one line, from main); 1 with one logged line
    when the store is unusable, or, with --once, when the round could not run; 1 in
    enforce mode when the preflight finds a wrong slurm.conf setting (one line each),
    at start or, when slurmctld did not answer then, once it does (until then enforce
    acts on nothing)."""
    from controller.service.state.store import StoreError

    config = load(args.config, overrides_from(args))
    from controller.service.ops import logs

    logs.setup(config.log_format, config.log_level, sys.stderr)
    from controller.service.state.secrets import install_log_redaction

    install_log_redaction(config.secrets())  # no log line carries the store password, whatever logs it
    try:
        return _run(args, config)
    except StoreError as err:  # cannot open, create or read the store: nothing can be accounted
        logging.getLogger("tiresias").error("store unusable, controller stopped: %s", err)
        return 1


def _run(args, config) -> int:
    from controller.core.model import InputError
    from controller.service.acting.backend import BackendUnavailable
    from controller.checkpoint import REQUEUE_EXIT_CODE
    from controller.service.ops import preflight
    from controller.service.round.daemon import Controller, PreflightRefused
    from controller.service.acting.lease import single_controller
    from controller.service.state.store import Store, StoreError
    from slurm_plugin.backend import SlurmBackend

    store = Store(config.store_url(), stalled_tx_s=config.lease_ttl())  # a stopped leader's row locks end with its lease
    held = single_controller(store, config)  # noqa: F841 - SQLite: the flock, held until this process ends; PostgreSQL: the lease
    backend = SlurmBackend(partitions=list(config.partitions) or None, command_timeout_s=config.command_timeout_s)
    checked = preflight.at_start(config.mode, backend, config.site_factor_band, REQUEUE_EXIT_CODE,
                                 logging.getLogger("tiresias"), config.preemption, config.preempt_qos,
                                 config.partition_moves)
    if checked is False:
        return 1
    pending = None if checked else preflight.Pending(config.mode, backend, config.site_factor_band,
                                                     REQUEUE_EXIT_CODE, logging.getLogger("tiresias"),
                                                     config.preemption, config.preempt_qos,
                                                     config.partition_moves)
    metrics = None
    if config.metrics_port:
        from controller.service.ops.metrics import Metrics

        metrics = Metrics(mode=config.mode)
        try:
            metrics.serve(config.metrics_port, addr=config.metrics_address)
        except OSError as err:
            raise InputError(f"metrics_port {config.metrics_port}: cannot listen on {config.metrics_address} "
                             f"({err.strerror or err})") from None
    controller = Controller(config, backend, store, metrics=metrics, preflight=pending)
    logging.getLogger("tiresias").info("controller starting: mode %s, policy %s, cluster %s", config.mode,
                                       config.policy, config.cluster)
    if args.once:
        try:
            if not controller.note_mode():  # a switch from enforce restores first, as run_forever does
                return 1
            report = controller.run_round()
        except BackendUnavailable as err:
            logging.getLogger("tiresias").error("round not run: the cluster manager is unavailable: %s", err)
            return 1
        except PreflightRefused as err:
            logging.getLogger("tiresias").error("round not run: %s", err)
            return 1
        except StoreError as err:
            logging.getLogger("tiresias").error("round not run: %s", err)
            return 1
        for entry in report.applied:
            print(f"{entry['decision_id']} {entry['kind']} job {entry['job_id']}: {entry['reason']}"
                  f"{' [' + entry['detail'] + ']' if entry.get('detail') else ''}")
        return 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    controller.run_forever(stop)
    return 1 if controller.preflight_refused else 0
