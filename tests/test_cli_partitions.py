"""`tiresias learn` and `tiresias simulate-partitions` from the command line."""
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def tiresias(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "controller.cli.main", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


SMALL = ["--partitions-min", 2, "--partitions-max", 3, "--nodes-min", 3, "--nodes-max", 6,
         "--arrivals-per-node", 6]


def test_learn_then_simulate_partitions(tmp_path):
    out = tmp_path / "prio.txt"
    proc = tiresias("learn", "--out", out, "--instances", 2, "--validation", 1, "--population", 6,
                    "--generations", 2, "--subset", 2, "--start-from", "published", "--start-from", "g * d",
                    "--backlog-load", "1.5", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "learned:" in proc.stdout and "validation score" in proc.stdout
    assert "backlog load 1.5" in out.read_text().splitlines()[0]
    proc = tiresias("simulate-partitions", "--instances", 2, "--priority-file", out, "--population", 6,
                    "--generations", 3, "--json", *SMALL)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert len(data["instances"]) == 2
    assert set(data["rank_counts"]) == {"MCT+fifo", "MCT+srsf", "MCT+bfd", "MCT+learned", "EVO+learned"}
    assert all(sum(v) == 2 for v in data["rank_counts"].values())


def test_partitions_file_and_trace(tmp_path):
    parts = tmp_path / "parts.csv"
    parts.write_text("name,nodes,gpus_per_node\na,2,8\nb,1,4\n")
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,num_gpus,submit_time_s,duration_s,partition\n"
                     "1,8,0,100,a\n2,8,1,100,a\n3,4,2,50,a\n4,16,3,10,a\n5,2,4,30,b\n")
    proc = tiresias("simulate-partitions", "--partitions-file", parts, "--trace", trace, "--generations", 2,
                    "--population", 4)
    assert proc.returncode == 0, proc.stderr
    assert "EVO+learned" in proc.stdout
    yaml_parts = tmp_path / "parts.yaml"
    yaml_parts.write_text("partitions:\n  - {name: a, nodes: 2, gpus_per_node: 8}\n  - {name: b, nodes: 1, gpus_per_node: 4}\n")
    proc = tiresias("simulate-partitions", "--partitions-file", yaml_parts, "--trace", trace, "--generations", 1,
                    "--population", 2, "--json")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("content, name, message", [
    ("name,nodes\na,2\n", "p.csv", "missing column 'gpus_per_node'"),
    ("name,nodes,gpus_per_node\na,,8\n", "p.csv", "p.csv:2: missing field 'nodes'"),
    ("name,nodes,gpus_per_node\na,x,8\n", "p.csv", "nodes value 'x' is not a positive integer"),
    ("- {name: a, nodes: 2}\n", "p.yaml", "partition 1: missing field 'gpus_per_node'"),
    ("- [1, 2\n", "p.yaml", "not valid YAML"),
    ("name,nodes,gpus_per_node\nz,2,8\n", "p.csv", "partition 'a' is not in the partitions file"),
])
def test_bad_partitions_file(tmp_path, content, name, message):
    parts = tmp_path / name
    parts.write_text(content)
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,num_gpus,submit_time_s,duration_s,partition\n1,8,0,100,a\n")
    proc = tiresias("simulate-partitions", "--partitions-file", parts, "--trace", trace)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("args, message", [
    (["simulate-partitions", "--priority-file", "{tmp}/bad.txt"], "bad.txt:2: unknown name 'os' at column 5"),
    (["simulate-partitions", "--priority-file", "{tmp}/missing.txt"], "cannot read"),
    (["simulate-partitions", "--trace", "x.csv"], "--partitions-file and --trace go together"),
    (["simulate-partitions", "--instances", "0"], "must be a positive integer"),
    (["simulate-partitions", "--weights", "1,2"], "three comma-separated weights"),
    (["simulate-partitions", "--partitions-min", "5", "--partitions-max", "2"], "larger than"),
    (["learn"], "--out"),
    (["learn", "--out", "{tmp}/nodir/x.txt", "--generations", "0"], "does not exist"),
    (["learn", "--out", "{tmp}/x.txt", "--mutation-rate", "2"], "within 0..1"),
    (["learn", "--out", "{tmp}/x.txt", "--start-from", "d + __import__"], "unknown name"),
    (["learn", "--out", "{tmp}/x.txt", "--start-from", "{tmp}/bad.txt"], "bad.txt:2: unknown name 'os'"),
    (["learn", "--out", "{tmp}/x.txt", "--backlog-load", "0"], "--backlog-load"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    (tmp_path / "bad.txt").write_text("# learned\nd + os\n")
    proc = tiresias(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
