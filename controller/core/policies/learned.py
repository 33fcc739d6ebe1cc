"""A learned priority function f(d, q, u, g) as a single-cluster policy (smaller = earlier).

Inputs per job at the round's time ``now``:
- d: remaining estimated duration (s): ``spec.duration_s - progress_s`` when the
  trace gives a duration; otherwise the executed time so far (a proxy: under a
  heavy-tailed duration distribution the longer a job has run, the longer it
  is expected to keep running).
- q: queued time (s): ``now - submit - executed`` (time waiting, over all waits).
- u: the job's user priority; g: its GPU count.

The expression is parsed by ``controller.core.expr`` (never evaluated as code). Ties and
NaN values (served last) fall back to arrival order. Like the paper's layer 2 it
does not preempt running jobs; the order of waiting jobs drifts with time, so the
simulator re-plans on its quantum.
"""
from __future__ import annotations

import math
from typing import Optional, Union

import numpy as np

from controller.core.expr import PUBLISHED_EXAMPLE, Node, parse_expression
from controller.core.policies.base import Policy, PolicyContext

__all__ = ["Learned", "job_terms"]


def job_terms(job, now_s: float) -> tuple[float, float, float, float]:
    """(d, q, u, g) of one job at ``now_s`` (see the module docstring)."""
    if job.spec.duration_s is not None:
        d = max(job.spec.duration_s - job.progress_s, 0.0)
    else:
        d = job.executed_s
    q = max(now_s - job.spec.submit_time_s - job.executed_s, 0.0)
    return d, q, float(job.spec.user_priority), float(job.num_gpus)


class Learned(Policy):
    name = "learned"
    preemptive = False
    drifts_while_running = True

    def __init__(self, expression: Optional[Union[Node, str]] = None):
        if expression is None:
            expression = PUBLISHED_EXAMPLE
        self.expression = parse_expression(expression) if isinstance(expression, str) else expression
        self._cache_key = ("learned", id(self))

    def prepare(self, jobs, ctx: PolicyContext) -> None:
        if not jobs:
            return
        terms = np.array([job_terms(j, ctx.now_s) for j in jobs], dtype=float)
        values = np.asarray(self.expression.evaluate(terms[:, 0], terms[:, 1], terms[:, 2], terms[:, 3]),
                            dtype=float)
        values = np.broadcast_to(values, (len(jobs),))
        ctx.cache[self._cache_key] = {j.job_id: float(v) for j, v in zip(jobs, values)}

    def value(self, job, ctx: PolicyContext) -> float:
        cached = ctx.cache.get(self._cache_key)
        if cached is not None and job.job_id in cached:
            v = cached[job.job_id]
        else:
            v = float(self.expression.evaluate(*job_terms(job, ctx.now_s)))
        return math.inf if math.isnan(v) else v

    def sort_key(self, job, ctx: PolicyContext) -> tuple:
        return (self.value(job, ctx), job.index)

    def display_value(self, job, ctx: PolicyContext) -> float:
        return self.value(job, ctx)

