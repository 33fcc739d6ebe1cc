"""EVO, the evolutionary job-to-partition assignment (spec/multi-partition.md, layer 1).

``allocate_evo`` runs the search: a population seeded with MCT, single-point
crossover, move and swap mutations (the operators below, vectorized over a
population), elitist selection; fitness from ``exact.ExactEvaluator`` or
``surrogate.SurrogateEvaluator`` (then re-checked exactly); finally
``local_search.local_search`` from the best.

Units: seconds for times and durations, GPUs for capacity.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from controller.core.model import InputError
from controller.partitions.exact import ExactEvaluator
from controller.partitions.layer2 import finish_allocation
from controller.partitions.local_search import local_search
from controller.partitions.mct import mct_assignment
from controller.partitions.model import Allocation, AllocationProblem, Objective, priority_rank, split_feasible
from controller.partitions.surrogate import FitnessMemo, SurrogateEvaluator

__all__ = ["EVALUATORS", "EvoConfig", "allocate_evo", "random_individual", "crossover", "mutate_move",
           "mutate_swap", "mutate_moves", "mutate_swaps", "offspring"]


EVALUATORS = ("exact", "surrogate")


@dataclass(frozen=True)
class EvoConfig:
    """Published settings: population 100, 200 generations, mutation rate 0.1.

    ``seed_mct``: one individual of the initial population is the MCT assignment
    (same priority order); with elitist selection EVO then never ends worse than
    MCT on its own objective. ``local_moves``: after the search, an exact first-
    improvement local search from the best individual tries this many single-job
    moves (half aimed at the job that sets C_max, half at the jobs whose MCT
    runner-up partition came closest), each evaluated with layer 2 on the two
    changed partitions only (see ``local_search``). ``evaluator``: ``"exact"`` (the reference: layer 2 on
    every changed partition, incremental from the parent's plan) or ``"surrogate"``
    (a vectorized fluid approximation of layer 2 for the search; the best
    ``exact_top`` distinct individuals of the last population and the MCT seed
    are then re-evaluated exactly and the exact best is returned).
    """

    population: int = 100
    generations: int = 200
    mutation_rate: float = 0.1
    seed: int = 0
    cache_limit: int = 100_000  # per-partition layer-2 results kept (exact evaluator)
    seed_mct: bool = True
    evaluator: str = "exact"
    exact_top: int = 1
    local_moves: int = 16

    def __post_init__(self):
        if self.population < 2:
            raise InputError(f"population value '{self.population}' must be at least 2")
        if self.generations < 0:
            raise InputError(f"generations value '{self.generations}' must be >= 0")
        if not 0 <= self.mutation_rate <= 1:
            raise InputError(f"mutation rate value '{self.mutation_rate}' must be within 0..1")
        if self.evaluator not in EVALUATORS:
            raise InputError(f"evaluator value '{self.evaluator}' is not one of {', '.join(EVALUATORS)}")
        if self.exact_top < 1:
            raise InputError(f"exact_top value '{self.exact_top}' must be at least 1")
        if self.local_moves < 0:
            raise InputError(f"local_moves value '{self.local_moves}' must be >= 0")


def random_individual(feasible: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each job (row) gets a uniformly random feasible partition (column)."""
    counts = feasible.sum(axis=1)
    pick = np.floor(rng.random(feasible.shape[0]) * counts).astype(np.int64)
    # the pick-th True of each row
    csum = np.cumsum(feasible, axis=1)
    return np.argmax(csum > pick[:, None], axis=1).astype(np.int64)


def crossover(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Single-point crossover: a[:c] + b[c:] and b[:c] + a[c:], c in 1..len-1."""
    if a.size < 2:
        return a.copy(), b.copy()
    c = int(rng.integers(1, a.size))
    return np.concatenate((a[:c], b[c:])), np.concatenate((b[:c], a[c:]))


def mutate_moves(pop: np.ndarray, rows: np.ndarray, feasible: np.ndarray, rng: np.random.Generator,
                 movable: Optional[np.ndarray] = None) -> np.ndarray:
    """The move operator on each of ``pop[rows]``, in place: one random job with another
    feasible partition goes to a uniformly random other feasible partition.

    ``movable`` (optional) is ``np.flatnonzero(feasible.sum(axis=1) >= 2)`` precomputed.
    Returns the rows changed (all of them, or none when no job can move)."""
    if movable is None:
        movable = np.flatnonzero(feasible.sum(axis=1) >= 2)
    rows = np.asarray(rows, dtype=np.int64)
    if movable.size == 0 or rows.size == 0:
        return rows[:0]
    j = movable[rng.integers(movable.size, size=rows.size)]
    options = feasible[j]  # a copy (fancy indexing)
    options[np.arange(rows.size), pop[rows, j]] = False
    pick = np.floor(rng.random(rows.size) * options.sum(axis=1)).astype(np.int64)
    pop[rows, j] = np.argmax(np.cumsum(options, axis=1) > pick[:, None], axis=1)  # the pick-th option
    return rows


def mutate_swaps(pop: np.ndarray, rows: np.ndarray, feasible: np.ndarray, rng: np.random.Generator,
                 attempts: int = 32) -> np.ndarray:
    """The swap operator on each of ``pop[rows]``, in place: the partitions of two jobs,
    each feasible in the other's partition, are exchanged. ``attempts`` random pairs
    are tried per row at once; returns the rows where one qualified (and was swapped)."""
    rows = np.asarray(rows, dtype=np.int64)
    n = pop.shape[1]
    if n < 2 or rows.size == 0:
        return rows[:0]
    i = rng.integers(n, size=(rows.size, attempts))
    j = rng.integers(n, size=(rows.size, attempts))
    a, b = pop[rows[:, None], i], pop[rows[:, None], j]
    ok = (a != b) & feasible[i, b] & feasible[j, a]
    k = np.flatnonzero(ok.any(axis=1))
    h = ok[k].argmax(axis=1)  # the first qualifying pair of each row
    pop[rows[k], i[k, h]] = b[k, h]
    pop[rows[k], j[k, h]] = a[k, h]
    return rows[k]


def mutate_move(ind: np.ndarray, feasible: np.ndarray, rng: np.random.Generator,
                movable: Optional[np.ndarray] = None) -> bool:
    """``mutate_moves`` on one individual (in place); False when no job can move."""
    return mutate_moves(ind[None, :], np.zeros(1, dtype=np.int64), feasible, rng, movable).size == 1


def mutate_swap(ind: np.ndarray, feasible: np.ndarray, rng: np.random.Generator, attempts: int = 32) -> bool:
    """``mutate_swaps`` on one individual (in place); False when no pair qualifies."""
    return mutate_swaps(ind[None, :], np.zeros(1, dtype=np.int64), feasible, rng, attempts).size == 1


def offspring(pop: np.ndarray, feas: np.ndarray, rate: float, rng: np.random.Generator,
               movable: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """Children of one generation and, per child, the parent it shares its prefix with.

    Random pairs (a permutation; with an odd population the last pairs with the
    first of the permutation), single-point crossover a[:c] + b[c:] and
    b[:c] + a[c:], then per child with probability ``rate`` a move or a swap (half
    each; a swap that finds no pair falls back to a move).
    """
    n, L = pop.shape
    perm = rng.permutation(n)
    first = perm[0::2]
    second = np.concatenate((perm[1::2], perm[:1]))[:first.size]
    A, B = pop[first], pop[second]
    if L >= 2:
        cut = rng.integers(1, L, size=first.size)
        mask = np.arange(L)[None, :] < cut[:, None]
        c1, c2 = np.where(mask, A, B), np.where(mask, B, A)
    else:
        c1, c2 = A.copy(), B.copy()
    kids = np.empty((2 * first.size, L), dtype=pop.dtype)
    kids[0::2], kids[1::2] = c1, c2
    parent = np.empty(2 * first.size, dtype=np.int64)
    parent[0::2], parent[1::2] = first, second
    kids, parent = kids[:n], parent[:n]
    mutated = np.flatnonzero(rng.random(n) < rate)
    swapped = mutate_swaps(kids, mutated[rng.random(mutated.size) >= 0.5], feas, rng)
    mutate_moves(kids, np.setdiff1d(mutated, swapped), feas, rng, movable)
    return kids, parent


def allocate_evo(problem: AllocationProblem, priority: np.ndarray, config: EvoConfig = EvoConfig(),
                 objective: Objective = Objective(), initial: Sequence[np.ndarray] = ()) -> Allocation:
    """The evolutionary job-to-partition assignment (spec "Layer 1").

    Individuals are vectors over the schedulable jobs (in priority order) holding a
    partition index. Initialization: random feasible partitions, except that, with
    ``config.seed_mct`` (default), the first individual is the MCT assignment
    (feasibility-aware initialisation, which the spec allows; seeding one individual
    with the greedy solution is common practice). Because selection keeps the best
    ``population`` of parents + offspring, the result is then never worse than
    MCT with the same priority on the objective. ``initial`` may replace the next
    individuals (arrays over all jobs of the problem, partition indices). Each
    generation: single-point crossover of random pairs, then with probability
    ``mutation_rate`` a move or a swap (half each; a swap that finds no pair falls
    back to a move); fitness = layer 2 on every partition + the objective.
    Jobs feasible nowhere are returned in ``infeasible`` and left where they were
    submitted.

    ``config.evaluator == "surrogate"``: the search ranks individuals with
    ``SurrogateEvaluator`` (fast, approximate); at the end the best ``exact_top``
    distinct individuals and the MCT seed are evaluated with the exact layer 2 and
    the exact best is returned. ``history`` then holds surrogate values; ``value``
    is always the exact objective. MCT's own per-partition plans seed the exact
    evaluator's cache, and the re-check resumes from the MCT seed, so only the
    partitions where a candidate differs are re-planned (from the first differing
    job on). Finally ``config.local_moves`` exact single-job moves are tried from
    the best (``local_search``); with the exact evaluator the result is appended
    to ``history``. The returned Allocation is built from the cached runs.
    """
    clock = time.perf_counter
    phase_s: dict[str, float] = {}
    t0 = clock()
    rng = np.random.Generator(np.random.PCG64(config.seed))
    rank = priority_rank(priority)
    sched, infeasible = split_feasible(problem)
    sched = sched[np.argsort(rank[sched], kind="stable")]
    feas = problem.feasible[sched]
    ev = ExactEvaluator(problem, sched, objective, config.cache_limit)
    n = config.population
    pop = np.empty((n, sched.size), dtype=np.uint8 if len(problem.partitions) <= 255 else np.int64)
    for i in range(n):
        pop[i] = random_individual(feas, rng)
    seeds = []
    alt_moves: dict = {}
    if config.seed_mct and sched.size:
        record: dict = {}
        seeds.append(mct_assignment(problem, rank, sched, record))
        pos = np.empty(len(problem.jobs), dtype=np.int64)
        pos[sched] = np.arange(sched.size)
        alt_moves = record.pop("alt", {})
        for p, placed in record.items():  # MCT's plans are layer-2 runs: the exact evaluator reuses them
            ev.seed(p, pos[[x[0] for x in placed]], np.array([x[1] for x in placed]),
                    np.array([x[2] for x in placed]), [x[3] for x in placed], [x[4] for x in placed])
    phase_s["mct"] = clock() - t0
    seeds.extend(list(initial))
    for i, given in enumerate(seeds[:n]):
        given = np.asarray(given, dtype=np.int64)[sched]
        if given.size and not feas[np.arange(sched.size), given].all():
            raise InputError("an initial individual puts a job in an infeasible partition")
        pop[i] = given
    mct_seed = pop[0].copy() if config.seed_mct and sched.size else None
    surrogate = config.evaluator == "surrogate" and sched.size > 0
    if surrogate:
        sur = FitnessMemo(SurrogateEvaluator(problem, sched, objective).fitness)
        fit = sur(pop)
    else:
        fit = np.array([ev.fitness(ind) for ind in pop])
    history = [float(fit.min())]
    movable = np.flatnonzero(feas.sum(axis=1) >= 2)
    if sched.size:
        for _ in range(config.generations):
            kids, parent = offspring(pop, feas, config.mutation_rate, rng, movable)
            if surrogate:
                kid_fit = sur(kids)
            else:
                kid_fit = np.array([ev.fitness(c, pop[h]) for c, h in zip(kids, parent)])
            all_pop = np.concatenate((pop, kids))
            all_fit = np.concatenate((fit, kid_fit))
            keep = np.argsort(all_fit, kind="stable")[:n]
            pop, fit = all_pop[keep], all_fit[keep]
            history.append(float(fit[0]))
    phase_s["search"] = clock() - t0 - sum(phase_s.values())
    if not sched.size:
        best = np.zeros(0, dtype=np.int64)
    elif surrogate:
        _, first = np.unique(pop, axis=0, return_index=True)
        cands = [pop[i] for i in sorted(first)[:config.exact_top]]
        if mct_seed is not None:
            cands.append(mct_seed)
        # only the partitions where a candidate differs from the MCT seed are re-planned,
        # from their first differing job on (the seed's runs are in the cache)
        exact = [ev.fitness(c, mct_seed) for c in cands]
        h = int(np.argmin(exact))
        best, best_val = cands[h], exact[h]
    else:
        h = int(np.argmin(fit))
        best, best_val = pop[h], float(fit[h])
    phase_s["recheck"] = clock() - t0 - sum(phase_s.values())
    if sched.size and config.local_moves:
        best, best_val = local_search(ev, best, best_val, feas, sched, alt_moves, mct_seed, config.local_moves)
        if not surrogate:
            history.append(best_val)
    phase_s["local_search"] = clock() - t0 - sum(phase_s.values())
    part_of = np.full(len(problem.jobs), -1, dtype=np.int64)
    part_of[sched] = best
    plans = ev.plans(best) if sched.size else None  # the best's layer-2 runs are cached: no re-run
    result = finish_allocation(problem, "evo", part_of, sched, rank, objective, infeasible, plans=plans,
                                history=history, evaluations=ev.misses)
    phase_s["finish"] = clock() - t0 - sum(phase_s.values())
    result.phase_s = phase_s
    if surrogate:
        result.surrogate_calls = (sur.evaluated, sur.asked)
    return result
