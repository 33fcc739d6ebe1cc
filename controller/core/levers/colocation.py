"""Co-location policy for shared GPUs (MPS SM-quota tiers). Pure functions, no I/O.

Following DetShare, a shared GPU is split by capping the SMs each process may use
(MPS active-thread percentage), never by slicing kernels, so co-location does not
change results. The rules, each of which shows up as a reason on the actions:

  * Tiers: a job gets one of ``policy.tiers`` (percent of the GPU's SMs). The class
    ``latency`` (job comment ``tiresias:class=latency``) gets the large tier
    ``policy.latency_tier``; other jobs get the tier they asked for (``--gres=mps:N``
    with 100 mps per GPU) when it is a tier, else ``policy.default_tier``.
  * Capacity: the tiers on one GPU sum to at most 100 and at most
    ``policy.max_tenants`` jobs share it; at most one latency-class job per GPU.
  * Users: one user per GPU unless ``policy.allow_multi_user``. MPS servers of
    different users on one GPU are time-sliced, not concurrent; when allowed, the
    action's reason says so.
  * Quota changes: an MPS quota is fixed for a client's life, so a running job's
    tier changes only through checkpoint + requeue, and only for requeueable jobs.

Placement is best fit: among the GPUs that admit the job, prefer those already
holding this user's jobs, then the least free SM share left, then (node, gpu) order,
so the same input always gives the same plan.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from controller.core.hints import CLASSES, parse_hints

KNOWN_CLASSES = CLASSES


@dataclass(frozen=True)
class ColocationPolicy:
    """Tiers and limits; percentages are of one GPU's SMs."""

    tiers: tuple[int, ...] = (10, 25, 50, 75, 100)
    default_tier: int = 25
    latency_tier: int = 75
    max_tenants: int = 4
    allow_multi_user: bool = False


@dataclass(frozen=True)
class Tenant:
    """A job already running on a shared GPU with its tier (percent)."""

    job_id: str
    user: str
    tier: int
    job_class: str = "batch"


@dataclass(frozen=True)
class SharedGpu:
    """One GPU that takes MPS jobs, and who runs on it now."""

    node: str
    gpu: int
    tenants: tuple[Tenant, ...] = ()

    @property
    def used_percent(self) -> int:
        return sum(t.tier for t in self.tenants)


@dataclass(frozen=True)
class ShareRequest:
    """A pending job that asked for a share of a GPU. ``requested_percent`` is its
    ``--gres=mps:N`` (N per GPU with 100 mps per GPU), None when not given."""

    job_id: str
    user: str
    comment: str = ""
    requested_percent: Optional[int] = None


@dataclass(frozen=True)
class ColocationAction:
    """``kind``: "place" (node, gpu, tier set), "wait", "requeue" (quota change) or "keep"."""

    kind: str
    job_id: str
    reason: str
    node: Optional[str] = None
    gpu: Optional[int] = None
    tier: Optional[int] = None


def job_class(comment: str) -> tuple[str, Optional[str]]:
    """``tiresias:class=latency`` in a job comment -> ("latency", None); a bad hint
    -> ("batch", why); no hint -> ("batch", None). Grammar: controller.core.hints."""
    hints = parse_hints(comment)
    if hints.problem is not None:
        return "batch", f"{hints.problem}; treated as batch"
    return hints.job_class or "batch", None


def choose_tier(request: ShareRequest, policy: ColocationPolicy) -> tuple[int, str, str]:
    """(tier percent, job class, reason) for a request."""
    klass, problem = job_class(request.comment)
    prefix = f"{problem}; " if problem else ""
    if klass == "latency":
        return policy.latency_tier, klass, f"{prefix}latency-critical class gets the large tier {policy.latency_tier}%"
    wanted = request.requested_percent
    if wanted is not None and wanted in policy.tiers:
        return wanted, klass, f"{prefix}requested tier {wanted}%"
    if wanted is None:
        return policy.default_tier, klass, f"{prefix}no share requested: default tier {policy.default_tier}%"
    return (policy.default_tier, klass,
            f"{prefix}requested {wanted}% is not a tier {list(policy.tiers)}: default tier {policy.default_tier}%")


