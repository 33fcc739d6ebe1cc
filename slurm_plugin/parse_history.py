"""Finished jobs: ``sacct --json`` into SlurmJob records (slurm_plugin.records), for the
accounting reader (slurm_plugin.accounting).
"""
from __future__ import annotations

from typing import Any

from slurm_plugin.grammar import SlurmParseError, expand_hostlist, quoted, untyped_first
from slurm_plugin.records import (SlurmJob, collect_records, count_value, epoch_value, finish_times, int_value,
    load_document, slurm_number, split_state, str_value, time_limit_of)


# --------------------------------------------------------------------------
# sacct --json

def parse_sacct_json(text: str | bytes, errors: list | None = None) -> list[SlurmJob]:
    """Job records from ``sacct --json`` (22.05 and 23.02+ shapes).

    With ``sacct -D`` a requeued job appears once per run: earlier runs have
    state REQUEUED. GPUs come from ``tres.allocated`` when the job ran, else
    ``tres.requested``.
    """
    _, records = load_document(text, ("jobs",), "sacct --json")
    return collect_records(records, _sacct_job, errors, "job_id", "jobs")


def _tres_list_counts(items: Any, field_name: str) -> dict[str, int]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise SlurmParseError(f"{field_name}: expected a list, got {quoted(items)}")
    untyped: dict[str, int] = {}
    typed: dict[str, int] = {}
    for item in items:
        if not isinstance(item, dict):
            raise SlurmParseError(f"{field_name}: expected TRES objects, got {quoted(item)}")
        if item.get("type") != "gres" or not item.get("name"):
            continue
        name, _, gtype = str(item["name"]).partition(":")
        count = int_value(item.get("count"), f"{field_name}.count")
        target = typed if gtype else untyped
        target[name] = target.get(name, 0) + count
    return untyped_first(untyped, typed)


def _sacct_job(r: dict) -> SlurmJob:
    if r.get("job_id") is None:
        raise SlurmParseError("job_id: missing")
    job_id = str(int_value(r["job_id"], "job_id"))
    st = r.get("state")
    if not isinstance(st, dict):
        raise SlurmParseError(f"state: expected an object, got {quoted(st)}")
    state, flags = split_state(st.get("current"), "state.current")
    if "REQUEUED" in flags:
        # 24.11 writes a run that a requeue ended as ["PENDING", "REQUEUED"] (the job's
        # state after it); 22.05 and `sacct -P` say REQUEUED: the run is over either way.
        state, flags = "REQUEUED", flags - {"REQUEUED"}
    t = r.get("time") or {}
    if not isinstance(t, dict):
        raise SlurmParseError(f"time: expected an object, got {quoted(t)}")
    tres = r.get("tres") or {}
    allocated = _tres_list_counts(tres.get("allocated"), "tres.allocated")
    requested = _tres_list_counts(tres.get("requested"), "tres.requested")
    counts = allocated if allocated else requested
    start, end = finish_times(state, epoch_value(t.get("start"), "time.start"), epoch_value(t.get("end"), "time.end"))
    limit_min = slurm_number(t.get("limit"), "time.limit")
    comment = r.get("comment")
    if isinstance(comment, dict):  # {administrator, job, system}
        comment = comment.get("job")
    steps = r.get("steps") or []
    batch = any(isinstance(s, dict) and (s.get("step") or {}).get("name") == "batch" for s in steps)
    names = expand_hostlist(str_value(r.get("nodes"), "nodes"))
    # user and account are the record's own (association.user only when user is
    # missing): 26.05 leaves association.user and .account "", 24.11 repeated them there.
    return SlurmJob(
        job_id=job_id,
        name=str_value(r.get("name"), "name"),
        user=str_value(r.get("user"), "user") or str_value((r.get("association") or {}).get("user"), "association.user"),
        account=str_value(r.get("account"), "account"),
        partition=str_value(r.get("partition"), "partition"),
        state=state,
        state_flags=flags,
        reason=str_value(st.get("reason"), "state.reason"),
        gpus=counts.get("gpu", 0),
        mps=counts.get("mps", 0),
        nodes=names,
        node_count=count_value(r.get("allocation_nodes"), "allocation_nodes") or len(names),
        submit_time=epoch_value(t.get("submission"), "time.submission"),
        start_time=start,
        end_time=end,
        restart_count=count_value(r.get("restart_cnt"), "restart_cnt"),
        requeue=None,
        batch=batch,
        comment=str_value(comment, "comment.job"),
        priority=int_value(r.get("priority"), "priority") if r.get("priority") is not None else None,
        required_nodes=[],
        excluded_nodes=[],
        time_limit_s=time_limit_of(limit_min),
    )
