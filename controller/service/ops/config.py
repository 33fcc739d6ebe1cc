"""The controller's configuration: one YAML file, a typed schema with defaults and docs.

An unknown key or a bad value is an InputError naming the key and the value.
``tiresias show-config`` prints the effective settings from ``SCHEMA``.
"""
from __future__ import annotations

import difflib
import ipaddress
import math
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Optional

from controller.core.inputs import BadValue, check_float, check_int, check_text, shorten
from controller.core.engine import check_thresholds
from controller.core.model import InputError
from controller.core.policies import CONTROLLER_POLICIES
from controller.service.acting.executor import MODES  # the executor holds the mode

DEFAULT_PATH = "/etc/tiresias/tiresias.yaml"


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # int, float, str, bool, list[int], list[float], list[str], choice
    default: Any
    doc: str
    choices: tuple = ()
    minimum: Optional[float] = None


SCHEMA: tuple[Setting, ...] = (
    Setting("mode", "choice", "shadow", "observe: keep accounts only; shadow: log what it would do (decisions "
            "in the decision log, lever counts once a round), change nothing; enforce: apply them", MODES),
    Setting("cluster", "str", "default", "name of this cluster in the store"),
    Setting("database_url", "str", "sqlite:////var/lib/tiresias/tiresias.db",
            "SQLAlchemy URL: a SQLite file, or postgresql+psycopg2://user:pw@host/db"),
    Setting("database_password_file", "str", "", "file holding the PostgreSQL password (first line; mode 0600 "
            "or 0400, no group or other access), set into database_url, which then names no password; "
            "empty = none"),
    Setting("partitions", "list[str]", [], "partitions the controller manages; empty = all"),
    Setting("interval_s", "float", 10.0, "seconds between full planning rounds", minimum=0.1),
    Setting("poll_s", "float", 2.0, "seconds between cheap observations that trigger a round on change",
            minimum=0.1),
    Setting("full_observe_s", "float", 60.0, "most seconds between two full observations (squeue --json, "
            "sinfo --json): a round whose light polls show the jobs, states, pending reasons and node states "
            "of the last full observation reuses it, its clocks moved on; what the polls do not show (a "
            "comment, a time limit) is read again within this bound; 0 = observe fully every round",
            minimum=0.0),
    Setting("full_round_every_s", "float", 3600.0, "seconds between two full rounds: every Slurm record "
            "parsed and every job's plan input built anew instead of reused from the last round (which "
            "reuses what did not change), and each reused input compared with the new one: a difference is "
            "logged and counted (tiresias_incremental_mismatches_total); 0 = never", minimum=0.0),
    Setting("policy", "choice", "dlas", "priority policy: dlas (no duration knowledge) or dgittins "
            "(learned service distribution); las, gittins, fifo-skip for comparison",
            CONTROLLER_POLICIES),
    Setting("priority_file", "str", "", "expression file of policy 'learned' (tiresias learn); "
            "empty = the published example"),
    Setting("queues_gpu_s", "list[float]", [3600.0], "MLFQ thresholds in GPU-seconds, increasing (K = len + 1)"),
    Setting("promote_knob", "float", math.inf, "PROMOTEKNOB: waiting >= knob x executed promotes to queue 1; "
            "inf disables", minimum=0.0),
    Setting("placement", "choice", "consolidate", "consolidate skewed jobs, spread others; or count",
            ("consolidate", "spread", "count")),
    Setting("pack_limit", "float", 0.5, "PACKLIMIT: skew above it is consolidation-sensitive", minimum=0.0),
    Setting("pin_expiry_s", "float", 300.0, "a ReqNodeList pin for consolidation is cleared after this long",
            minimum=1.0),
    Setting("site_factor_band", "int", 100000, "SiteFactor width of one queue level", minimum=10),
    Setting("preemption", "choice", "controller", "who chooses, signals and requeues the victims: controller (the "
            "plan's victims get their checkpoint signal, the grace period, a requeue) or slurm (slurmctld preempts "
            "by priority, PreemptType=preempt/qos with a QOS whose PreemptMode has WITHIN or, 25.05+, PRIORITY; the "
            "controller's bands go on running jobs too; docs/slurm-preemption.md)", ("controller", "slurm")),
    Setting("preempt_qos", "str", "tiresias_ckpt", "preemption: slurm: the QOS of the jobs that declared their "
            "checkpoint signal (cli_filter.lua's PREEMPTABLE_QOS); preflight checks that its PreemptMode requeues "
            "by priority (requeue,within or requeue,priority) and that it has a GraceTime"),
    Setting("preempt_signal", "choice", "USR1", "checkpoint signal sent to the batch shell of a job that opted in "
            "with --comment=tiresias:preemptable (a job's own --signal is sent as it says)",
            ("USR1", "USR2", "TERM", "INT", "HUP")),
    Setting("preempt_grace_s", "float", 30.0, "seconds between the checkpoint signal and the requeue", minimum=0.0),
    Setting("preempt_requeue_ended", "bool", True, "requeue a preempted job that ended (exit 0 included) during "
            "its grace period, so a preemption never truncates a job"),
    Setting("preempt_min_runtime_s", "float", 60.0, "never preempt a job that has run less than this",
            minimum=0.0),
    Setting("preempt_max_per_job", "int", 10, "never preempt one job more often than this", minimum=0),
    Setting("requeue_settle_s", "float", 5.0, "after a requeue, wait this long before clearing the job's "
            "BeginTime hold (slurmd must finish tearing down the previous run first)", minimum=0.0),
    Setting("nice_last_queue", "int", 0, "Nice=N (slurmctld lowers the priority by N) on each pending GPU job the "
            "plan puts in the last MLFQ queue, so the site's other priority factors (age, fair-share) cannot lift "
            "it above the shorter jobs' bands; back to 0 when it starts or is promoted; only jobs whose own nice "
            "is 0; tiresias restore sets it back to 0; 0 = off", minimum=0),
    Setting("handoff_timeout_s", "float", 120.0, "after its victims were signalled, the job a preemption made "
            "room for must start within this long; if not, no preemption is made for it until something it depends "
            "on changes (a job on the nodes it may use leaves and what it frees could make it fit, such a node comes "
            "up, its request changes; counted "
            "and logged)", minimum=1.0),
    Setting("preempt_signal_attempts", "int", 3, "rounds in which a failed checkpoint signal is tried again "
            "before the job is left alone (a job whose signal failed is never requeued)", minimum=1),
    Setting("preempt_undeclared", "bool", False, "also preempt requeueable jobs that declared no checkpoint "
            "signal: they are requeued without one and lose the work since their own last checkpoint "
            "(widens the preemption contract; logged at start)"),
    Setting("service_conditioned", "bool", True, "dgittins: learn a distribution per key of what Slurm knows at "
            "submit (user+job name, account+GPUs, GPUs), backing off to coarser keys under 30 samples"),
    Setting("service_window", "int", 0, "dgittins: newest service samples kept per key (0: all; on the "
            "Philly trace all did better than 5,000: bench/bench_gittins.py --window)", minimum=0),
    Setting("service_refresh_s", "float", 300.0, "seconds between reloads of the learned service distribution",
            minimum=1.0),
    Setting("partition_moves", "bool", False, "move pending GPU jobs to another partition the user allowed "
            "(sbatch --partition=a,b) when it would start there sooner"),
    Setting("partition_allocator", "choice", "mct", "how moves are planned: mct (minimum completion time) or "
            "evo (evolutionary search seeded with MCT; seconds per round with hundreds of pending jobs)", ("mct", "evo")),
    Setting("partition_move_min_gain_s", "float", 30.0, "move only when the predicted start is at least this "
            "many seconds earlier", minimum=0.0),
    Setting("partition_move_cooldown_s", "float", 600.0, "at most one move per job within this many seconds "
            "(a move Slurm refused is tried again after interval_s, then twice as long each time, up to this)",
            minimum=0.0),
    Setting("partition_duration_estimate_s", "float", 3600.0, "run time assumed for a job when predicting "
            "starts (durations are unknown to the controller)", minimum=1.0),
    Setting("gpu_sharing", "bool", False, "apply the MPS co-location policy to pending MPS jobs (--gres=mps:N): "
            "set each one's share to its SM-quota tier (controller.core.levers.colocation)"),
    Setting("mps_tiers", "list[int]", [10, 25, 50, 75, 100], "allowed MPS SM-quota tiers, percent of one GPU "
            "(each 1..100)"),
    Setting("mps_default_tier", "int", 25, "tier of a job that asked for no tier (one of mps_tiers)", minimum=1),
    Setting("mps_latency_tier", "int", 75, "tier of latency-class jobs (comment tiresias:class=latency; one of "
            "mps_tiers)", minimum=1),
    Setting("mps_max_tenants", "int", 4, "at most this many MPS jobs share one GPU", minimum=1),
    Setting("mps_allow_multi_user", "bool", False, "let different users share one GPU (their MPS servers are "
            "time-sliced, not concurrent)"),
    Setting("usage_spool_dir", "str", "/var/spool/tiresias/usage", "directory of the nodes' epilog usage "
            "records, collected into the store when the directory exists"),
    Setting("usage_collect_s", "float", 60.0, "seconds between collections of usage_spool_dir", minimum=1.0),
    Setting("usage_max_age_s", "float", 90 * 86400.0, "usage records stored longer ago than this many seconds "
            "are deleted (hourly; 0 = kept for ever)", minimum=0.0),
    Setting("standby", "bool", False, "share the store with a standby controller: only the holder of the "
            "lease row acts, the other takes over when the lease runs out (PostgreSQL database_url only; "
            "SQLite is single-controller)"),
    Setting("lease_ttl_s", "float", 0.0, "seconds a controller lease lasts unrenewed (PostgreSQL: always taken); "
            "takeover within lease_ttl_s + poll_s of a leader's death or stall; 0 = 1.5 x max(interval_s, "
            "command_timeout_s + 1); must exceed command_timeout_s + 1 (the fence's margin)", minimum=0.0),
    Setting("command_timeout_s", "float", 15.0, "seconds one Slurm command (squeue, scontrol...) may take before "
            "the round stops; every lever command runs only while the lease has more than this (+1 s) left",
            minimum=0.1),
    Setting("admin_comment", "bool", True, "write a short line (queue, attained service, position, "
            "preemptable) into each GPU job's AdminComment, after any text the site keeps there (enforce mode "
            "only)"),
    Setting("admin_comment_refresh_s", "float", 300.0, "rewrite a job's AdminComment for changed service or "
            "position at most this often; a queue change is written at once, but a running job's that no "
            "victim rule may preempt (no checkpoint contract, preempt_max_per_job spent) within this time",
            minimum=0.0),
    Setting("admin_comment_max_per_round", "int", 50, "at most this many AdminComment writes (one scontrol "
            "each) per round", minimum=0),
    Setting("slurm_rpc_per_s", "float", 1.0, "RPCs a second the bulk levers may cost (SiteFactor bands, "
            "AdminComment lines; `scontrol update JobId=a,b,...` costs one RPC per id): rl_enable refills 2 "
            "tokens a second per user and the controller's Operator user is not exempt; the polls (squeue and "
            "sinfo every poll_s) take the other half. What the budget holds back goes in later rounds, a job the "
            "plan starts or a band that must fall first (tiresias_slurm_updates_waiting); 0 = no budget",
            minimum=0.0),
    Setting("slurm_rpc_burst", "int", 20, "most RPCs the bulk levers may cost in one round after a quiet spell "
            "(below rl_enable's bucket of 30, which the polls share)", minimum=1),
    Setting("restore_on_stop", "bool", False, "on a clean stop (SIGTERM), reset every lever the controller set "
            "(SiteFactor 0, its pins cleared, its AdminComment line removed), as `tiresias restore` does, so that "
            "jobs submitted while it is down do not rank below the frozen bands; leave off with standby"),
    Setting("metrics_port", "int", 0, "Prometheus port on metrics_address (0 = off)", minimum=0),
    Setting("metrics_address", "str", "127.0.0.1", "IP address the metrics port listens on (0.0.0.0 = every "
            "interface: the metrics name jobs and users, put a firewall in front)"),
    Setting("log_level", "choice", "INFO", "log level", ("DEBUG", "INFO", "WARNING", "ERROR")),
    Setting("log_format", "choice", "auto", "log lines: text (no timestamp of its own under systemd, where the "
            "journal stamps them), json (one object a line with job_id, decision_id, round), auto = text",
            ("auto", "json", "text")),
    Setting("decision_log_max_age_s", "float", 30 * 86400.0, "decisions older than this many seconds are deleted "
            "from the store (checked hourly; 0 = kept forever)", minimum=0.0),
    Setting("decision_log_max_rows", "int", 1_000_000, "at most this many decisions of the cluster are kept, "
            "the newest (0 = no limit)", minimum=0),
)

