"""What the store keeps of jobs: each job's persisted service (``job_service``, one
``JobRecord`` a job, written only where it changed), the finished jobs' service
samples the Gittins/LAS estimates learn from, and the usage records the node spool
collects. Units: times are epoch seconds, service GPU-seconds."""
from __future__ import annotations

import json
import operator
import threading
import time
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Iterable, Optional

from sqlalchemy import Boolean, Column, Float, Index, Integer, String, Table, Text, bindparam, select, update
from sqlalchemy.engine import Connection

from controller.service.state.engine import insert_ignore, metadata, upsert

job_service = Table(
    "job_service", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("job_id", String(128), primary_key=True),
    Column("user", String(128), nullable=False, default=""),
    Column("partition", String(128), nullable=False, default=""),
    Column("num_gpus", Integer, nullable=False),
    Column("submit_time_s", Float, nullable=False),
    Column("first_start_s", Float),
    Column("attained_gpu_s", Float, nullable=False),
    Column("queue_service_gpu_s", Float, nullable=False),
    Column("executed_s", Float, nullable=False),
    Column("executed_since_promotion_s", Float, nullable=False),
    Column("waited_since_promotion_s", Float, nullable=False),
    Column("last_observed_s", Float),
    Column("last_running", Boolean, nullable=False),
    Column("restart_count", Integer, nullable=False),
    Column("preemptions", Integer, nullable=False),
    Column("promotions", Integer, nullable=False),
    Column("moves", Integer, nullable=False),
    Column("skew", Float, nullable=False),
    Column("level", Integer, nullable=False),
    Column("state", String(32), nullable=False),
    Column("finished_s", Float),
    Column("end_state", String(64)),
    Column("queue_level", Integer),
    Column("queue_entry", Float),
)

service_samples = Table(
    "service_samples", metadata,
    Column("cluster", String(128), primary_key=True),
    Column("job_id", String(128), primary_key=True),
    Column("gpu_s", Float, nullable=False),
    Column("finished_s", Float, nullable=False),
    # True: the job was cut short (cancelled, timed out, node failure): its service is
    # a lower bound of what it needed, a right-censored sample (Kaplan-Meier).
    Column("censored", Boolean, nullable=False, default=False),
    # what Slurm knew of the job at submit (dgittins conditions on it; '' unknown)
    Column("user", String(128)),
    Column("account", String(128)),  # the account, else the partition
    Column("job_name", String(256)),
    Column("num_gpus", Integer),
    Index("ix_service_samples_finished", "cluster", "finished_s"),
)

usage_records = Table(
    "usage_records", metadata,
    Column("record_id", String(256), primary_key=True),
    Column("fields_json", Text, nullable=False),
    Column("added_s", Float, nullable=False),
)


@dataclass(slots=True)
class JobRecord:
    """One job's persisted service. Times in epoch seconds, service in GPU-seconds.

    ``attained_gpu_s`` is never reset; ``queue_service_gpu_s`` is reset by a
    starvation promotion. ``restart_count`` is the last Slurm restart count seen;
    ``preemptions`` counts the requeues this controller did.
    """

    job_id: str
    num_gpus: int
    submit_time_s: float
    user: str = ""
    partition: str = ""
    first_start_s: Optional[float] = None
    attained_gpu_s: float = 0.0
    queue_service_gpu_s: float = 0.0
    executed_s: float = 0.0
    executed_since_promotion_s: float = 0.0
    waited_since_promotion_s: float = 0.0
    last_observed_s: Optional[float] = None
    last_running: bool = False
    restart_count: int = 0
    preemptions: int = 0
    promotions: int = 0
    moves: int = 0
    skew: float = 0.0
    level: int = 0
    state: str = "PENDING"
    finished_s: Optional[float] = None
    end_state: Optional[str] = None
    queue_level: Optional[int] = None  # the MLFQ place (controller.core.queues): a restart keeps the order
    queue_entry: Optional[float] = None


JOB_FIELDS = tuple(f.name for f in fields(JobRecord))
_record_values = operator.attrgetter(*JOB_FIELDS)  # a JobRecord's fields as one tuple, in JOB_FIELDS order
# executemany: SET takes the columns each parameter row names besides the key.
_UPDATE_JOB_BY_KEY = update(job_service).where(job_service.c.cluster == bindparam("key_cluster"),
                                               job_service.c.job_id == bindparam("key_job_id"))


_UPDATE_SQL: dict[tuple[str, tuple[str, ...]], tuple[str, Optional[Callable]]] = {}
_ROW_INDEX = {"key_cluster": 0, "key_job_id": 1, **{name: 2 + i for i, name in enumerate(JOB_FIELDS)}}

