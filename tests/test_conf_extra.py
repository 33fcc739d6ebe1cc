"""containers/conf_extra.py: a site's slurm.conf settings over an isolated instance's
generated lines (TIRESIAS_INSTANCE_CONF_EXTRA), the way the conformance suite runs them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "containers"))
from conf_extra import apply  # noqa: E402

CONF = """SelectTypeParameters=CR_Core
NodeName=cfg1 CPUs=8 Gres=gpu:4
NodeName=cfg2 CPUs=8 Gres=gpu:4
PartitionName=batch Nodes=cfg[1-2] Default=YES
"""


def test_a_global_setting_replaces_its_line_or_goes_before_the_nodes():
    out = apply(CONF, "SelectTypeParameters=CR_Core_Memory; DefCpuPerGPU=2", "cf").splitlines()
    assert out[0] == "SelectTypeParameters=CR_Core_Memory"
    assert out.index("DefCpuPerGPU=2") < out.index(next(l for l in out if l.startswith("NodeName=")))
    assert sum(l.startswith("SelectTypeParameters=") for l in out) == 1


def test_node_and_partition_options_are_set_on_their_lines():
    out = apply(CONF, "NodeName=ALL Weight=5\nNodeName=cfg2 Weight=9 Features=x\n"
                      "PartitionName=batch OverSubscribe=EXCLUSIVE; PartitionName=p2 Nodes={inst}g[1-2]", "cf")
    assert "NodeName=cfg1 CPUs=8 Gres=gpu:4 Weight=5" in out
    assert "NodeName=cfg2 CPUs=8 Gres=gpu:4 Weight=9 Features=x" in out
    assert "PartitionName=batch Nodes=cfg[1-2] Default=YES OverSubscribe=EXCLUSIVE" in out
    assert "PartitionName=p2 Nodes=cfg[1-2]" in out


@pytest.mark.parametrize("extra, says", [("foo bar", "'foo' is not KEY=VALUE"),
                                         ("NodeName=nope Weight=1", "no node 'nope'"),
                                         ("PartitionName=batch", "no OPT=VALUE"),
                                         ("DefCpuPerGPU=2 MaxMemPerCPU=1", "one KEY=VALUE")])
def test_a_malformed_item_is_refused_in_one_line_naming_it(extra, says):
    script = Path(__file__).resolve().parent.parent / "containers" / "conf_extra.py"
    proc = subprocess.run([sys.executable, str(script), extra, "cf"], input=CONF, capture_output=True, text=True)
    assert proc.returncode != 0 and proc.stdout == ""
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_named_node_passes_the_check_of_the_form_alone_and_is_refused_where_the_conf_lacks_it():
    """slurm-cluster.sh checks the items against an empty conf before it writes one: a
    NodeName=NODE item must pass there, and still be refused against nodes without NODE."""
    assert "NodeName=x1g3 Weight=10" in apply("", "NodeName={inst}g3 Weight=10", "x1")
    with pytest.raises(SystemExit, match="no node 'x1g3'"):
        apply("NodeName=x1g1 CPUs=8\n", "NodeName={inst}g3 Weight=10", "x1")