_BY_NAME = {s.name: s for s in SCHEMA}


@dataclass(frozen=True)
class Config:
    mode: str = "shadow"
    cluster: str = "default"
    database_url: str = "sqlite:////var/lib/tiresias/tiresias.db"
    database_password_file: str = ""
    partitions: tuple[str, ...] = ()
    interval_s: float = 10.0
    poll_s: float = 2.0
    full_observe_s: float = 60.0
    full_round_every_s: float = 3600.0
    policy: str = "dlas"
    priority_file: str = ""
    queues_gpu_s: tuple[float, ...] = (3600.0,)
    promote_knob: float = math.inf
    placement: str = "consolidate"
    pack_limit: float = 0.5
    pin_expiry_s: float = 300.0
    site_factor_band: int = 100000
    preemption: str = "controller"
    preempt_qos: str = "tiresias_ckpt"
    preempt_signal: str = "USR1"
    preempt_grace_s: float = 30.0
    preempt_requeue_ended: bool = True
    preempt_min_runtime_s: float = 60.0
    preempt_max_per_job: int = 10
    requeue_settle_s: float = 5.0
    nice_last_queue: int = 0
    handoff_timeout_s: float = 120.0
    preempt_signal_attempts: int = 3
    preempt_undeclared: bool = False
    service_refresh_s: float = 300.0
    service_conditioned: bool = True
    service_window: int = 0
    partition_moves: bool = False
    partition_allocator: str = "mct"
    partition_move_min_gain_s: float = 30.0
    partition_move_cooldown_s: float = 600.0
    partition_duration_estimate_s: float = 3600.0
    gpu_sharing: bool = False
    mps_tiers: tuple[int, ...] = (10, 25, 50, 75, 100)
    mps_default_tier: int = 25
    mps_latency_tier: int = 75
    mps_max_tenants: int = 4
    mps_allow_multi_user: bool = False
    usage_spool_dir: str = "/var/spool/tiresias/usage"
    usage_collect_s: float = 60.0
    usage_max_age_s: float = 90 * 86400.0
    standby: bool = False
    lease_ttl_s: float = 0.0
    command_timeout_s: float = 15.0
    admin_comment: bool = True
    admin_comment_refresh_s: float = 300.0
    admin_comment_max_per_round: int = 50
    slurm_rpc_per_s: float = 1.0
    slurm_rpc_burst: int = 20
    restore_on_stop: bool = False
    metrics_port: int = 0
    metrics_address: str = "127.0.0.1"
    log_level: str = "INFO"
    log_format: str = "auto"
    decision_log_max_age_s: float = 30 * 86400.0
    decision_log_max_rows: int = 1_000_000

    def store_url(self) -> str:
        """database_url with the password of database_password_file set in it: what to
        open, never to print (print redact_url(database_url) or Store.name)."""
        if not self.database_password_file:
            return self.database_url
        from controller.service.state.secrets import read_password_file, with_password

        return with_password(self.database_url, read_password_file(self.database_password_file))

    def secrets(self) -> list[str]:
        """The password as it may appear in text (plain and URL-quoted), for log redaction."""
        from urllib.parse import quote, quote_plus

        from controller.service.state.secrets import url_password

        password = url_password(self.store_url())
        return [] if not password else sorted({password, quote(password, safe=""), quote_plus(password)})

    def lease_ttl(self) -> float:
        """The lease's TTL in seconds (lease_ttl_s, or 1.5 x max(interval_s, fence margin))."""
        return self.lease_ttl_s or 1.5 * max(self.interval_s, self.fence_margin())

    def fence_margin(self) -> float:
        """Seconds of lease a lever command needs left when it starts: longer than the
        command may run, so no command outlives the lease it was checked against."""
        return self.command_timeout_s + 1.0

    def engine_config(self):
        from controller.core.engine import EngineConfig
        from controller.partitions.priority_file import read_expression_text

        return EngineConfig(policy=self.policy, thresholds_gpu_s=self.queues_gpu_s,
                            promote_knob=self.promote_knob, placement=self.placement, pack_limit=self.pack_limit,
                            quantum_s=self.interval_s,
                            priority_expression=read_expression_text(self.priority_file or None),
                            preempt_min_runtime_s=self.preempt_min_runtime_s,
                            preempt_max_per_job=self.preempt_max_per_job)

    def colocation_policy(self):
        """The MPS co-location policy (controller.core.levers.colocation); InputError when inconsistent."""
        from controller.core.levers.colocation import ColocationPolicy

        tiers = tuple(self.mps_tiers)
        if not tiers or any(not 1 <= t <= 100 for t in tiers):
            raise InputError(f"mps_tiers {list(tiers)}: each tier must be a percent 1..100")
        for key in ("mps_default_tier", "mps_latency_tier"):
            if getattr(self, key) not in tiers:
                raise InputError(f"{key} {getattr(self, key)} is not one of mps_tiers {list(tiers)}")
        return ColocationPolicy(tiers=tiers, default_tier=self.mps_default_tier, latency_tier=self.mps_latency_tier,
                                max_tenants=self.mps_max_tenants, allow_multi_user=self.mps_allow_multi_user)


