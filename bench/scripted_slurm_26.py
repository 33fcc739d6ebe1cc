"""The scripted slurmctld of bench/scripted_slurm.py answering in 26.05's shapes.

The cluster, its scheduler and its levers are ScriptedSlurm's (its records stay in
22.05's shape inside); only what the backend reads differs, as a 26.05 slurmctld
prints it (tests/fixtures/slurm/26.05):
- ``squeue --json``: each record the recorded 26.05 record of its kind (job 5 running,
  job 10 pending) with the job's own fields in 26.05's forms (numbers as
  ``{"set", "infinite", "number"}``, ``job_state`` a list, ``job_resources.nodes``),
  ``shared: []`` for every job (data_parser v0.0.45: the JSON does not say
  --exclusive), about 10 KB a record as 26.05 prints it;
- every read is a later pass of slurmctld's scheduler: each pending record's
  ``priority`` and ``priority_by_partition`` move (the age factor grows) and its
  ``last_sched_evaluation`` is the clock's (``now``), as between two reads of a real
  26.05 with PriorityType=priority/multifactor (tests/fixtures/slurm/26.05/rounds), and
  the document's ``last_backfill`` / ``last_update`` (slurmctld's clock) are ``now``;
- ``scontrol show job -o ID``: the line 26.05 prints, trimmed to the fields the
  backend reads (JobId, ArrayJobId, ArrayTaskId, OverSubscribe, Exclusive); one job
  in EXCLUSIVE_EVERY asked --exclusive.
``sinfo --json`` stays in 22.05's shape (one record per node either way; nodes are a
twentieth of the jobs). Each record's text is rendered once per change of the
record and the moving numbers are put into it per read, so a read costs a join, not
a json.dumps of a gigabyte (the time is outside the controller's anyway).
"""
from __future__ import annotations

import json
from pathlib import Path

from bench.scripted_slurm import ScriptedSlurm
from slurm_plugin.backend import CommandResult

FIXTURES_26 = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "slurm" / "26.05"
EXCLUSIVE_EVERY = 50
# the record's keys ScriptedSlurm sets per job (a change of any renders the record again)
_OWN_KEYS = ("job_id", "nodes", "tres_per_node", "node_count", "tasks", "cpus", "submit_time", "eligible_time",
             "start_time", "end_time", "partition", "user_name", "comment", "admin_comment", "restart_cnt",
             "job_state", "state_reason", "requeue", "batch_flag", "required_nodes", "excluded_nodes", "max_nodes",
             "array_job_id", "array_task_id", "array_task_string", "array_max_tasks", "name")
# placeholders for the numbers that move every read (no job field holds these values)
_EVALUATED, _PRIORITY, _BY_PARTITION = 987654301, 987654302, 987654303
_HEAD, _TAIL = '{\n  "jobs": [\n', "\n  ]\n}"


def _number(value) -> dict:
    return {"set": value is not None, "infinite": False, "number": 0 if value is None else value}


class ScriptedSlurm26(ScriptedSlurm):
    """ScriptedSlurm whose answers are 26.05's (see the module's docstring)."""

    release = "26.05"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        doc = json.loads((FIXTURES_26 / "squeue.json").read_text())
        self.meta26 = {k: v for k, v in doc.items() if k != "jobs"}
        self.templates26 = {"RUNNING": next(j for j in doc["jobs"] if j["job_id"] == 5),
                            "PENDING": next(j for j in doc["jobs"] if j["job_id"] == 10)}
        self.passes = 0  # scheduler passes so far: one a read
        self._rendered: dict[int, tuple[tuple, list[str]]] = {}  # job id -> (its fields, text pieces)

    def _record26(self, record: dict) -> dict:
        state = record["job_state"]
        out = dict(self.templates26["RUNNING" if state == "RUNNING" else "PENDING"])
        for key in _OWN_KEYS:
            if key not in record or key not in out:
                continue
            value, like = record[key], out[key]
            if isinstance(like, dict) and "number" in like:
                value = _number(value)
            elif key == "job_state":
                value = [value]
            elif key == "tres_per_node":
                value = value.replace("gres:", "gres/", 1)
            out[key] = value
        out["gres_detail"] = list(record.get("gres_detail") or [])
        if state == "RUNNING":
            names = [item["nodename"] for item in record["job_resources"]["allocated_nodes"]]
            resources = json.loads(json.dumps(out["job_resources"]))
            allocation = resources["nodes"]["allocation"][0]
            resources["nodes"].update(count=len(names), list=",".join(names),
                                      allocation=[dict(allocation, index=i, name=n) for i, n in enumerate(names)])
            out["job_resources"] = resources
        elif state == "PENDING":
            out["last_sched_evaluation"] = _number(_EVALUATED)
            out["priority"] = _number(_PRIORITY)
            out["priority_by_partition"] = [{"partition": record["partition"].split(",")[0],
                                             "priority": _BY_PARTITION}]
        return out

    def _pieces(self, job_id: int, record: dict) -> list[str]:
        """The record's text split at its moving numbers (one piece for a running job)."""
        fields = tuple(str(record.get(key)) for key in _OWN_KEYS) + (str(record.get("job_resources")),)
        kept = self._rendered.get(job_id)
        if kept is not None and kept[0] == fields:
            return kept[1]
        text = json.dumps({"jobs": [self._record26(record)]}, indent=2)[len(_HEAD):-len(_TAIL)]
        pieces = [text]
        for marker in (_EVALUATED, _PRIORITY, _BY_PARTITION):
            head, _, tail = pieces[-1].partition(str(marker))
            if tail:
                pieces[-1:] = [head, tail]
        self._rendered[job_id] = (fields, pieces)
        return pieces

    def _text(self, which: str) -> str:
        if which != "squeue":
            return super()._text(which)
        if which not in self._texts:
            self._update_array_records()
            self.passes += 1
            evaluated = str(self.now)
            texts = []
            for job_id, record in self.jobs.items():
                pieces = self._pieces(job_id, record)
                if len(pieces) == 1:
                    texts.append(pieces[0])
                else:
                    priority = str(1000 + self.site_factors.get(job_id, 0) + self.passes)
                    texts.append(pieces[0] + evaluated + pieces[1] + priority + pieces[2] + priority + pieces[3])
            for gone in self._rendered.keys() - self.jobs.keys():
                del self._rendered[gone]
            tail = json.dumps({**self.meta26, "last_backfill": _number(self.now), "last_update": _number(self.now)},
                              indent=2)
            self._texts[which] = _HEAD + ",\n".join(texts) + "\n  ],\n" + tail[2:]
        return self._texts[which]

    def _answer(self, argv: list[str]) -> CommandResult:
        if argv[:4] == ["scontrol", "show", "job", "-o"]:
            self.calls["scontrol show job"] += 1
            job_id = self._record(argv[4], split=False)
            record = self.jobs.get(job_id) if job_id is not None else None
            if record is None:
                return CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
            exclusive = job_id % EXCLUSIVE_EVERY == 7
            array = ""
            if record.get("array_job_id"):
                task = record.get("array_task_id")
                tasks = record.get("array_task_string") if task is None else task
                array = f" ArrayJobId={record['array_job_id']} ArrayTaskId={tasks}"
            return CommandResult(0, f"JobId={job_id}{array} JobName=wrap JobState={record['job_state']} "
                                    f"OverSubscribe={'NO' if exclusive else 'OK'} "
                                    f"Exclusive={'NODE' if exclusive else 'NO'}\n", "")
        return super()._answer(argv)