def admits(gpu: SharedGpu, user: str, tier: int, klass: str, policy: ColocationPolicy) -> Optional[str]:
    """None when the GPU can take this job, else why not."""
    if len(gpu.tenants) >= policy.max_tenants:
        return f"already {len(gpu.tenants)} tenants (max {policy.max_tenants})"
    if gpu.used_percent + tier > 100:
        return f"{gpu.used_percent}% used + {tier}% > 100%"
    other_users = sorted({t.user for t in gpu.tenants} - {user})
    if other_users and not policy.allow_multi_user:
        return f"used by {', '.join(other_users)} (one user per GPU: MPS time-slices different users)"
    if klass == "latency" and any(t.job_class == "latency" for t in gpu.tenants):
        return "already holds a latency-critical job"
    return None


def plan_colocation(pending: list[ShareRequest], gpus: list[SharedGpu],
                    policy: ColocationPolicy = ColocationPolicy()) -> list[ColocationAction]:
    """One action per pending request, in the given (priority) order; a placement
    occupies its share for the requests after it."""
    state = {(g.node, g.gpu): g for g in gpus}
    actions = []
    for request in pending:
        tier, klass, tier_reason = choose_tier(request, policy)
        refusals = []
        candidates = []
        for key in sorted(state):
            gpu = state[key]
            why_not = admits(gpu, request.user, tier, klass, policy)
            if why_not is not None:
                refusals.append(f"{gpu.node}/gpu{gpu.gpu}: {why_not}")
                continue
            same_user = any(t.user == request.user for t in gpu.tenants)
            free_after = 100 - gpu.used_percent - tier
            candidates.append((not same_user, free_after, key))
        if not candidates:
            detail = "; ".join(refusals) if refusals else "no shared GPUs"
            actions.append(ColocationAction("wait", request.job_id, f"{tier_reason}; no GPU admits it ({detail})",
                                            tier=tier))
            continue
        _, free_after, key = min(candidates)
        gpu = state[key]
        users = {t.user for t in gpu.tenants} | {request.user}
        note = "; shares with other users: MPS time-slices them" if len(users) > 1 else ""
        reason = (f"{tier_reason}; best fit on {gpu.node}/gpu{gpu.gpu} "
                  f"({gpu.used_percent}% used, {free_after}% left){note}")
        actions.append(ColocationAction("place", request.job_id, reason, node=gpu.node, gpu=gpu.gpu, tier=tier))
        state[key] = replace(gpu, tenants=gpu.tenants + (Tenant(request.job_id, request.user, tier, klass),))
    return actions


def quota_change(job_id: str, current_tier: int, wanted_tier: int, requeueable: bool,
                 policy: ColocationPolicy = ColocationPolicy()) -> ColocationAction:
    """A running job's tier can only change by checkpoint + requeue (an MPS quota is
    fixed for a client's life; set_active_thread_percentage affects later clients only)."""
    if wanted_tier not in policy.tiers:
        return ColocationAction("keep", job_id, f"wanted {wanted_tier}% is not a tier {list(policy.tiers)}",
                                tier=current_tier)
    if wanted_tier == current_tier:
        return ColocationAction("keep", job_id, f"already at tier {current_tier}%", tier=current_tier)
    if not requeueable:
        return ColocationAction("keep", job_id, f"tier {current_tier}% -> {wanted_tier}% needs a requeue and the "
                                f"job is not requeueable", tier=current_tier)
    return ColocationAction("requeue", job_id, f"tier {current_tier}% -> {wanted_tier}%: an MPS quota is fixed "
                            f"for a client's life, so checkpoint + requeue", tier=wanted_tier)


__all__ = ["ColocationPolicy", "Tenant", "SharedGpu", "ShareRequest", "ColocationAction", "job_class",
           "choose_tier", "admits", "plan_colocation", "quota_change"]
