"""Slurm's --constraint grammar (slurm_plugin.grammar.parse_constraint): the plan's
model expresses a single feature and a plain AND of features (a node fits when it has
all of them); an OR, a matching OR in brackets, a node count and parentheses are read
as what they are and named, so the job is never a reason to preempt; a value that is
not the grammar is a one-line error naming the value, and the Slurm adapter turns it
into a job the plan leaves to Slurm, never a lost record (issue 28, item 2)."""
import copy
import json
from pathlib import Path

import pytest

from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import CommandResult
from slurm_plugin.grammar import SlurmParseError, parse_constraint
from slurm_plugin.parse_jobs import parse_squeue_json

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "slurm"


@pytest.mark.parametrize("text, features", [
    ("a100", ("a100",)),
    ("a100&ib", ("a100", "ib")),
    ("a100 & ib & a100", ("a100", "ib")),  # spaces allowed, a repeat counts once
    ("cpu-gen.3&mem_1tb", ("cpu-gen.3", "mem_1tb")),
    ("", ()),
])
def test_plain_and_of_features_is_expressible(text, features):
    constraint = parse_constraint(text)
    assert constraint.expressible and constraint.features == features and constraint.form == ""


@pytest.mark.parametrize("text, form", [
    ("a100|v100", "an OR (|)"),
    ("ib&a100|v100", "an OR (|)"),
    ("[rack1|rack2]", "a matching OR ([...])"),
    ("[rack1*2&rack2*4]", "a matching OR ([...])"),
    ("a100*2", "a node count (*N)"),
    ("(a100&ib)", "parentheses"),
    ("ib&(a100|v100)", "parentheses"),
])
def test_or_brackets_counts_and_parentheses_are_inexpressible(text, form):
    constraint = parse_constraint(text)
    assert not constraint.expressible and constraint.form == form and constraint.features == ()


@pytest.mark.parametrize("text, says", [
    ("a100&", "an operator without a feature after it"),
    ("&a100", "unexpected '&' where a feature belongs"),
    ("a100&&ib", "unexpected '&' where a feature belongs"),
    ("[a100|v100", "unbalanced '['"),
    ("(a100", "unbalanced '('"),
    ("a100)", "unexpected ')'"),
    ("a100*x", "a node count after '*' must be a whole number >= 1"),
    ("a100*0", "a node count after '*' must be a whole number >= 1"),
    ("a100 ib", "unexpected 'ib'"),
    ("a100,ib", "unexpected character ','"),
    ("a100;rm", "unexpected character ';'"),
])
def test_grammar_errors_are_one_line_naming_the_value(text, says):
    with pytest.raises(SlurmParseError) as err:
        parse_constraint(text)
    message = str(err.value)
    assert says in message and f"'{text}'" in message and "\n" not in message


def _pending_record(version, features):
    doc = json.loads((FIXTURES / version / "squeue.json").read_text())
    record = copy.deepcopy(next(j for j in doc["jobs"] if j["job_id"] == 4))
    record["features"] = features
    return {"jobs": [record]}


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_recorded_job_with_a_broken_constraint_parses_and_is_left_to_slurm(version, caplog):
    [job] = parse_squeue_json(_pending_record(version, "a100&|ib"))  # the record is not lost
    assert job.constraint.text == "a100&|ib" and job.constraint.form.startswith("unreadable (features:")
    outputs = {"squeue": json.dumps(_pending_record(version, "a100&|ib")),
               "sinfo": (FIXTURES / version / "sinfo.json").read_text()}
    backend = SlurmBackend(runner=lambda argv, timeout_s, env: CommandResult(0, outputs.get(argv[0], ""), ""))
    [seen] = backend.observe().jobs
    assert seen.features == () and "--constraint=a100&|ib, unreadable" in seen.unmodelled
    assert any(r.getMessage().startswith('job 4: --constraint "a100&|ib" is not Slurm\'s grammar')
               for r in caplog.records)


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_recorded_job_constraint_reads_into_the_observed_job(version):
    outputs = {"squeue": json.dumps(_pending_record(version, "a100&ib")),
               "sinfo": (FIXTURES / version / "sinfo.json").read_text()}
    backend = SlurmBackend(runner=lambda argv, timeout_s, env: CommandResult(0, outputs.get(argv[0], ""), ""))
    [seen] = backend.observe().jobs
    assert (seen.features, seen.unmodelled) == (("a100", "ib"), "")
    outputs["squeue"] = json.dumps(_pending_record(version, "a100|v100"))
    [seen] = backend.observe().jobs
    assert seen.features == () and seen.unmodelled.startswith("--constraint=a100|v100 (an OR (|)")