def _update_job_rows(conn: Connection, cluster: str, columns: tuple[str, ...], group: list[tuple]) -> None:
    """UPDATE ``columns`` of these rows (JobRecord value tuples) in one executemany, in
    the driver's own SQL compiled once per column set: SQLAlchemy's parameter handling
    per row cost more than the write itself (thousands of rows a round). The values
    are plain floats, ints, strings, booleans and None, which both drivers take as is."""
    cached = _UPDATE_SQL.get((conn.dialect.name, columns))
    if cached is None:
        compiled = _UPDATE_JOB_BY_KEY.compile(dialect=conn.dialect, column_keys=list(columns))
        pick = operator.itemgetter(*(_ROW_INDEX[name] for name in compiled.positiontup)) \
            if compiled.positional else None
        cached = _UPDATE_SQL[(conn.dialect.name, columns)] = (compiled.string, pick)
    sql, pick = cached
    if pick is not None:
        params = [pick((cluster, str(values[0]), *values)) for values in group]
    else:
        at = [(name, _ROW_INDEX[name] - 2) for name in columns]
        params = [{"key_cluster": cluster, "key_job_id": str(values[0]), **{name: values[i] for name, i in at}}
                  for values in group]
    conn.exec_driver_sql(sql, params)


def _row_to_record(row: Any) -> JobRecord:
    values = {name: row[name] for name in JOB_FIELDS}
    values["last_running"] = bool(values["last_running"])
    return JobRecord(**values)


