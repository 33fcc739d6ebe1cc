"""Exact local search after EVO: single-job moves aimed at C_max and at MCT's closest calls.

Each try is one ``ExactEvaluator.fitness`` call with the current best as the hint, so
only the two changed partitions are re-planned.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from controller.partitions.exact import ExactEvaluator

__all__ = ["local_search", "critical_moves"]


def critical_moves(ev: ExactEvaluator, cur: np.ndarray, feas: np.ndarray, alt_of: dict) -> list[tuple[int, int]]:
    """Moves aimed at C_max, the largest u * q: the job that sets it, to every other
    feasible partition (its MCT runner-up first, then nearest by index), then the jobs
    planned to start before it in its partition, latest start first, each to its MCT
    runner-up (``alt_of``: position -> partition). Positions are in priority order;
    needs ``cur``'s runs cached."""
    order, bounds = ev.groups(cur)
    worst = None
    for p in range(ev.P):
        members = order[bounds[p]:bounds[p + 1]]
        run = ev.cache.get((p, members.tobytes())) if members.size else None
        if run is None:
            continue
        uq = ev.u[members] * (ev.q0[members] + run.starts)
        h = int(np.argmax(uq))
        if worst is None or uq[h] > worst[0]:
            worst = (float(uq[h]), p, members, run.starts, h)
    if worst is None:
        return []
    _, p, members, starts, h = worst
    i = int(members[h])
    others = [q for q in np.flatnonzero(feas[i]).tolist() if q != p]
    runner_up = alt_of.get(i)  # MCT's second choice for it first
    moves = [(i, q) for q in sorted(others, key=lambda q: (q != runner_up, abs(q - p), q))]
    ahead = [k for k in np.argsort(-starts[:h], kind="stable").tolist()]
    moves += [(int(members[k]), alt_of[int(members[k])]) for k in ahead if int(members[k]) in alt_of]
    return moves


def local_search(ev: ExactEvaluator, best: np.ndarray, best_val: float, feas: np.ndarray, sched: np.ndarray,
                  alt_moves: dict, mct_seed: Optional[np.ndarray], moves: int) -> tuple[np.ndarray, float]:
    """Exact first-improvement local search: single-job moves, at most ``moves`` tries.

    Half the tries go to C_max (``critical_moves``: the job that sets the largest
    u * q, and the jobs ahead of it; recomputed after each improvement), the rest
    to jobs by ascending MCT regret (a lower bound on how much later the job would
    finish in its runner-up partition than in the chosen one, see
    ``mct_assignment``), each moved to its runner-up (or, if it already sits there,
    back to its MCT partition). Each try is ``ev.fitness`` with the current best as
    hint: only the two changed partitions are re-planned, from their first changed
    job on. A move is kept when the exact objective decreases.
    """
    if not moves or not sched.size:
        return best, best_val
    pos = np.empty(int(sched.max()) + 1, dtype=np.int64)
    pos[sched] = np.arange(sched.size)
    alt_of = {int(pos[j]): q for j, (q, _) in alt_moves.items()}
    cur, cur_val = best.copy(), best_val
    tries = 0

    def attempt(i: int, q: int) -> bool:
        nonlocal cur, cur_val, tries
        if cur[i] == q or not feas[i, q]:
            return False
        tries += 1
        trial = cur.copy()
        trial[i] = q
        v = ev.fitness(trial, cur)
        if v < cur_val:
            cur, cur_val = trial, v
            return True
        return False

    critical_budget = moves // 2
    tried: set = set()
    while tries < critical_budget:
        improved = False
        for i, q in critical_moves(ev, cur, feas, alt_of):
            if tries >= critical_budget:
                break
            if (i, q, cur.tobytes()) in tried:
                continue
            tried.add((i, q, cur.tobytes()))
            if attempt(i, q):
                improved = True
                break
        if not improved:
            break
    cands = sorted(alt_moves.items(), key=lambda kv: (kv[1][1], kv[0]))
    for j, (q, _) in cands:
        if tries >= moves:
            break
        i = int(pos[j])
        if cur[i] == q:
            if mct_seed is None or mct_seed[i] == q:
                continue
            q = int(mct_seed[i])
        attempt(i, q)
    return cur, cur_val
