"""A containerized demo cluster: slurmctld, two slurmd with 4 fake GPUs each, and
the controller in shadow mode. Needs a Docker engine and the Docker SDK for
Python (pip install 'tiresias-slurm[docker]').

  up      build the images and start the containers (idempotent)
  down    remove the containers, network and volumes
  status  list the demo containers; exit 0 when all four run
"""
from __future__ import annotations

import argparse
import sys

from controller.cli import docker_demo as demo_cluster


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("up", "down", "status"), help="what to do")


def run(args) -> int:
    try:
        client = demo_cluster.connect()
    except demo_cluster.DemoError as err:
        print(f"tiresias demo-cluster: {err}", file=sys.stderr)
        return 1
    if args.action == "up":
        demo_cluster.up(client)
        return 0
    if args.action == "down":
        demo_cluster.down(client)
        return 0
    rows = demo_cluster.status(client)
    if not rows:
        print("demo cluster is not running (tiresias demo-cluster up)")
        return 1
    for name, state in rows:
        print(f"{name:<28} {state}")
    return 0 if len(rows) == len(demo_cluster.SERVICES) and all(s == "running" for _, s in rows) else 1
