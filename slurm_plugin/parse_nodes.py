"""The cluster's nodes and what holds them: ``sinfo --json`` into SlurmNode records
(slurm_plugin.records), the GPUs each node holds in use; ``scontrol show reservation -o`` and
``scontrol show partition -o`` (how a partition shares its nodes).
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

from controller.core.model import MIXED_TYPES
from slurm_plugin.grammar import SlurmParseError, expand_hostlist, gres_counts, gres_items, quoted
from slurm_plugin.records import (NODE_BASE_STATES, NODE_UNAVAILABLE_FLAGS, NODE_UNAVAILABLE_STATES, SlurmNode,
    collect_records, load_document, nullish_to_empty, reported_count, slurm_number, str_value)


def _gpu_type_of_node(gres: Any) -> str:
    """A node's GPU type from its ``gres`` ('gpu:a100:4(S:0)'): one type, '' untyped,
    MIXED_TYPES when it lists several."""
    types = {gtype for name, gtype, count, _ in gres_items(str_value(gres, "gres"), "gres") if name == "gpu" and count}
    return MIXED_TYPES if len(types) > 1 else next(iter(types), "")


SHARED_GPU_GRES = ("shard", "mps")  # GRES that share a GPU: a GPU with any in use is not free for a whole-GPU job
MAX_GPU_INDEX = 1024  # Slurm's own bound on a node's GRES bitmap (MAX_GRES_BITMAP)


def _gpu_indices(inside: str) -> frozenset[int] | None:
    """The GPU indices of ``IDX:0-1,3`` (empty for ``IDX:N/A``), None when the
    parentheses give none or cannot be read (the caller then counts instead)."""
    if not inside.startswith("IDX:"):
        return None
    text = inside[len("IDX:"):].strip()
    if text == "N/A":
        return frozenset()
    out: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*([0-9]{1,4})(?:-([0-9]{1,4}))?\s*", part)
        if not m:
            return None
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if high < low or high >= MAX_GPU_INDEX:
            return None
        out.update(range(low, high + 1))
    return frozenset(out)


def _per_gpu_in_use(inside: str) -> list[bool] | None:
    """Per-GPU shared use (``50/100,0/100,-/100``): whether each GPU in the list has
    some in use (``-``: held whole, no shared use). None when not that form."""
    if "/" not in inside:
        return None
    out = []
    for part in inside.split(","):
        in_use, slash, _ = part.strip().partition("/")
        if not slash or not (in_use.isdigit() or in_use == "-"):
            return None
        out.append(in_use.isdigit() and int(in_use) > 0)
    return out


def _gpus_held(gres: Any, gres_used: Any, total: int, used: int) -> tuple[int, int]:
    """(GPUs in use, those of them in use only through MPS) on a node of ``total``
    GPUs, ``used`` of them allocated whole. A GPU is in use when a job holds it whole,
    or some of its shards (gres/shard) or MPS shares (gres/mps) are in use: no
    whole-GPU job is planned onto it, nor any job preempted to make room there.
    Counted by GPU index where the string gives indices (a GPU is never counted
    twice), else summed (24.11 and 26.05 never give one GPU both whole and shared). A
    GPU counted busy that is not costs a delayed start; one counted free that is not
    costs a preemption for nothing. The GPUs in use only through MPS are the pool MPS
    jobs share (controller.service.round.sharing).

    ``gres_used`` per release, as recorded (tests/fixtures/slurm) and as Slurm's
    gres.c prints it:

    * 22.05: whole GPUs as a count, ``gpu:3`` (no indices when untyped), a shared GRES
      as the GPUs it touches with their indices, ``mps:(null):1(IDX:0)`` (1 is a GPU
      count, not shares), ``shard:a100:1(IDX:0)``. The whole GPUs' indices are not
      given, so they and the shared GPUs are summed. The recording shows 22.05 giving
      one GPU both ways (squeue: job 7 ``gpu:3(IDX:0-2)``, MPS job 6 ``mps:50(IDX:0)``;
      so GPU 3 was free), which gpu2's ``gpu:3,mps:(null):1(IDX:0)`` cannot tell from
      MPS on a fourth GPU: counted 4 busy, one too many there.
    * 24.11: ``gpu:(null):3(IDX:1-3),mps:(null):50(50/100,0/100,0/100,0/100)``: whole
      GPUs by index; a shared GRES's count is shares, then shares in use/available per
      GPU, listed per GPU type in topology order (a GPU held whole reads ``0/100``).
    * 26.05: as 24.11 without the ``(null)`` type (``gpu:3(IDX:1-3)``), and ``-``
      for a GPU held whole (``mps:50(50/100,-/100,-/100,-/100)``): no shared use.

    The per-GPU list's positions are GPU indices on a node of one GPU type (the
    recordings line 26.05's ``-`` up with the whole GPUs' IDX); on a node of several
    types they count per type, so its GPUs are summed. A shared count without per-GPU
    detail or indices (a node whose GRES has no File=): shards as one GPU each (an
    upper bound, never more than the node has); MPS shares as
    ceil(shares / shares per GPU), the fewest GPUs they fit on (an MPS job's shares on
    a node sit on one GPU; counting each share as a GPU would take every GPU of a node
    with one mps:50 job)."""
    one_type = _gpu_type_of_node(gres) != MIXED_TYPES
    whole: set[int] = set()
    whole_indexed = True
    shared: dict[str, set[int]] = {name: set() for name in SHARED_GPU_GRES}
    counted: dict[str, int] = dict.fromkeys(SHARED_GPU_GRES, 0)  # GPUs in use without indices
    for name, _, count, inside in gres_items(str_value(gres_used, "gres_used"), "gres_used"):
        if name == "gpu":
            indices = _gpu_indices(inside)
            if indices is None:
                whole_indexed = whole_indexed and not count
            else:
                whole |= indices
            continue
        if name not in SHARED_GPU_GRES or not count:
            continue
        per_gpu = _per_gpu_in_use(inside)
        indices = _gpu_indices(inside) if per_gpu is None else None
        if per_gpu is not None and one_type:
            shared[name].update(i for i, in_use in enumerate(per_gpu) if in_use)
        elif per_gpu is not None:
            counted[name] += sum(per_gpu)
        elif indices is not None:
            shared[name] |= indices
        elif name == "mps":
            per_gpu_shares = gres_counts(str_value(gres, "gres"), field_name="gres").get("mps", 0) // max(total, 1)
            counted[name] += math.ceil(count / per_gpu_shares) if per_gpu_shares else 1
        else:
            counted[name] += count
    if not whole_indexed or len(whole) < used:
        whole_count = used + len(shared["shard"] | shared["mps"])
        without_mps = used + len(shared["shard"])
    else:
        whole_count = len(whole | shared["shard"] | shared["mps"])
        without_mps = len(whole | shared["shard"])
    busy = min(total, whole_count + counted["shard"] + counted["mps"])
    return busy, busy - min(total, without_mps + counted["shard"])


# --------------------------------------------------------------------------
# sinfo --json / scontrol show nodes --json

def parse_sinfo_json(text: str | bytes | dict, errors: list | None = None) -> list[SlurmNode]:
    """Nodes from ``sinfo --json`` (22.05: ``nodes``), ``scontrol show nodes --json``
    or slurmrestd ``/nodes`` (23.02+: ``nodes`` with list states), or the 23.11+
    ``sinfo --json`` grouping (``sinfo`` entries; merged per node)."""
    key, records = load_document(text, ("nodes", "sinfo"), "sinfo --json")
    if key == "nodes":
        return collect_records(records, _node, errors, "name", "nodes")
    return _sinfo_groups(records, errors)


def _node_state(r: dict) -> tuple[str, frozenset[str]]:
    raw = r.get("state")
    extra = r.get("state_flags") or []
    if isinstance(raw, str):
        items = [raw] + list(extra)
    elif isinstance(raw, list) and all(isinstance(v, str) for v in raw):
        items = list(raw) + list(extra)
    else:
        raise SlurmParseError(f"state: expected a node state string or list, got {quoted(raw)}")
    # 22.05 text states may carry a suffix: 'idle*' (not responding), 'idle~' (powered down).
    suffix_flags = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP",
                    "%": "POWERING_DOWN", "!": "POWER_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED"}
    base, flags = None, set()
    for item in items:
        item = item.strip()
        while item and item[-1] in suffix_flags:
            flags.add(suffix_flags[item[-1]])
            item = item[:-1]
        low = item.lower()
        if low in NODE_BASE_STATES and base is None:
            base = low
        elif low in ("drained", "draining", "drain"):
            flags.add("DRAIN")
        elif item:
            flags.add(item.upper())
    if base is None:
        raise SlurmParseError(f"state: no base node state in {quoted(raw)}")
    return base, frozenset(flags)


def _gpu_count(gres: Any, tres: Any, field_name: str) -> int:
    counts = gres_counts(str_value(gres, field_name), field_name=field_name)
    if "gpu" in counts:
        return counts["gpu"]
    return gres_counts(str_value(tres, "tres"), field_name="tres").get("gpu", 0)


def parse_sinfo_record(record: dict) -> SlurmNode:
    """One record of a ``nodes`` list (22.05 ``sinfo --json``, ``scontrol show nodes
    --json``), as parse_sinfo_json reads each (for slurm_plugin.record_cache)."""
    return _node(record)


def _node(r: dict) -> SlurmNode:
    name = str_value(r.get("name"), "name")
    if not name:
        raise SlurmParseError("name: missing node name")
    state, flags = _node_state(r)
    partitions = r.get("partitions") or []
    if not isinstance(partitions, list):
        raise SlurmParseError(f"partitions: expected a list, got {quoted(partitions)}")
    total = _gpu_count(r.get("gres"), r.get("tres"), "gres")
    used, mps_only = _gpus_held(r.get("gres"), r.get("gres_used"), total,
                                _gpu_count(r.get("gres_used"), r.get("tres_used"), "gres_used"))
    return SlurmNode(
        name=name,
        state=state,
        flags=flags,
        gpus_total=total,
        gpus_used=used,
        gpus_mps=mps_only,
        partitions=[str(p) for p in partitions],
        reason=str_value(r.get("reason"), "reason"),
        available=state not in NODE_UNAVAILABLE_STATES and not (flags & NODE_UNAVAILABLE_FLAGS),
        gpu_type=_gpu_type_of_node(r.get("gres")),
        cpus_total=reported_count(r, "cpus"),
        cpus_alloc=reported_count(r, "alloc_cpus"),
        mem_total_mb=reported_count(r, "real_memory"),
        mem_alloc_mb=reported_count(r, "alloc_memory"),
        features=_feature_list(r["active_features"], "active_features") if "active_features" in r else None,
    )


def _feature_list(value: Any, field_name: str) -> tuple[str, ...]:
    """A node's features: comma-separated ('' none; 22.05 and sinfo), or a list of
    them (``scontrol show nodes --json`` and slurmrestd /nodes of 23.11+)."""
    if isinstance(value, list):
        if not all(isinstance(item, str) for item in value):
            raise SlurmParseError(f"{field_name}: expected a list of feature names, got {quoted(value)}")
        items = [part for item in value for part in item.split(",")]
    else:
        items = str_value(value, field_name).split(",")
    return tuple(sorted({item.strip() for item in items if item.strip()}))


def _group_per_node(group: dict, key: str, count: int) -> tuple[int | None, int | None]:
    """(each node's total, each node's allocated) of a 23.11+ sinfo group's ``cpus`` or
    ``memory``: the total when its minimum and maximum agree; the allocated count (a
    sum over the group) when the group is one node or nothing is allocated. None:
    the group does not say (never split by guess)."""
    item = group.get(key)
    if not isinstance(item, dict):
        return None, None
    low, high = slurm_number(item.get("minimum"), f"{key}.minimum"), slurm_number(item.get("maximum"),
                                                                                    f"{key}.maximum")
    total = int(low) if low is not None and low == high else None
    allocated = slurm_number(item.get("allocated"), f"{key}.allocated") if "allocated" in item else None
    if allocated is not None and (count == 1 or allocated == 0):
        return total, int(allocated)
    return total, None


def _sinfo_groups(records: list, errors: list | None) -> list[SlurmNode]:
    # 23.11+ `sinfo --json`: one entry per (partition, state, ...) group with
    # node names under nodes.nodes. GPU counts are per node in gres.total/used.
    groups = []
    for index, group in enumerate(records):
        try:
            groups.append(parse_sinfo_group(group))
        except SlurmParseError as exc:
            exc.record_index = index
            if errors is not None:
                errors.append(exc)
    return merge_sinfo_groups(groups)


def parse_sinfo_group(g: Any) -> tuple[SlurmNode, ...]:
    """The nodes of one 23.11+ ``sinfo`` entry (one node each with ``-N``), each with the
    entry's partition only (merge_sinfo_groups gathers a node's partitions); for
    slurm_plugin.record_cache, which keeps an entry's nodes while its text is the same."""
    if not isinstance(g, dict):
        raise SlurmParseError("sinfo entry: expected an object")  # (its index: the caller's record_index)
    names = (g.get("nodes") or {}).get("nodes") or []
    if isinstance(names, str):
        names = expand_hostlist(names)
    state, flags = _node_state(g.get("node") or {})
    gres = g.get("gres") or {}
    part = ((g.get("partition") or {}).get("name")) or ""
    # a group's CPU and memory counts are its nodes' sums: per node only where they say
    count = sum(len(expand_hostlist(name)) for name in names)
    cpus_total, cpus_alloc = _group_per_node(g, "cpus", count)
    mem_total, mem_alloc = _group_per_node(g, "memory", count)
    features = g.get("features")
    total = _gpu_count(gres.get("total"), None, "gres.total")
    used, mps_only = _gpus_held(gres.get("total"), gres.get("used"), total,
                                _gpu_count(gres.get("used"), None, "gres.used"))
    fields = dict(
        cpus_total=cpus_total, cpus_alloc=cpus_alloc, mem_total_mb=mem_total, mem_alloc_mb=mem_alloc,
        features=(_feature_list(features.get("active"), "features.active")
                  if isinstance(features, dict) and "active" in features else None),
        state=state, flags=flags, gpu_type=_gpu_type_of_node(gres.get("total")),
        gpus_total=total, gpus_used=used, gpus_mps=mps_only, partitions=[part] if part else [],
        # 26.05 moved reason.user to reason_set_by_user; the description stays
        reason=str_value((g.get("reason") or {}).get("description")
                         if isinstance(g.get("reason"), dict) else g.get("reason"), "reason"),
        available=state not in NODE_UNAVAILABLE_STATES and not (flags & NODE_UNAVAILABLE_FLAGS))
    return tuple(SlurmNode(name=n, **fields) for name in names for n in expand_hostlist(name))