MAX_LIST_ITEMS = 1000
MAX_TEXT_CHARS = 4096


# Every number has an upper bound too (issue 12, one rule for input): a value past it
# is a typo or an attack, and some (a port, a huge interval) would crash later.
MAXIMA: dict[str, float] = {
    "interval_s": 86400.0, "poll_s": 3600.0, "promote_knob": 1e9, "pack_limit": 1.0, "pin_expiry_s": 1e7,
    "site_factor_band": 10**7, "preempt_grace_s": 86400.0, "preempt_min_runtime_s": 1e7,
    "preempt_max_per_job": 10**6, "preempt_signal_attempts": 1000, "handoff_timeout_s": 86400.0, "requeue_settle_s": 86400.0,
    "service_refresh_s": 1e7, "partition_move_min_gain_s": 1e7, "partition_move_cooldown_s": 1e7,
    "partition_duration_estimate_s": 1e9, "mps_default_tier": 100, "mps_latency_tier": 100, "mps_max_tenants": 64,
    "usage_collect_s": 86400.0, "usage_max_age_s": 100 * 365 * 86400.0, "lease_ttl_s": 86400.0, "command_timeout_s": 3600.0, "metrics_port": 65535,
    "slurm_rpc_per_s": 1e6, "slurm_rpc_burst": 10**6,
    "decision_log_max_age_s": 100 * 365 * 86400.0, "decision_log_max_rows": 10**9,
}
DEFAULT_MAXIMUM = 1e9  # a setting not listed above


