"""The round's GPU sharing: controller.core.levers.colocation applied to MPS jobs
(``--gres=mps:N``, 100 shares per GPU).

Pending MPS jobs whose planned tier differs from their request get it through
``set_mps_share`` (pending only: an MPS quota is fixed for a client's life). A job no
GPU admits now is held (``HoldJob``: Slurm would otherwise start it on a GPU
the policy refused, e.g. a second user's job with mps_allow_multi_user false) and
released (``ReleaseHold``) once a GPU admits it; restore releases what is left. Only
the holds this controller set are ever released: they are recorded in the store
(controller.service.acting.restore.RecordingBackend), so a restarted controller knows them. A
job someone else holds (``sbatch -H``, a user's or an admin's ``scontrol hold``) gets
its tier like any pending job but is never held nor released: an operator's hold on it
would turn the user's hold into the controller's, and its release would then drop it. Running jobs are never changed: a
different wanted tier is logged as quota_change's advice, never requeued for. Each
decision is logged once per (job, outcome), so shadow mode does not repeat a
would-share every round.

The rule is pure (controller.core.levers.sharing: SharingBook, plan_sharing, share_levers,
hold_levers, shared_gpus), planned by the lever planner and carried out by
controller.service.round.levers; this module reads Slurm's pending reasons into its view.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable, Optional

from controller.core.levers import sharing as rule
from controller.core.levers.sharing import SharingBook, SharingView
from controller.service.acting.backend import numeric_id
from controller.service.acting.backend import slurm_wait
from controller.service.acting.backend import Observation, ObservedJob
from controller.core.levers.colocation import SharedGpu
from controller.service.ops.config import Config
from controller.service.acting.executor import LeverExecutor
from controller.service.ops.report import RoundReport
from controller.service.round import levers

log = logging.getLogger("tiresias.controller")


class GpuSharing:
    """The book (controller.core.levers.sharing.SharingBook): ``logged`` (job id ->
    signature of its last logged share decision), ``held``, ``waiting``, ``placed``."""

    def __init__(self, config: Config, executor: LeverExecutor, log_once: Callable[[str], None] = log.warning,
                 held: Iterable[str] = (), book: Optional[SharingBook] = None):
        """``book``: the LeverBook's (controller.core.levers.book), its holds loaded from
        the store; otherwise a new one holding ``held``."""
        self.config = config
        self.executor = executor
        self.log_once = log_once
        self.book = book if book is not None else SharingBook(held)

    # the book's sets, under the names callers know
    logged = property(lambda self: self.book.logged)
    held = property(lambda self: self.book.held)
    waiting = property(lambda self: self.book.waiting)
    placed = property(lambda self: self.book.placed)

    def apply(self, observation: Observation, report: RoundReport) -> None:
        """The round's shares and holds (controller.service.round.levers.share)."""
        levers.share(levers.planner_for(self.config), self, observation, report)

    def view(self, observation: Observation) -> SharingView:
        """What Slurm's pending reasons say of the pending MPS jobs (controller.core.levers.sharing.SharingView)."""
        return rule.sharing_view(observation.jobs, lambda job: job.waits_for, slurm_wait)


def shared_gpus(nodes, running: list[tuple[ObservedJob, int]], policy,
                id_key: Optional[Callable[[str], tuple]] = None) -> list[SharedGpu]:
    """controller.core.levers.sharing.shared_gpus in Slurm's numeric job order."""
    return rule.shared_gpus(nodes, running, policy, id_key or numeric_id)
