"""Search the MLFQ settings (K, thresholds, PROMOTEKNOB) on a trace replay.

The search is a seeded random search with local refinement, in fixed rounds of
``ROUND_SIZE`` candidates: round 0 is the default (K=2, 3600 GPU-s, knob inf)
plus random settings; each later round mixes neighbours of the best setting so
far with fresh random ones. Candidates depend only on the seed and the results
of earlier rounds, and each replay is deterministic, so a given seed and
evaluation count always give the same answer, whatever the number of worker
processes. The time budget is only a safety stop: no round starts that would not
fit, and a replay still running at its end is cut (its watch checks the deadline
every few rounds of the replay loop) and counted as cut, never ranked; when it
stops the search, the result says so. An interrupt (Ctrl-C) cuts the running
replays the same way and returns what finished.

Thresholds are drawn from a log-spaced grid between the 5% and 99% quantiles
of the trace's job service (GPUs x duration, GPU-seconds), rounded to two
significant digits so that the result is readable and pasteable, plus the
default 3600 so that the search can refine around it.
"""
from __future__ import annotations

import math
import multiprocessing
import random
import signal
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from controller.core.engine import EngineConfig
from controller.core.model import InputError, JobSpec
from controller.replay.results import summarize
from controller.replay.simulator import ReplayCut, SimConfig, Simulation

ROUND_SIZE = 8
GRID_POINTS = 12
GRID_QUANTILES = (0.05, 0.99)
KNOB_CANDIDATES = (math.inf, 1.0, 2.0, 4.0, 8.0, 16.0)
DEFAULT_THRESHOLDS = (3600.0,)
OBJECTIVES = ("avg", "p95", "mixed")
# The budget's deadline leaves this share for what follows the replays (shutting the
# workers down, printing), so that the whole command ends within the budget.
BUDGET_RESERVE = 0.03
HEARTBEAT_S = 1.0  # how often a waiting search reports progress (Progress keeps its own period)


@dataclass(frozen=True)
class Setting:
    """One candidate: MLFQ thresholds (GPU-seconds, increasing; K = len + 1) and PROMOTEKNOB."""

    thresholds_gpu_s: tuple[float, ...]
    promote_knob: float = math.inf

    @property
    def k(self) -> int:
        return len(self.thresholds_gpu_s) + 1


DEFAULT_SETTING = Setting(DEFAULT_THRESHOLDS, math.inf)


@dataclass
class Evaluation:
    """One replay: the setting, its average/p95 JCT (s) and its place in the search order."""

    setting: Setting
    avg_jct_s: float
    p95_jct_s: float
    order: int
    seconds: float = 0.0
    preemptions: int = 0
    promotions: int = 0


@dataclass
class TuneResult:
    ranked: list[Evaluation]  # best first
    default: Optional[Evaluation]  # None: the default replay did not finish
    objective: str
    requested: int
    stopped_by_budget: bool
    exhausted: bool
    elapsed_s: float
    grid_gpu_s: list[float] = field(default_factory=list)
    knobs: tuple[float, ...] = KNOB_CANDIDATES
    max_k: int = 2
    cut: list[Setting] = field(default_factory=list)  # replays stopped by the budget or an interrupt
    interrupted: bool = False

    @property
    def best(self) -> Optional[Evaluation]:
        """The best finished replay (None: none finished)."""
        return self.ranked[0] if self.ranked else None

    @property
    def evaluations(self) -> int:
        return len(self.ranked)


def round_sig(value: float, digits: int = 2) -> float:
    """``value`` rounded to ``digits`` significant digits (7213 -> 7200)."""
    if value <= 0 or not math.isfinite(value):
        return value
    # through the decimal text, so 1e6 stays 1000000 (scaling by 1e-5 gave 999999.9999999999)
    return float(f"{value:.{digits}g}")


def threshold_grid(jobs: Sequence[JobSpec], points: int = GRID_POINTS,
                   quantiles: tuple[float, float] = GRID_QUANTILES) -> list[float]:
    """Log-spaced candidate thresholds (GPU-s) between two quantiles of job service, plus 3600."""
    service = np.array([j.num_gpus * j.duration_s for j in jobs if j.duration_s], dtype=float)
    service = service[service > 0]
    if not service.size:
        raise InputError("trace: no job has a positive duration, so there is no service to derive thresholds from")
    lo, hi = (float(np.quantile(service, q)) for q in quantiles)
    lo = max(lo, 1.0)
    hi = max(hi, lo)
    values = np.geomspace(lo, hi, points) if hi > lo else np.array([lo])
    return sorted({round_sig(float(v)) for v in values} | set(DEFAULT_THRESHOLDS))