def maximum(setting: Setting) -> float:
    return MAXIMA.get(setting.name, DEFAULT_MAXIMUM)


def _coerce(setting: Setting, value: Any, where: str) -> Any:
    label = f"{where}: key '{setting.name}'"
    bad = BadValue(label, value, f"is not a valid {setting.kind}"
                   + (f" (choose from {', '.join(setting.choices)})" if setting.choices else ""))
    kind = setting.kind
    if kind == "choice":
        if not isinstance(value, str) or value not in setting.choices:
            raise bad
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad
        return value
    if kind == "str":
        if not isinstance(value, str) or (not value and setting.default != ""):
            raise bad
        return check_text(value, label, max_chars=MAX_TEXT_CHARS)
    if kind in ("int", "float"):
        lo = setting.minimum if setting.minimum is not None else 0
        hi = maximum(setting)
        if kind == "int":
            return check_int(value, int(lo), int(hi), label)
        return check_float(value, float(lo), float(hi), label, allow_inf=setting.name == "promote_knob")
    if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS:
        raise bad
    if kind == "list[str]":
        if not all(isinstance(v, str) and v for v in value):
            raise bad
        return tuple(check_text(v, label, max_chars=256) for v in value)
    if not value:
        raise bad
    if kind == "list[float]":
        return tuple(check_float(v, 0.0, 1e12, label) for v in value)
    if kind == "list[int]":
        return tuple(check_int(v, 0, 10**6, label) for v in value)
    raise AssertionError(kind)


