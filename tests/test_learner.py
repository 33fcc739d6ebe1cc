"""Genetic programming of the priority function, and the `learned` policy."""
import pytest

from controller.core.expr import PUBLISHED_EXAMPLE, parse_expression
from controller.partitions.learner import LearnConfig, learn, make_instances, score_expression, srsf_values
from controller.partitions.mct import allocate_mct
from controller.core.model import InputError, JobSpec, JobState
from controller.core.policies.base import PolicyContext
from controller.core.policies.learned import Learned, job_terms
from controller.partitions.priority_file import load_expression_file


def from_file(path):
    return Learned(load_expression_file(path))

TINY = LearnConfig(population=10, generations=3, training=3, validation=2, subset=2, seed=11,
                   partitions=(2, 3), nodes=(3, 6), arrivals_per_node=6)


def test_tiny_run_is_deterministic_and_not_worse_than_srsf():
    a = learn(TINY)
    b = learn(TINY)
    assert a.expression == b.expression
    assert a.validation_score == b.validation_score and a.history == b.history
    text = a.expression.to_text()
    assert parse_expression(text) == a.expression
    assert a.expression.depth() <= TINY.max_depth
    # score = objective / SRSF objective on all training instances; SRSF itself is 1
    training = make_instances(TINY.training, 0, TINY)
    assert score_expression(parse_expression("g * d"), training,
                            [allocate_mct(p, srsf_values(p)).value for p in training]) == pytest.approx(1.0)
    assert a.training_score <= 1.0 + 0.05


def test_config_validation():
    with pytest.raises(InputError, match="population"):
        LearnConfig(population=1)
    with pytest.raises(InputError, match="mutation rate"):
        LearnConfig(mutation_rate=1.5)
    pub = LearnConfig.published()
    assert (pub.population, pub.generations, pub.max_depth, pub.training) == (512, 100, 7, 50)


def job(jid, gpus, submit, duration=None, executed=0.0, progress=0.0, u=1, index=0):
    return JobState(JobSpec(jid, gpus, submit, duration_s=duration, user_priority=u), index=index,
                    executed_s=executed, progress_s=progress)


def test_learned_policy_terms_and_order(tmp_path):
    a = job("a", 4, 0.0, duration=100.0, executed=10.0, progress=10.0, u=2, index=0)
    b = job("b", 1, 5.0, duration=None, executed=30.0, index=1)
    assert job_terms(a, 50.0) == (90.0, 40.0, 2.0, 4.0)
    assert job_terms(b, 50.0) == (30.0, 15.0, 1.0, 1.0)  # unknown duration: executed time as proxy
    policy = Learned("g * d")
    ctx = PolicyContext(now_s=50.0)
    policy.prepare([a, b], ctx)
    assert sorted([a, b], key=lambda j: policy.sort_key(j, ctx)) == [b, a]
    assert policy.sort_key(a, PolicyContext(now_s=50.0)) == (360.0, 0)  # without prepare
    f = tmp_path / "p.txt"
    f.write_text("# comment\nq\n")
    assert from_file(f).sort_key(a, ctx)[0] == 40.0
    assert Learned().expression == parse_expression(PUBLISHED_EXAMPLE)
    assert Learned("g / 0").sort_key(a, ctx)[0] == 4.0
    f.write_text("open(f)\n")
    with pytest.raises(InputError, match=r"p.txt:1: calls are not allowed"):
        from_file(f)


def test_order_memo_scores_equal_and_shares_equivalent_orders():
    config = LearnConfig(partitions=(2, 3), nodes=(3, 6), arrivals_per_node=6, replay="none", backlog_load=1.5)
    problems = make_instances(2, 5, config)
    assert all(p.running == [] for p in problems)
    bases = [allocate_mct(p, srsf_values(p)).value for p in problems]
    memo: dict = {}
    for text in ("g * d", "d * g * 2", "d / u + q"):
        expr = parse_expression(text)
        assert score_expression(expr, problems, bases, memo=memo) == score_expression(expr, problems, bases)
    assert len(memo) == 4  # "d * g * 2" orders every job as "g * d" does: no new allocation
    with pytest.raises(InputError, match="backlog load"):
        LearnConfig(backlog_load=1.0)  # needs replay "none"


def test_warm_start_population_with_parsed_powers():
    from dataclasses import replace

    base = replace(TINY, population=6, generations=3, mutation_rate=1.0,  # every child a subtree mutation
                   start_from=(PUBLISHED_EXAMPLE, "g * d"))
    result = learn(base)
    assert learn(base).expression == result.expression  # deterministic
    # generation 0 holds the start expressions: its champion is one of them or a random tree no worse
    assert result.history[0]["subset_score"] <= 1.0 + 1e-12  # SRSF itself scores 1 on any subset
    with pytest.raises(InputError, match="deeper"):
        learn(replace(TINY, max_depth=3, init_depth=(2, 3), start_from=(PUBLISHED_EXAMPLE,)))


def test_shipped_learned_priority_file_parses_and_records_its_command():
    import argparse
    import shlex
    from pathlib import Path

    from controller.cli import learn as cmd_learn
    from controller.partitions.priority_file import load_expression_file

    path = Path(__file__).resolve().parents[1] / "examples" / "learned_priority.txt"
    expr = load_expression_file(path)
    assert {"d", "q", "u", "g"} >= set(expr.to_text().replace("(", " ").replace(")", " ").split()) - set("+-*/")
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "tiresias learn" in line)
    command = " ".join(line.lstrip("# ").rstrip("\\ ") for line in lines[start:start + 3])
    argv = shlex.split(command)[2:]  # drop "tiresias learn"
    parser = argparse.ArgumentParser()
    cmd_learn.add_arguments(parser)
    config = cmd_learn.config_from_args(parser.parse_args(argv))
    assert (config.population, config.generations, config.backlog_load, config.seed) == (48, 15, 1.5, 7)
    assert "g * d" in config.start_from and PUBLISHED_EXAMPLE in config.start_from
