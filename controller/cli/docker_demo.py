"""A containerized demo: slurmctld, two slurmd (4 fake GPUs each) and the
controller, driven through the Docker SDK (the optional ``docker`` package).

The same cluster as containers/docker-compose.yml, without needing the compose
CLI: images are built from the repository, containers join one network and share
the munge key through a volume. Everything it creates carries the label
``org.tiresias.demo=1``; ``down`` removes exactly that.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
LABEL = "org.tiresias.demo"
LABELS = {LABEL: "1"}
NETWORK = "tiresias-demo"
VOLUMES = {"munge": "tiresias-demo-munge", "ctld": "tiresias-demo-ctld-state", "state": "tiresias-demo-state"}
IMAGES = {"slurm": ("tiresias-demo-slurm:latest", "containers/Dockerfile.slurm"),
          "controller": ("tiresias-demo-controller:latest", "containers/Dockerfile.controller")}


@dataclass(frozen=True)
class Service:
    name: str  # container name
    hostname: str
    image: str  # key of IMAGES
    role: str  # entrypoint argument
    volumes: tuple[tuple[str, str], ...]  # (volume key, mount point)


SERVICES = (
    Service("tiresias-demo-slurmctld", "slurmctld", "slurm", "slurmctld",
            (("munge", "/etc/munge"), ("ctld", "/var/spool/slurmctld"))),
    Service("tiresias-demo-slurmd1", "gpu1", "slurm", "slurmd", (("munge", "/etc/munge"),)),
    Service("tiresias-demo-slurmd2", "gpu2", "slurm", "slurmd", (("munge", "/etc/munge"),)),
    Service("tiresias-demo-controller", "tiresias", "controller", "controller",
            (("munge", "/etc/munge"), ("state", "/var/lib/tiresias"))),
)


class DemoError(RuntimeError):
    """The demo cannot run here; the message is one line saying what to do."""


def connect() -> Any:
    """A docker client whose engine answered a ping; DemoError otherwise."""
    try:
        import docker
    except ImportError:
        raise DemoError("the Docker SDK for Python is not installed: pip install 'tiresias-slurm[docker]' "
                        "(or: pip install docker)") from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # docker.errors.DockerException and connection errors alike
        text = " ".join(str(exc).split())
        if len(text) > 200:
            text = text[:197] + "..."
        raise DemoError(f"no Docker engine reachable (DOCKER_HOST or /var/run/docker.sock): {text}") from None
    return client


def _containers(client) -> list:
    return client.containers.list(all=True, filters={"label": f"{LABEL}=1"})


def up(client, log=print) -> None:
    """Build the images, create network and volumes, start the containers (idempotent)."""
    for tag, dockerfile in IMAGES.values():
        log(f"building {tag} from {dockerfile} ...")
        client.images.build(path=str(REPO_ROOT), dockerfile=dockerfile, tag=tag, labels=LABELS, rm=True)
    if not client.networks.list(names=[NETWORK]):
        client.networks.create(NETWORK, driver="bridge", labels=LABELS)
    for name in VOLUMES.values():
        if not client.volumes.list(filters={"name": name}):
            client.volumes.create(name, labels=LABELS)
    existing = {c.name: c for c in _containers(client)}
    for service in SERVICES:
        container = existing.get(service.name)
        if container is not None:
            if container.status != "running":
                container.start()
            log(f"{service.name}: running")
            continue
        client.containers.run(
            IMAGES[service.image][0], [service.role], name=service.name, hostname=service.hostname,
            network=NETWORK, detach=True, labels=LABELS,
            volumes={VOLUMES[key]: {"bind": mount, "mode": "rw"} for key, mount in service.volumes})
        log(f"{service.name}: started")
    log("demo cluster up: docker exec -it tiresias-demo-controller tiresias queue")


def down(client, log=print) -> None:
    """Remove the demo's containers, network and volumes (images are kept)."""
    for container in _containers(client):
        container.remove(force=True)
        log(f"{container.name}: removed")
    for network in client.networks.list(names=[NETWORK]):
        network.remove()
    for name in VOLUMES.values():
        for volume in client.volumes.list(filters={"name": name}):
            volume.remove(force=True)
    log("demo cluster down")


def status(client) -> list[tuple[str, str]]:
    """(container name, status) of every demo container; empty when none exist."""
    return sorted((c.name, c.status) for c in _containers(client))
