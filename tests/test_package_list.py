"""pyproject.toml lists every Python package of the checkout: a package left out is
missing from an installed controller (seen: `No module named 'controller.core.levers'`
from the documented install, after the lever families moved into a sub-package), and only
the real-Slurm install test would have noticed."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_of_the_checkout_is_listed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts) for top in ("controller", "slurm_plugin")
             for init in (ROOT / top).rglob("__init__.py")}
    assert found - listed == set(), f"packages missing from pyproject.toml: {sorted(found - listed)}"