def score(evaluation: Evaluation, objective: str, default: Optional[Evaluation]) -> tuple:
    """Sort key, lower is better. Exact ties go to fewer queues, then to the earlier
    evaluation (the default is the first)."""
    avg, p95 = round(evaluation.avg_jct_s, 6), round(evaluation.p95_jct_s, 6)
    tail = (evaluation.setting.k, evaluation.order)
    if objective == "avg":
        return (avg, p95, *tail)
    if objective == "p95":
        return (p95, avg, *tail)
    if default is None:  # the default replay was cut: nothing to be relative to
        return (avg, p95, *tail)
    mixed = 0.5 * avg / max(default.avg_jct_s, 1e-9) + 0.5 * p95 / max(default.p95_jct_s, 1e-9)
    return (round(mixed, 9), avg, *tail)


# --------------------------------------------------------------------------- replay workers
_WORKER: dict = {}


def _init_worker(jobs: list[JobSpec], base: dict, stop=None, ignore_interrupt: bool = False) -> None:
    _WORKER["jobs"] = jobs
    _WORKER["base"] = base
    _WORKER["stop"] = stop
    if ignore_interrupt:
        # Ctrl-C reaches the whole process group; the parent decides (it sets ``stop``,
        # which cuts this worker's replay within a few rounds)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def replay_setting(jobs: list[JobSpec], base: dict, setting: Setting) -> tuple[float, float, float, int, int]:
    """One replay of ``jobs`` under ``setting``: (avg JCT, p95 JCT, seconds, preemptions,
    promotions). ``base``: the search's fixed settings (``tune_base``). Deterministic,
    so any process that runs it (a worker, a Slurm array task) gives the same figures."""
    _init_worker(jobs, base)
    return _replay(setting)


def tune_base(policy: str, nodes: int, gpus_per_node: int, preempt_cost_s: float, drop_oversize: bool,
              placement: str, node_kinds: Sequence = ()) -> dict:
    """The fixed part of every replay of one search (plain data: it travels to workers,
    node kinds as lists [count, [partition, ...], type], as JSON carries them)."""
    return {"policy": policy, "nodes": nodes, "gpus_per_node": gpus_per_node, "preempt_cost_s": preempt_cost_s,
            "drop_oversize": drop_oversize, "placement": placement,
            "node_kinds": [[count, list(parts), gpu_type] for count, parts, gpu_type in node_kinds]}


def _replay(setting: Setting, deadline: float = math.inf, on_progress=None) -> tuple[float, float, float, int, int]:
    """``deadline``: time.monotonic() at which the replay is cut (ReplayCut);
    ``on_progress(fraction)``: called from inside the replay, about every second."""
    base = _WORKER["base"]
    stop = _WORKER.get("stop")
    started = time.perf_counter()
    last_report = [time.monotonic()]

    def watch(fraction: float) -> None:
        now = time.monotonic()
        if now >= deadline or (stop is not None and stop.is_set()):
            raise ReplayCut(f"cut after {100 * fraction:.0f}% of the jobs")
        if on_progress is not None and now - last_report[0] >= HEARTBEAT_S:
            last_report[0] = now
            on_progress(fraction)

    watch(0.0)  # a task that starts after the deadline (the rest of a round) stops before its setup

    engine = EngineConfig(policy=base["policy"], thresholds_gpu_s=setting.thresholds_gpu_s,
                          promote_knob=setting.promote_knob, placement=base["placement"])
    config = SimConfig(nodes=base["nodes"], gpus_per_node=base["gpus_per_node"], engine=engine,
                       preempt_pause_s=base["preempt_cost_s"], preempt_resume_s=0.0,
                       drop_oversize=base["drop_oversize"],
                       node_kinds=tuple((count, tuple(parts), gpu_type)
                                        for count, parts, gpu_type in base.get("node_kinds", ())))
    summary = summarize(Simulation(config, watch=watch).run(_WORKER["jobs"]))
    return (summary["avg_jct_s"], summary["p95_jct_s"], time.perf_counter() - started,
            summary["preemptions"], summary["promotions"])


def _replay_or_cut(setting: Setting, deadline: float):
    """A worker's task: the figures, or None when the replay was cut."""
    try:
        return _replay(setting, deadline)
    except ReplayCut:
        return None


