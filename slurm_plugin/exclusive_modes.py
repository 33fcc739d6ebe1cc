"""26.05's --exclusive modes (``ExclusiveModes``, a part of slurm_plugin.observe's
SlurmObserver): its ``squeue --json`` no longer says whether a pending job asked for
whole nodes, ``scontrol show job -o`` does. The modes of the pending jobs are read as
those jobs show up, a few ids a round, or one dump of every job when many are new.
"""
from __future__ import annotations

from typing import Optional

from controller.service.acting.backend import BackendUnavailable
from slurm_plugin.commands import one_line
from slurm_plugin.parse_jobs import parse_show_job_sharing

# 26.05+: `scontrol show job -o ID` (one id a call: 22.05 prints nothing for "1,2") for at
# most this many pending jobs of unknown --exclusive mode per observation, the rest at the
# next; each call waits at most SHOW_JOB_TIMEOUT_S (capped by command_timeout_s), and the
# first that fails to answer ends this observation's reads: a slow slurmctld costs one wait.
MAX_SHOW_JOB_IDS = 20
SHOW_JOB_TIMEOUT_S = 5.0
# ... unless the unknown are many, and at least this share of the pending jobs (a controller
# just started, or a submit burst): then one `scontrol show job -o` of every job (one RPC,
# parsed once) reads them all. Twenty a round, a fresh controller at 10,000 pending jobs
# took 500 rounds to learn them, and no job could cause a preemption meanwhile.
SHOW_ALL_JOBS_SHARE = 0.10


class ExclusiveModes:
    """SlurmObserver's reads of the --exclusive modes: ``_sharing`` (job id -> (its
    submit time, its mode)) and ``_sharing_tried`` (asked, not answered), set up by
    SlurmBackend.__init__."""

    def _learn_sharing(self, pending: set[str], submitted: dict[str, Optional[float]],
                       skipped: list[str]) -> None:
        """Forget the --exclusive modes of jobs no longer ``pending`` (in the configured
        partitions), and read those of ``submitted`` (pending jobs whose mode is not known,
        id -> submit time, in squeue's order), at most MAX_SHOW_JOB_IDS of them
        (never asked first). Modes not read stay unknown: such a job is never a reason to
        preempt (its request unreported) until a later read."""
        sharing, tried = self._sharing, self._sharing_tried
        for job_id in sharing.keys() - pending:
            del sharing[job_id]
        tried.intersection_update(pending)
        if not submitted:
            return
        # (only the never-asked count: jobs a dump did not answer go by their ids, not
        # into another dump of every job each round)
        never_asked = sum(1 for job_id in submitted if job_id not in tried)
        if never_asked > MAX_SHOW_JOB_IDS and never_asked >= SHOW_ALL_JOBS_SHARE * len(pending):
            modes = self._read_all_sharing(skipped)  # None (no answer): all unknown this round, one wait
            for job_id in submitted if modes is not None else ():
                if job_id in modes:
                    sharing[job_id] = (submitted[job_id], modes[job_id])
                    tried.discard(job_id)
                else:
                    tried.add(job_id)
            return
        ordered = sorted(submitted, key=lambda job_id: job_id in tried)  # stable: squeue's order within each
        asked = ordered[:MAX_SHOW_JOB_IDS]
        modes, reached = self._read_sharing(asked, skipped)
        for job_id in asked[:reached]:
            if job_id in modes:
                sharing[job_id] = (submitted[job_id], modes[job_id])
                tried.discard(job_id)
            else:
                tried.add(job_id)
        if len(ordered) > len(asked):
            skipped.append(f"scontrol show job: {len(ordered) - len(asked)} pending jobs' --exclusive "
                           f"left for the next observations (at most {MAX_SHOW_JOB_IDS} read each)")

    def _read_all_sharing(self, skipped: list[str]) -> Optional[dict[str, str]]:
        """Every job's --exclusive mode from one `scontrol show job -o` (keyed as planned:
        parse_show_job_sharing); None when slurmctld did not answer (those modes stay
        unknown this round, the observation stands)."""
        try:
            result = self._run(["scontrol", "show", "job", "-o"], self.command_timeout_s)
        except BackendUnavailable as exc:
            skipped.append(f"scontrol show job: {one_line(str(exc))}; --exclusive of the new pending jobs "
                           "unknown this round")
            return None
        if result.returncode != 0:
            skipped.append(f"scontrol show job: exited {result.returncode}: {one_line(result.stderr)}; "
                           "--exclusive of the new pending jobs unknown this round")
            return None
        return parse_show_job_sharing(result.stdout)

    def _read_sharing(self, job_ids: list[str], skipped: list[str]) -> tuple[dict[str, str], int]:
        """The --exclusive/--oversubscribe mode of each of ``job_ids`` (planned ids) that
        `scontrol show job -o ID` answers (parse_show_job_sharing keys a task's line
        "ARRAYID_TASKID" as it was asked), and how many of them were asked. A job that has
        ended answers nothing; a call that times out or cannot reach slurmctld ends the
        reads (the rest stay unknown, not asked), never the observation."""
        modes: dict[str, str] = {}
        timeout_s = min(self.command_timeout_s, SHOW_JOB_TIMEOUT_S)
        reached = 0
        for job_id in job_ids:
            reached += 1
            try:
                result = self._run(["scontrol", "show", "job", "-o", job_id], timeout_s)
            except BackendUnavailable as exc:
                skipped.append(f"scontrol show job {job_id}: {one_line(str(exc))}; --exclusive of "
                               f"{len(job_ids) - len(modes)} pending jobs unknown this round")
                break
            if result.returncode != 0:
                if self._unreachable(result):
                    skipped.append(f"scontrol show job {job_id}: slurmctld unreachable: "
                                   f"{one_line(result.stderr)}; --exclusive unknown this round")
                    break
                continue  # ended since squeue read it ("Invalid job id specified")
            answer = parse_show_job_sharing(result.stdout)
            if job_id in answer:
                modes[job_id] = answer[job_id]
        return modes, reached