def from_mapping(data: dict, where: str = "config") -> Config:
    if not isinstance(data, dict):
        raise InputError(f"{where}: the top level must be a mapping of keys to values")
    values = {}
    for key, value in data.items():
        setting = _BY_NAME.get(key) if isinstance(key, str) else None
        if setting is None:
            close = difflib.get_close_matches(str(key), _BY_NAME, n=1, cutoff=0.6)
            # every key would be a 1,300-character line: name where they are listed instead
            hint = (f"did you mean '{close[0]}'?" if close else
                    f"not one of the {len(_BY_NAME)} keys: `tiresias show-config` lists them")
            raise InputError(f"{where}: unknown key '{shorten(key)}' ({hint})")
        values[key] = _coerce(setting, value, where)
    config = Config(**values)
    if config.standby and config.database_url.startswith("sqlite"):
        raise InputError(f"{where}: key 'standby' needs a PostgreSQL database_url (SQLite is single-controller; "
                         f"got {config.database_url[:60]!r})")
    if config.lease_ttl_s and config.lease_ttl_s <= config.fence_margin():
        raise InputError(f"{where}: key 'lease_ttl_s' value {config.lease_ttl_s:g} must exceed command_timeout_s + 1 "
                         f"= {config.fence_margin():g} (a command must end before the lease it was checked against)")
    if config.database_password_file:
        _check_password_file(config, where)
    try:
        ipaddress.ip_address(config.metrics_address)
    except ValueError:
        raise InputError(f"{where}: key 'metrics_address' value {shorten(config.metrics_address)!r} is not an IP "
                         f"address (e.g. 127.0.0.1)") from None
    try:
        check_thresholds(config.queues_gpu_s)
    except InputError as err:
        raise InputError(f"{where}: key 'queues_gpu_s' value {list(config.queues_gpu_s)}: "
                         f"{str(err).removeprefix('queues: ')}") from None
    try:
        config.engine_config()  # knob > 0, ...
    except InputError as err:
        raise InputError(f"{where}: {err}") from None
    try:
        config.colocation_policy()  # tiers 1..100, default/latency tier among them
    except InputError as err:
        raise InputError(f"{where}: {err}") from None
    return config


