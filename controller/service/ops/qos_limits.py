"""The association limits ``preemption: slurm``'s QOS swap would drop (issue 35).

cli_filter.lua gives a declared job ``--qos=<preempt_qos>``. Slurm then applies that
QOS's limits in place of the association's default QOS's: whatever the default QOS
limited (a user's GPUs, the wall time, the usage factor fair-share charges) stops
applying to every job that declared a signal. Preflight reads each QOS's limits and the
associations' default QOS from slurmdbd (``sacctmgr``), or from saved copies of that
output, and refuses enforce naming every limit a default QOS has that preempt_qos does
not have with the same value (the admin sets them on preempt_qos, or knowingly drops
them from the default QOS).
"""
from __future__ import annotations

# the limits a QOS puts on its jobs and users, as a backend's qos_limits() lists them
# (the port's QOS_LIMIT_FIELDS); a default QOS's value is lost when preempt_qos has not the same
from controller.service.acting.backend import QOS_LIMIT_FIELDS as LIMITS

# Slurm's QOS when an association names no default (the one slurmdbd creates)
IMPLIED_DEFAULT_QOS = "normal"


def parse_qos_limits(text: str) -> dict[str, dict[str, str]]:
    """A backend's QOS limit table (one QOS a line: its name, then LIMITS, ``|``-separated) as
    {QOS: {limit: value}}, only the limits set (not empty; UsageFactor not 1); lines without
    every field are left out."""
    rows = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < len(LIMITS) + 1 or not fields[0]:
            continue
        rows[fields[0]] = {name: value for name, value in zip(LIMITS, fields[1:]) if _set(name, value)}
    return rows


def _set(name: str, value: str) -> bool:
    value = value.strip()
    if name == "UsageFactor":
        try:
            return float(value) != 1.0
        except ValueError:
            return bool(value)
    return bool(value)


def parse_default_qos(text: str) -> dict[str, int]:
    """A backend's default-QOS list (one association a line, its default QOS first) as
    {QOS: associations that have it as default};
    an association with none counts for IMPLIED_DEFAULT_QOS."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        name = line.strip().split("|")[0] or IMPLIED_DEFAULT_QOS
        counts[name] = counts.get(name, 0) + 1
    return counts


def qos_limit_findings(limits: dict[str, dict[str, str]], defaults: dict[str, int],
                       qos: str) -> list[tuple[str, str, str, str]]:
    """One refusing finding (slurm_conf.Finding's setting, value, needs, why) per default
    QOS whose limits the swap to ``qos`` would drop: each limit it sets that ``qos``
    does not set to the same value."""
    found = []
    own = limits.get(qos, {})
    for name in sorted(defaults):
        if name == qos:
            continue
        lost = {limit: value for limit, value in limits.get(name, {}).items() if own.get(limit) != value}
        if not lost:
            continue
        listed = " ".join(f"{limit}={value}" for limit, value in lost.items())
        found.append((f"QOS {name} limits", listed,
                      f"the same on QOS {qos} (sacctmgr -i modify qos {qos} set {listed})",
                      (f"the default QOS of {defaults[name]} association(s)" if defaults[name] else
                       "the default QOS of associations that name none") +
                      f": a job cli_filter.lua moves to {qos} leaves these limits behind"))
    return found