def merge_sinfo_groups(groups: list[tuple[SlurmNode, ...]]) -> list[SlurmNode]:
    """One SlurmNode per node, in the order nodes first appear: a node listed by several
    entries (one per partition) has every entry's partition, the rest from its last entry."""
    by_name: dict[str, SlurmNode] = {}
    for nodes in groups:
        for node in nodes:
            prev = by_name.get(node.name)
            if prev is not None:  # (a key set again keeps its first place)
                node = replace(node, partitions=prev.partitions + [p for p in node.partitions
                                                                   if p not in prev.partitions])
            by_name[node.name] = node
    return list(by_name.values())


# --------------------------------------------------------------------------
# scontrol show reservation -o

def parse_reservations(text: str) -> dict[str, str]:
    """Node name -> the name of the ACTIVE reservation holding it, from ``scontrol show
    reservation -o`` (one ``ReservationName=... Nodes=gpu[1-2] ... State=ACTIVE`` line
    each; "No reservations in the system" when none). A future (INACTIVE)
    reservation holds nothing yet. A node in several (OVERLAP) keeps the first."""
    held: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("ReservationName="):
            continue
        # Key=Value words (split_scontrol_line's free-text rules are the job line's:
        # a reservation's Features/Licenses would swallow the keys after them)
        fields = dict(re.findall(r"(?:^|\s)([A-Za-z]+)=(\S*)", line))
        if fields.get("State", "").upper() != "ACTIVE":
            continue
        name = fields.get("ReservationName", "")
        if not name:
            raise SlurmParseError(f"ReservationName: missing in {quoted(line[:80])}")
        for node in expand_hostlist(nullish_to_empty(fields.get("Nodes"))):
            held.setdefault(node, name)
    return held


def parse_partition_sharing(text: str) -> dict[str, str]:
    """Partition name -> how it shares nodes, from ``scontrol show partition -o`` (one
    ``PartitionName=...`` line each): its OverSubscribe upper case without the count
    ('NO', 'YES', 'EXCLUSIVE', 'FORCE'). 26.05 prints a whole-node partition as
    ``OverSubscribe=NO Exclusive=NODE`` (22.05 and 24.11: ``OverSubscribe=EXCLUSIVE``):
    'EXCLUSIVE' too; its other Exclusive modes by their names ('USER', 'TOPO', ...). A
    line without OverSubscribe says nothing of its partition."""
    modes: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("PartitionName="):
            continue
        fields = dict(re.findall(r"(?:^|\s)([A-Za-z]+)=(\S*)", line))
        name, mode = fields.get("PartitionName", ""), fields.get("OverSubscribe", "")
        if not name:
            raise SlurmParseError(f"PartitionName: missing in {quoted(line[:80])}")
        exclusive = fields.get("Exclusive", "NO").upper()
        if exclusive not in ("", "NO"):
            modes[name] = "EXCLUSIVE" if exclusive == "NODE" else exclusive
        elif mode:
            modes[name] = mode.split(":", 1)[0].upper()
    return modes
