"""Genetic programming of the priority function (spec/multi-partition.md, offline).

Trees over the terminals d, q, u, g with +, -, *, protected /; ramped
half-and-half initialisation; k-tournament selection; subtree crossover and
subtree mutation (probability ``mutation_rate``; otherwise crossover); the best
individual is carried over (elitism of one). Each generation scores every tree on a
random subset of ``subset`` training instances: score = mean over the subset of
objective(MCT + f) / objective(MCT + SRSF, f = g * d). Each generation's best is
scored on the validation set; the result is the best of those on validation.

Published settings (``LearnConfig.published()``): population 512, 100 generations,
max depth 7, mutation 0.1, 50 training instances, subsets of 3. The defaults are
small so that a run takes seconds. Everything is drawn from one seeded
``numpy.random.Generator``: the same config gives the same expression.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import numpy as np

from controller.partitions.instances import generate_partition_instance
from controller.partitions.mct import allocate_mct
from controller.partitions.model import AllocationProblem, Objective, priority_order
from controller.partitions.snapshot import snapshot_from_instance
from controller.core.expr import TERMINALS, BinOp, Node, Pow, Var, parse_expression
from controller.core.model import InputError

__all__ = ["LearnConfig", "LearnResult", "learn", "make_instances", "score_expression", "srsf_values",
           "priority_values", "random_tree", "subtree_crossover", "subtree_mutation"]

OPERATORS = ("+", "-", "*", "/")


@dataclass(frozen=True)
class LearnConfig:
    population: int = 32
    generations: int = 10
    max_depth: int = 7  # nodes on the longest path (a terminal is depth 1)
    init_depth: tuple[int, int] = (2, 5)  # ramped half-and-half depth range
    mutation_rate: float = 0.1
    tournament: int = 4
    subset: int = 3
    training: int = 6
    validation: int = 3
    seed: int = 0
    partitions: tuple[int, int] = (2, 4)
    nodes: tuple[int, int] = (4, 12)
    arrivals_per_node: int = 10
    max_pending: Optional[int] = 200  # snapshot: the busiest moment with at most this many waiting
    start_from: tuple[str, ...] = ()  # expressions placed in the initial population (warm start)
    replay: str = "submitted"  # snapshot kind (snapshot.snapshot_from_instance)
    backlog_load: Optional[float] = None  # replay "none": pending GPUs / instance GPUs (max_pending unused)

    @classmethod
    def published(cls, **overrides) -> "LearnConfig":
        base = cls(population=512, generations=100, training=50, validation=10, partitions=(2, 26),
                   nodes=(10, 100), max_pending=None)
        return replace(base, **overrides)

    def __post_init__(self):
        checks = [("population", self.population, 2), ("generations", self.generations, 0),
                  ("max_depth", self.max_depth, 2), ("tournament", self.tournament, 1),
                  ("subset", self.subset, 1), ("training", self.training, 1), ("validation", self.validation, 1)]
        for name, value, low in checks:
            if value < low:
                raise InputError(f"{name} value '{value}' must be at least {low}")
        if not 0 <= self.mutation_rate <= 1:
            raise InputError(f"mutation rate value '{self.mutation_rate}' must be within 0..1")
        lo, hi = self.init_depth
        if not 1 <= lo <= hi <= self.max_depth:
            raise InputError(f"init depth range {self.init_depth} must lie within 1..max depth {self.max_depth}")
        if not 1 <= self.partitions[0] <= self.partitions[1]:
            raise InputError(f"partition range {self.partitions} is not (low, high) with 1 <= low <= high")
        if self.replay not in ("submitted", "mct", "none"):
            raise InputError(f"replay value '{self.replay}' is not one of submitted, mct, none")
        if self.backlog_load is not None and (self.replay != "none" or not self.backlog_load > 0):
            raise InputError(f"backlog load value '{self.backlog_load}' needs replay 'none' and must be > 0")
        if not 1 <= self.nodes[0] <= self.nodes[1]:
            raise InputError(f"node range {self.nodes} is not (low, high) with 1 <= low <= high")


@dataclass
class LearnResult:
    expression: Node
    validation_score: float  # mean objective ratio vs SRSF on the validation set (< 1: better)
    training_score: float  # the same on all training instances
    history: list[dict]  # per generation: best subset score, its validation score, expression


# --------------------------------------------------------------------------- instances
def make_instances(count: int, seed: int, config: LearnConfig) -> list[AllocationProblem]:
    """``count`` snapshot problems from seeded synthetic instances."""
    rng = np.random.Generator(np.random.PCG64(seed))
    out = []
    for _ in range(count):
        inst_seed = int(rng.integers(0, 2**31 - 1))
        partitions = int(rng.integers(config.partitions[0], config.partitions[1] + 1))
        inst = generate_partition_instance(inst_seed, partitions, nodes_range=config.nodes,
                                           arrivals_per_node=config.arrivals_per_node)
        if config.backlog_load is not None:
            out.append(snapshot_from_instance(inst, replay=config.replay, backlog_load=config.backlog_load))
        else:
            out.append(snapshot_from_instance(inst, max_pending=config.max_pending, replay=config.replay))
    return out


def priority_values(expr: Node, problem: AllocationProblem) -> np.ndarray:
    jobs = problem.jobs
    value = expr.evaluate(jobs.duration_s, jobs.queued_s, jobs.user_priority, jobs.gpus.astype(float))
    return np.broadcast_to(np.asarray(value, dtype=float), jobs.duration_s.shape).copy()


def srsf_values(problem: AllocationProblem) -> np.ndarray:
    return problem.jobs.gpus * problem.jobs.duration_s


def score_expression(expr: Node, problems: list[AllocationProblem], baselines: list[float],
                     objective: Objective = Objective(), memo: Optional[dict] = None) -> float:
    """Mean of objective(MCT + expr) / objective(MCT + SRSF) over ``problems``.

    MCT sees a priority function only through the order it puts the jobs in, and
    many trees order an instance the same way (any monotone rewrite does): with
    ``memo`` (a dict kept across calls), each (instance, job order) is allocated once.
    """
    ratios = []
    for problem, base in zip(problems, baselines):
        values = priority_values(expr, problem)
        key = (id(problem), priority_order(values).astype(np.int32).tobytes()) if memo is not None else None
        value = memo.get(key) if memo is not None else None
        if value is None:
            value = allocate_mct(problem, values, objective).value
            if memo is not None:
                memo[key] = value
        ratios.append(value / base if base > 0 else (1.0 if value <= 0 else np.inf))
    return float(np.mean(ratios))


# --------------------------------------------------------------------------- trees
def random_tree(rng: np.random.Generator, depth: int, full: bool) -> Node:
    """A full tree of exactly ``depth`` levels, or a grown one of at most ``depth``."""
    if depth <= 1 or (not full and rng.random() < len(TERMINALS) / (len(TERMINALS) + len(OPERATORS))):
        return Var(TERMINALS[int(rng.integers(len(TERMINALS)))])
    op = OPERATORS[int(rng.integers(len(OPERATORS)))]
    return BinOp(op, random_tree(rng, depth - 1, full), random_tree(rng, depth - 1, full))


def _nodes(tree: Node, path: tuple = ()) -> list[tuple[tuple, Node]]:
    out = [(path, tree)]
    for i, child in enumerate(tree.children()):
        out.extend(_nodes(child, path + (i,)))
    return out


def _replace(tree: Node, path: tuple, new: Node) -> Node:
    if not path:
        return new
    children = list(tree.children())
    children[path[0]] = _replace(children[path[0]], path[1:], new)
    if isinstance(tree, BinOp):
        return BinOp(tree.op, children[0], children[1])
    if isinstance(tree, Pow):  # parsed start expressions only: the GP itself builds no powers
        return Pow(children[0], tree.exponent)
    return type(tree)(*children)  # Neg (parsed start expressions only)


def subtree_crossover(a: Node, b: Node, rng: np.random.Generator, max_depth: int) -> Node:
    """A random subtree of ``a`` replaced by a random subtree of ``b`` (``a`` if too deep)."""
    na, nb = _nodes(a), _nodes(b)
    path, _ = na[int(rng.integers(len(na)))]
    _, donor = nb[int(rng.integers(len(nb)))]
    child = _replace(a, path, donor)
    return child if child.depth() <= max_depth else a


def subtree_mutation(a: Node, rng: np.random.Generator, max_depth: int, new_depth: int = 4) -> Node:
    """A random subtree of ``a`` replaced by a grown random tree (``a`` if too deep)."""
    na = _nodes(a)
    path, _ = na[int(rng.integers(len(na)))]
    child = _replace(a, path, random_tree(rng, int(rng.integers(1, new_depth + 1)), full=False))
    return child if child.depth() <= max_depth else a


def _ramped(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[Node]:
    depths = list(range(lo, hi + 1))
    return [random_tree(rng, depths[i % len(depths)], full=(i // len(depths)) % 2 == 0) for i in range(n)]


# --------------------------------------------------------------------------- search
def learn(config: LearnConfig = LearnConfig(), objective: Objective = Objective(),
          progress: Optional[Callable[..., None]] = None,
          training: Optional[list[AllocationProblem]] = None,
          validation: Optional[list[AllocationProblem]] = None) -> LearnResult:
    """Run the GP search; deterministic for a given config (and given instances).

    ``progress(done, total, note)``, when given, is called after each expression scored:
    ``done`` of ``total`` = (generations + 1) x population expressions, ``note`` the best
    scores of the last finished generation."""
    rng = np.random.Generator(np.random.PCG64(config.seed))
    if training is None:
        training = make_instances(config.training, int(rng.integers(0, 2**31 - 1)), config)
    if validation is None:
        validation = make_instances(config.validation, int(rng.integers(0, 2**31 - 1)), config)
    base_train = [allocate_mct(p, srsf_values(p), objective).value for p in training]
    base_val = [allocate_mct(p, srsf_values(p), objective).value for p in validation]
    # warm start: given expressions (e.g. SRSF, a published function) replace the first
    # random trees; deeper than max_depth is refused rather than silently cut
    start = [parse_expression(text) for text in config.start_from]
    for tree in start:
        if tree.depth() > config.max_depth:
            raise InputError(f"start expression '{tree.to_text()}' is deeper ({tree.depth()}) than the "
                             f"maximum depth {config.max_depth}")
    pop = start[:config.population] + _ramped(rng, config.population, *config.init_depth)[len(start):]
    history: list[dict] = []
    best_val: Optional[tuple[float, int, Node]] = None
    val_cache: dict[str, float] = {}
    by_order: dict = {}  # (instance, job order) -> MCT objective, across generations
    total_scored = (config.generations + 1) * config.population
    note = ""
    for gen in range(config.generations + 1):
        subset = rng.choice(len(training), size=min(config.subset, len(training)), replace=False)
        probs = [training[i] for i in subset]
        bases = [base_train[i] for i in subset]
        cache: dict[str, float] = {}
        scores = []
        for tree in pop:
            key = tree.to_text()
            if key not in cache:
                cache[key] = score_expression(tree, probs, bases, objective, by_order)
            scores.append(cache[key])
            if progress:
                progress(gen * config.population + len(scores), total_scored, note)
        scores = np.array(scores)
        scores = np.where(np.isfinite(scores), scores, np.inf)
        champion = pop[int(np.argmin(scores))]
        key = champion.to_text()
        if key not in val_cache:
            val_cache[key] = score_expression(champion, validation, base_val, objective, by_order)
        val = val_cache[key]
        if best_val is None or (val, champion.size()) < (best_val[0], best_val[1]):
            best_val = (val, champion.size(), champion)
        history.append({"generation": gen, "subset_score": float(scores.min()), "validation_score": val,
                        "expression": key})
        note = f"generation {gen}: best {scores.min():.4f}, its validation {val:.4f}"
        if progress:
            progress((gen + 1) * config.population, total_scored, note)
        if gen == config.generations:
            break

        def pick() -> Node:
            idx = rng.integers(len(pop), size=config.tournament)
            return pop[int(idx[np.argmin(scores[idx])])]

        offspring = [champion]
        while len(offspring) < config.population:
            if rng.random() < config.mutation_rate:
                offspring.append(subtree_mutation(pick(), rng, config.max_depth))
            else:
                offspring.append(subtree_crossover(pick(), pick(), rng, config.max_depth))
        pop = offspring
    val, _, expr = best_val
    train_score = score_expression(expr, training, base_train, objective, by_order)
    return LearnResult(expr, val, train_score, history)