class JobRows:
    """The job, sample and usage-record methods of ``Store`` (a part of it: ``self`` is the store)."""

    def _start_dirty_tracking(self) -> None:
        # cluster -> job id -> the job_service row as this process last committed or loaded
        # it: save_jobs writes only records that differ (dirty tracking). Updated only
        # after a commit, so a rolled-back write is written again. (Per cluster: a
        # (cluster, job id) key was a tuple a job held.)
        self._committed_rows: dict[str, dict[str, tuple]] = {}
        self._committed_lock = threading.Lock()

    # -- job service --------------------------------------------------------------

    def load_jobs(self, cluster: str, include_finished: bool = True) -> dict[str, JobRecord]:
        """Every stored job of ``cluster`` by job id (finished ones unless excluded)."""
        query = select(job_service).where(job_service.c.cluster == cluster)
        if not include_finished:
            query = query.where(job_service.c.finished_s.is_(None))
        with self._tx() as conn:
            rows = conn.execute(query).mappings().all()
        records = {row["job_id"]: _row_to_record(row) for row in rows}
        with self._committed_lock:
            self._committed_rows.setdefault(cluster, {}).update(
                (job_id, _record_values(record)) for job_id, record in records.items())
        return records

    def save_jobs(self, cluster: str, records: Iterable[JobRecord]) -> int:
        """Upsert those of these records that differ from what this process last
        committed or loaded, in one transaction; returns how many were written."""
        changed: dict[str, tuple] = {}  # job id -> the values written
        new_rows = []  # not committed by this process yet: upserted whole
        updates: dict[tuple[bool, ...], list[tuple]] = {}  # which fields changed -> the records' values
        committed_row = self._committed_rows.get(cluster, {}).get
        for record in records:
            job_id = record.job_id if type(record.job_id) is str else str(record.job_id)
            if job_id in changed:
                continue  # listed twice (running, and read whole): written once
            old = committed_row(job_id)
            values = _record_values(record)
            if old == values:
                continue
            changed[job_id] = values
            if old is None:
                row = dict(zip(JOB_FIELDS, values))
                row.update(cluster=cluster, job_id=job_id, last_running=bool(row["last_running"]))
                new_rows.append(row)
                continue
            # Most rounds change a job's clocks only (last_observed_s and one or four
            # service/wait sums): updating those columns costs a fraction of the upsert.
            updates.setdefault(tuple(map(operator.ne, old, values)), []).append(values)
        if not changed:
            return 0
        with self._tx() as conn:
            if new_rows:
                upsert(conn, job_service, new_rows, ["cluster", "job_id"], list(JOB_FIELDS[1:]))
            for mask, group in updates.items():
                _update_job_rows(conn, cluster, tuple(name for name, differs in zip(JOB_FIELDS, mask) if differs),
                                 group)
            self._after_commit(lambda: self._remember(cluster, changed))
        return len(changed)

    def _remember(self, cluster: str, rows: dict[str, tuple]) -> None:
        with self._committed_lock:
            self._committed_rows.setdefault(cluster, {}).update(rows)

    def _forget(self, cluster: str, job_id: str) -> None:
        """The row was written another way: the next save_jobs writes the record whole."""
        with self._committed_lock:
            self._committed_rows.get(cluster, {}).pop(job_id, None)

    def known_job_ids(self, cluster: str, job_ids: Iterable[str]) -> set[str]:
        """Those of ``job_ids`` that have a row (active or finished) in ``cluster``."""
        wanted = [str(j) for j in job_ids]
        found: set[str] = set()
        with self._tx() as conn:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                found.update(conn.execute(select(job_service.c.job_id).where(
                    job_service.c.cluster == cluster, job_service.c.job_id.in_(chunk))).scalars())
        return found

    def mark_finished(
        self, cluster: str, job_id: str, finished_s: float, end_state: str, total_service_gpu_s: float
    ) -> None:
        """Close a job: state DONE, its end state and final total service (GPU-s)."""
        row = asdict(JobRecord(job_id=str(job_id), num_gpus=0, submit_time_s=finished_s))
        row.update(
            cluster=cluster, state="DONE", finished_s=finished_s, end_state=end_state,
            attained_gpu_s=total_service_gpu_s, last_running=False,
        )
        self._forget(cluster, str(job_id))
        with self._tx() as conn:
            # An unknown job still gets a row so its end is not lost.
            upsert(
                conn, job_service, [row], ["cluster", "job_id"],
                ["state", "finished_s", "end_state", "attained_gpu_s", "last_running"],
            )

    # -- service samples ------------------------------------------------------------

    def add_service_sample(
        self, cluster: str, job_id: str, gpu_s: float, finished_s: Optional[float] = None, censored: bool = False,
        features: tuple = ("", "", "", None),
    ) -> bool:
        """Record an ended job's total service (GPU-s) once; False if already there.
        ``censored``: the job was cut short, so it needed at least this much;
        ``features``: (user, account or partition, job name, GPUs) as Slurm knew them."""
        user, account, job_name, num_gpus = features
        row = {"cluster": cluster, "job_id": str(job_id), "gpu_s": float(gpu_s),
               "finished_s": time.time() if finished_s is None else float(finished_s), "censored": bool(censored),
               "user": user, "account": account, "job_name": job_name, "num_gpus": num_gpus}
        with self._tx() as conn:
            return insert_ignore(conn, service_samples, [row], ["cluster", "job_id"]) > 0

    def service_samples(self, cluster: str, since_s: Optional[float] = None) -> list[float]:
        """Service (GPU-s) of jobs of ``cluster`` finished at or after ``since_s``."""
        query = select(service_samples.c.gpu_s).where(service_samples.c.cluster == cluster)
        if since_s is not None:
            query = query.where(service_samples.c.finished_s >= since_s)
        with self._tx() as conn:
            return [float(v) for v in conn.execute(query.order_by(service_samples.c.finished_s)).scalars()]

    def service_samples_censored(self, cluster: str) -> tuple[list[float], list[bool]]:
        """Every sample of ``cluster`` (GPU-s) and whether each is censored, oldest first."""
        query = (select(service_samples.c.gpu_s, service_samples.c.censored)
                 .where(service_samples.c.cluster == cluster).order_by(service_samples.c.finished_s))
        with self._tx() as conn:
            rows = conn.execute(query).all()
        return [float(r[0]) for r in rows], [bool(r[1]) for r in rows]

    def service_samples_featured(self, cluster: str) -> list[tuple]:
        """Every sample of ``cluster``, oldest first: (GPU-s, censored, user, account or
        partition, job name, GPUs), as ``learn_conditioned`` reads them."""
        c = service_samples.c
        query = (select(c.gpu_s, c.censored, c.user, c.account, c.job_name, c.num_gpus)
                 .where(c.cluster == cluster).order_by(c.finished_s))
        with self._tx() as conn:
            return [(float(r[0]), bool(r[1]), r[2], r[3], r[4], r[5]) for r in conn.execute(query).all()]

    # -- usage records ---------------------------------------------------------------------

    def add_usage_record(self, record_id: str, fields: dict) -> bool:
        """Store a node-spool usage record once; False if ``record_id`` is already there."""
        row = {"record_id": str(record_id), "fields_json": json.dumps(fields, sort_keys=True, default=str),
               "added_s": time.time()}
        with self._tx() as conn:
            return insert_ignore(conn, usage_records, [row], ["record_id"]) > 0

    def usage_record(self, record_id: str) -> Optional[dict]:
        """The fields of one stored usage record, None when unknown."""
        with self._tx() as conn:
            found = conn.execute(
                select(usage_records.c.fields_json).where(usage_records.c.record_id == str(record_id))
            ).scalar_one_or_none()
        return None if found is None else json.loads(found)

    # The epilog's record_id begins with the cluster's name ("tc/101/gpu1/0"), so the
    # records of one cluster are found without a column of their own.
    def usage_records(self, cluster: str, since_s: Optional[float] = None) -> list[dict]:
        """The usage records of ``cluster`` stored at ``since_s`` or later, oldest first."""
        query = select(usage_records.c.fields_json).where(
            usage_records.c.record_id.startswith(f"{cluster}/", autoescape=True))
        if since_s is not None:
            query = query.where(usage_records.c.added_s >= since_s)
        with self._tx() as conn:
            rows = conn.execute(query.order_by(usage_records.c.added_s, usage_records.c.record_id)).scalars()
            return [json.loads(text) for text in rows]

    def prune_usage_records(self, cluster: str, *, before_s: float) -> int:
        """Delete ``cluster``'s usage records stored before ``before_s``; returns how many."""
        with self._tx() as conn:
            return conn.execute(usage_records.delete().where(
                usage_records.c.record_id.startswith(f"{cluster}/", autoescape=True),
                usage_records.c.added_s < before_s)).rowcount or 0