# --------------------------------------------------------------------------- candidates
class _Space:
    def __init__(self, grid: list[float], knobs: Sequence[float], max_k: int, rng: random.Random):
        self.grid, self.knobs, self.rng = grid, list(knobs), rng
        self.max_k = max(2, min(max_k, len(grid) + 1))

    def random(self) -> Setting:
        k = self.rng.randint(2, self.max_k)
        thresholds = tuple(sorted(self.rng.sample(self.grid, k - 1)))
        return Setting(thresholds, self.rng.choice(self.knobs))

    def neighbour(self, s: Setting) -> Setting:
        rng, grid = self.rng, self.grid
        move = rng.choice(("shift", "shift", "k", "knob"))
        thresholds = list(s.thresholds_gpu_s)
        knob = s.promote_knob
        if move == "knob":
            i = self.knobs.index(knob) if knob in self.knobs else 0
            knob = self.knobs[max(0, min(len(self.knobs) - 1, i + rng.choice((-1, 1))))]
        elif move == "k":
            if len(thresholds) + 1 < self.max_k and (len(thresholds) == 1 or rng.random() < 0.5):
                free = [g for g in grid if g not in thresholds]
                if free:
                    thresholds = sorted(thresholds + [rng.choice(free)])
            elif len(thresholds) > 1:
                thresholds.pop(rng.randrange(len(thresholds)))
        else:
            i = rng.randrange(len(thresholds))
            pos = _nearest(grid, thresholds[i]) + rng.choice((-1, 1))
            if 0 <= pos < len(grid) and grid[pos] not in thresholds:
                thresholds[i] = grid[pos]
                thresholds.sort()
        return Setting(tuple(thresholds), knob)


def _nearest(grid: list[float], value: float) -> int:
    return min(range(len(grid)), key=lambda i: (abs(math.log(grid[i]) - math.log(value)), i))


def _fresh(space: _Space, make, seen: set, tries: int = 64) -> Optional[Setting]:
    for _ in range(tries):
        candidate = make()
        if candidate not in seen:
            seen.add(candidate)
            return candidate
    return None