def _check_password_file(config: Config, where: str) -> None:
    """database_password_file goes with a PostgreSQL URL that names no password, and
    must be readable by its owner alone (checked now: one line at start, not at the
    first round)."""
    from controller.service.state.secrets import url_password

    if not config.database_url.startswith("postgresql"):
        raise InputError(f"{where}: key 'database_password_file' needs a PostgreSQL database_url "
                         f"(got {config.database_url[:60]!r})")
    if url_password(config.database_url) is not None:
        raise InputError(f"{where}: key 'database_url' holds a password and 'database_password_file' is set too: "
                         f"keep it in the file only")
    try:
        config.store_url()
    except InputError as err:
        raise InputError(f"{where}: {err}") from None


def _check_config_secrecy(target: Path, data: Any, mode: Optional[int]) -> None:
    """A config that anyone on the host can read must not hold the store password:
    refused when it would run with mode enforce, a warning otherwise (an observe or
    shadow trial should not stop on it, but the password is already exposed)."""
    from controller.service.state.secrets import url_password

    url = data.get("database_url") if isinstance(data, dict) else None
    if mode is None or not mode & 0o004 or not isinstance(url, str) or url_password(url) is None:
        return
    what = (f"{target}: key 'database_url' holds a password and the file is world-readable (mode {mode & 0o777:04o}): "
            f"chmod o-r {target}, or move the password to database_password_file")
    if data.get("mode") == "enforce":
        raise InputError(what)
    import logging

    logging.getLogger("tiresias.config").warning("%s", what)


MAX_FILE_BYTES = 1 << 20  # a config is a few kB; refuse to parse anything near a megabyte
MAX_DEPTH = 10  # the schema needs 2 levels (a mapping of lists)


def _safe_yaml(text: str, source: str) -> Any:
    """YAML with the limits a config needs: no aliases (a 472-byte alias bomb expands to
    gigabytes), at most MAX_DEPTH levels of nesting (5,000 nested lists overflow the
    recursive composer)."""
    import yaml

    class Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a config", mark)
            self.depth += 1
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node, deep=False):
            # YAML keeps the later of two equal keys without a word: a block pasted above
            # the shipped file's own keys (tune's output) would then be silently lost
            first_line: dict = {}
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    line = key_node.start_mark.line + 1
                    if key_node.value in first_line:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"'{shorten(key_node.value, 40)}' twice, lines {first_line[key_node.value]} and {line}",
                            key_node.start_mark)
                    first_line[key_node.value] = line
            return super().construct_mapping(node, deep=deep)

    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise InputError(f"{source}{line}: not valid YAML ({shorten(getattr(err, 'problem', None) or err)})") from None
    except (ValueError, OverflowError, RecursionError) as err:  # e.g. an integer of 5,000 digits
        raise InputError(f"{source}: not a usable YAML value ({shorten(err)})") from None