def tune(jobs: Sequence[JobSpec], *, nodes: int, gpus_per_node: int, policy: str = "dlas",
         evaluations: int = 32, max_k: int = 4, seed: int = 1, budget_s: float = 60.0,
         objective: str = "avg", workers: int = 1, preempt_cost_s: float = 0.0,
         drop_oversize: bool = False, placement: str = "consolidate", node_kinds: Sequence = (),
         knobs: Sequence[float] = KNOB_CANDIDATES, clock=time.monotonic,
         progress: Optional[Callable[..., None]] = None,
         evaluate: Optional[Callable[[list[Setting], dict], Iterable[tuple]]] = None) -> TuneResult:
    """Replay ``jobs`` under up to ``evaluations`` settings and rank them (see module doc).

    ``budget_s`` stops the search between rounds when the next round would not
    fit, and cuts any replay still running when it is spent (``TuneResult.cut``);
    ``workers`` > 1 replays a round's candidates in parallel processes.
    ``progress(done, total, note)``, when given, is called after each replay and
    about every second while replays run (``total`` = ``evaluations``; ``note`` the
    best average JCT so far). Ctrl-C (KeyboardInterrupt) cuts the running replays and
    returns what finished, with ``interrupted`` set; ``default`` is None when the
    default replay did not finish.
    ``evaluate(batch, base)``, when given, replays a round's candidates elsewhere (a
    Slurm job array: ``controller.cli.tune_array``) and returns ``replay_setting``'s
    tuples in the batch's order; the search itself stays here, so the ranking is the
    local run's."""
    if objective not in OBJECTIVES:
        raise InputError(f"objective value {objective!r} is not one of {', '.join(OBJECTIVES)}")
    if evaluations < 1:
        raise InputError(f"evaluations value {evaluations!r} must be >= 1")
    if max_k < 2:
        raise InputError(f"max-k value {max_k!r} must be >= 2")
    if not jobs:
        raise InputError("trace: no jobs to replay")
    EngineConfig(policy=policy, placement=placement)  # validate before the first replay
    SimConfig(nodes=nodes, gpus_per_node=gpus_per_node, preempt_pause_s=preempt_cost_s, node_kinds=tuple(node_kinds))
    grid = threshold_grid(jobs)
    rng = random.Random(seed)
    space = _Space(grid, knobs, max_k, rng)
    base = tune_base(policy, nodes, gpus_per_node, preempt_cost_s, drop_oversize, placement, node_kinds)
    started = clock()
    # The hard stop is on the real clock (worker processes read it too); ``clock`` only
    # feeds the between-round estimate, so a test can fake it.
    deadline = time.monotonic() + budget_s * (1 - BUDGET_RESERVE)
    done: list[Evaluation] = []
    cut: list[Setting] = []
    seen: set[Setting] = {DEFAULT_SETTING}
    stopped_by_budget = exhausted = interrupted = False
    pool = stop = None
    if evaluate is None and workers > 1:
        stop = multiprocessing.Event()
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker,
                                   initargs=(list(jobs), base, stop, True))
    elif evaluate is None:
        _init_worker(list(jobs), base)

    def note(pending_outputs=()) -> str:
        finished = [e.avg_jct_s for e in done] + [out[0] for out in pending_outputs if out is not None]
        return (f"lowest avg JCT so far {min(finished):,.0f} s" if finished else "first replays running") + (
            f", {len(cut)} cut" if cut else "")

    def record(setting: Setting, output) -> None:
        if output is None:
            cut.append(setting)
        else:
            avg, p95, secs, pre, pro = output
            done.append(Evaluation(setting, avg, p95, order=len(done) + len(cut), seconds=secs,
                                   preemptions=pre, promotions=pro))
        if progress:
            progress(len(done) + len(cut), evaluations, note())

    def run_here(batch: list[Setting]) -> None:
        for setting in batch:
            if cut:  # the deadline came: the rest of the round would be cut at once
                break
            base_count = len(done) + len(cut)
            report = (lambda fraction: progress(base_count + fraction, evaluations, note())) if progress else None
            try:
                output = _replay(setting, deadline, report)
            except ReplayCut:
                output = None
            record(setting, output)

    inflight: list = []  # (setting, future) of the round in the pool

    def run_in_pool(batch: list[Setting]) -> None:
        futures = [pool.submit(_replay_or_cut, setting, deadline) for setting in batch]
        inflight[:] = list(zip(batch, futures))
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=HEARTBEAT_S, return_when=FIRST_COMPLETED)
            if progress:  # a line every period even while every replay is long
                outputs = [f.result() for f in futures if f.done() and not f.cancelled() and f.exception() is None]
                progress(len(done) + len(cut) + len(futures) - len(pending), evaluations, note(outputs))
        inflight.clear()
        for setting, future in zip(batch, futures):  # batch order: the search stays deterministic
            record(setting, future.result())

    try:
        round_no = 0
        while len(done) + len(cut) < evaluations:
            if cut:  # the deadline has come: a cut replay means no later one would finish
                break
            room = min(ROUND_SIZE, evaluations - len(done))
            batch: list[Setting] = []
            if round_no == 0:
                batch.append(DEFAULT_SETTING)
            else:
                reference = done[0] if done[0].setting == DEFAULT_SETTING else None
                best = min(done, key=lambda e: score(e, objective, reference)).setting
                for _ in range((room + 1) // 2):
                    c = _fresh(space, lambda: space.neighbour(best), seen)
                    if c is not None:
                        batch.append(c)
            while len(batch) < room:
                c = _fresh(space, space.random, seen)
                if c is None:
                    break
                batch.append(c)
            if not batch:
                exhausted = True
                break
            if round_no > 0:
                per_eval = sum(e.seconds for e in done) / len(done)
                waves = math.ceil(len(batch) / max(workers, 1))
                if clock() - started + per_eval * waves > budget_s:
                    stopped_by_budget = True
                    break
            if evaluate is not None:
                for setting, output in zip(batch, evaluate(batch, base)):
                    record(setting, output)
            elif pool is not None:
                run_in_pool(batch)
            else:
                run_here(batch)
            round_no += 1
    except KeyboardInterrupt:
        interrupted = True
        if stop is not None:
            stop.set()  # the workers cut their replays at their next check
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    for setting, future in inflight:  # interrupted mid-round: what finished counts
        if future.done() and not future.cancelled() and future.exception() is None:
            record(setting, future.result())
    if cut and not interrupted:  # a replay cut by the deadline: the budget stopped the search
        stopped_by_budget = True
    default = done[0] if done and done[0].setting == DEFAULT_SETTING else None
    ranked = sorted(done, key=lambda e: score(e, objective, default))
    return TuneResult(ranked=ranked, default=default, objective=objective, requested=evaluations,
                      stopped_by_budget=stopped_by_budget, exhausted=exhausted, elapsed_s=clock() - started,
                      grid_gpu_s=grid, knobs=tuple(knobs), max_k=space.max_k, cut=cut, interrupted=interrupted)


def format_number(value: float) -> str:
    """Threshold/knob for tables and YAML: 3600, 0.5, inf."""
    if math.isinf(value):
        return "inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def yaml_block(setting: Setting, policy: str, comment: str = "") -> str:
    """Config keys of /etc/tiresias/tiresias.yaml for ``setting`` (parses with yaml.safe_load)."""
    knob = ".inf" if math.isinf(setting.promote_knob) else format_number(setting.promote_knob)
    lines = [f"# {comment}"] if comment else []
    lines += [f"policy: {policy}",
              f"queues_gpu_s: [{', '.join(format_number(t) for t in setting.thresholds_gpu_s)}]",
              f"promote_knob: {knob}"]
    return "\n".join(lines)