def load(path: Optional[str] = None, overrides: Optional[dict] = None) -> Config:
    """Read the YAML file (missing default file = all defaults), then apply overrides."""
    data: dict = {}
    target = Path(path or DEFAULT_PATH)
    file_mode = None
    if target.exists():
        try:
            with open(target, "rb") as fh:
                file_mode = os.fstat(fh.fileno()).st_mode
                raw = fh.read(MAX_FILE_BYTES + 1)
        except OSError as err:
            raise InputError(f"{target}: cannot read: {err.strerror}") from None
        if len(raw) > MAX_FILE_BYTES:
            raise InputError(f"{target}: larger than {MAX_FILE_BYTES} bytes, not a config file")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise InputError(f"{target}: not UTF-8 text (byte {err.start}); save the file as UTF-8") from None
        loaded = _safe_yaml(text, str(target))
        data = {} if loaded is None else loaded
    elif path is not None:
        raise InputError(f"config file {path} does not exist")
    if overrides:
        if not isinstance(data, dict):
            raise InputError(f"{target}: the top level must be a mapping of keys to values")
        file_data = data
        data = {**data, **{k: v for k, v in overrides.items() if v is not None}}
        _check_config_secrecy(target, {**data, "database_url": file_data.get("database_url")}, file_mode)
    else:
        _check_config_secrecy(target, data, file_mode)
    return from_mapping(data, where=str(target))


def effective(config: Config) -> list[tuple[str, Any, str]]:
    """(key, value, doc) for show-config; a password in database_url shows as ***."""
    from controller.service.state.secrets import redact_url

    return [(f.name, redact_url(getattr(config, f.name)) if f.name == "database_url" else getattr(config, f.name),
             _BY_NAME[f.name].doc) for f in fields(config)]


# The packaged example (packaging/tiresias.yaml) is rendered from SCHEMA, so a default
# changed here cannot leave the file behind (tests/test_docs_output.py regenerates it).
# Each heading is printed before the key that opens its group; a key added later falls
# into the group above it.
SECTION_HEADINGS = {
    "mode": "what the controller does", "interval_s": "rounds", "policy": "priority",
    "placement": "placement", "site_factor_band": "SiteFactor (the order Slurm sees)",
    "preempt_signal": "preemption", "service_conditioned": "dgittins: the learned service distribution",
    "partition_moves": "partition moves", "gpu_sharing": "GPU sharing (MPS co-location)",
    "usage_spool_dir": "usage records", "standby": "operations", "metrics_port": "metrics and logs",
    "decision_log_max_age_s": "decision log",
}
REGENERATE_DEFAULTS = ".venv/bin/python -m controller.service.ops.config > packaging/tiresias.yaml"
_WIDTH = 88  # columns of a rendered comment line


def _yaml_scalar(value: Any) -> str:
    import yaml

    return yaml.safe_dump(value, width=10**6).strip().removesuffix("...").strip()


def yaml_value(value: Any) -> str:
    """A value in YAML flow form (lists as [a, b], inf as .inf) that loads back as itself."""
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_yaml_scalar(v) for v in value) + "]"
    return _yaml_scalar(value)


def defaults_yaml() -> str:
    """The packaged config file: every key of SCHEMA with its default and doc, in
    SCHEMA's order, under SECTION_HEADINGS; loading it gives Config()."""
    import textwrap

    lines = ["# /etc/tiresias/tiresias.yaml: settings of the tiresias controller.",
             "# Every key is listed with its built-in default (controller/service/ops/config.py),",
             "# so this file changes nothing until you edit it. `tiresias show-config --config FILE`",
             "# prints what a file makes effective; an unknown key or a bad value stops the",
             "# controller with one line naming the key. Start in mode shadow, read the decision",
             "# log (`tiresias explain JOBID`), then switch to enforce.",
             "# packaging/tiresias.yaml is generated from them (edit your copy in /etc/tiresias):",
             f"#   {REGENERATE_DEFAULTS}"]
    for setting in SCHEMA:
        heading = SECTION_HEADINGS.get(setting.name)
        if heading:
            lines += ["", f"# --- {heading} " + "-" * max(3, _WIDTH - 7 - len(heading))]
        doc = setting.doc + (f" (one of: {', '.join(setting.choices)})" if setting.choices else "")
        lines += [""] + textwrap.wrap(doc, _WIDTH, initial_indent="# ", subsequent_indent="# ",
                                      break_on_hyphens=False)
        lines.append(f"{setting.name}: {yaml_value(setting.default)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(defaults_yaml(), end="")
