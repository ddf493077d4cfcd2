"""The autoscaler's pure planning: demand (pending tasks, a gang counting as one unit), the scale
groups and the slices they have, and the time in; which slices to create and which to remove, and
why demand is unmet, out. No I/O: `Autoscaler` (autoscaler.py) observes, calls `plan()` and carries
the plan out through the `Platform`.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field

from iris.cluster.controller.scaling_group import ScalingGroup
from iris.cluster.controller.scheduling_types import TaskDemand
from iris.cluster.controller.settings import AutoscalerSettings
from iris.cluster.controller.transitions import IN_FLIGHT_SLICE_STATES, LIVE_SLICE_STATES, SliceState
from iris.rpc import cluster_pb2 as pb

# Slices one group may request in one evaluation: a burst of demand ramps up over a few rounds
# instead of asking the cloud for everything at once.
MAX_SCALE_UPS_PER_EVALUATION = 4


@dataclass(frozen=True)
class DemandUnit:
    """What must be placed together: one task, or every pending task of a gang."""

    job_id: str
    task_ids: tuple[str, ...]
    demand: TaskDemand

    @property
    def gang_size(self) -> int:
        return len(self.task_ids) if self.demand.gang_group_by else 1


def demand_units(pending: list[TaskDemand]) -> list[DemandUnit]:
    units: list[DemandUnit] = []
    gangs: dict[str, list[TaskDemand]] = collections.defaultdict(list)
    for task in pending:
        if task.gang_group_by:
            gangs[task.job_id].append(task)
        else:
            units.append(DemandUnit(task.job_id, (task.task_id,), task))
    for job_id, tasks in gangs.items():
        units.append(DemandUnit(job_id, tuple(t.task_id for t in tasks), tasks[0]))
    return units


@dataclass(frozen=True)
class SliceView:
    slice_id: str
    group: str
    zone: str
    state: str
    # Since when every worker of the slice has run nothing; None while busy or not yet up.
    idle_since_ms: int | None = None
    # READY and every worker registered with the controller.
    registered: bool = False


@dataclass
class Plan:
    scale_up: dict[str, int] = field(default_factory=dict)  # group -> slices to create
    scale_down: list[tuple[str, str]] = field(default_factory=list)  # (group, slice_id)
    demand: dict[str, int] = field(default_factory=dict)  # group -> units routed to it
    unmet: dict[str, str] = field(default_factory=dict)  # group -> why its demand waits
    unroutable: list[str] = field(default_factory=list)  # demand no group can serve, with reason
    # job -> why no slice comes for its waiting demand (a blocked zone per line), for its pending reason
    job_waits: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)  # group -> why it scales
    # group -> since when its demand has waited (None: it has none); the caller records it
    demand_since: dict[str, int | None] = field(default_factory=dict)


def group_state(group: ScalingGroup, slices: list[SliceView], now_ms: int) -> str:
    live = [s for s in slices if s.state in LIVE_SLICE_STATES]
    if group.backoff_until_ms > now_ms:
        return "backoff"
    if not group.available_zones(now_ms):
        return "quota-blocked"
    if len(live) >= group.max_slices:
        return "at-max"
    return "available"


def plan(
    groups: list[ScalingGroup],
    slices: list[SliceView],
    units: list[DemandUnit],
    now_ms: int,
    settings: AutoscalerSettings,
) -> Plan:
    """Decide, without side effects, which slices to add and remove.

    Demand goes to the first group, by priority then name, that can serve it and may grow now;
    demand that only unavailable groups could serve is reported with their reason. Slices being
    created count as capacity on the way, so a slow bootstrap does not trigger more requests, and
    a group with any demand routed to it never loses a slice: that is what keeps a waiting gang
    from making the autoscaler add and remove slices in turn. The groups' bookkeeping that follows
    (since when demand waits) comes back in the plan for the caller to record.
    """
    result = Plan()
    ordered = sorted(groups, key=lambda g: (g.priority, g.name))
    by_group: dict[str, list[SliceView]] = {g.name: [s for s in slices if s.group == g.name] for g in groups}
    live = {g.name: [s for s in by_group[g.name] if s.state in LIVE_SLICE_STATES] for g in groups}
    room = {g.name: max(0, g.max_slices - len(live[g.name])) for g in groups}
    states = {g.name: group_state(g, by_group[g.name], now_ms) for g in groups}
    need = _route_demand(ordered, units, states, room, now_ms, result)
    for group in ordered:
        name = group.name
        waited_since = group.demand_since_ms if group.demand_since_ms is not None else now_ms
        result.demand_since[name] = waited_since if result.demand.get(name) else None
        add = _slices_to_add(group, live[name], need.get(name, 0), now_ms, settings, result)
        if states[name] != "available":
            add = 0
        add = min(add, room[name], MAX_SCALE_UPS_PER_EVALUATION)
        if add:
            result.scale_up[name] = add
        if not result.demand.get(name):
            result.scale_down.extend((name, s) for s in _idle_to_remove(group, live[name], now_ms, settings))
    return result


def _route_demand(
    ordered: list[ScalingGroup],
    units: list[DemandUnit],
    states: dict[str, str],
    room: dict[str, int],
    now_ms: int,
    result: Plan,
) -> dict[str, float]:
    """Route each unit to a group; returns the slices' worth of demand each group got."""
    need: dict[str, float] = collections.defaultdict(float)
    for unit in units:
        # Work that needs no accelerator goes to plain groups first: buying a TPU host for it is a waste.
        candidates = ordered if unit.demand.device is not None else sorted(ordered, key=lambda g: g.worker_device() is not None)
        able = [(g, g.cannot_serve(unit.demand, unit.gang_size)) for g in candidates]
        servers = [g for g, why in able if not why]
        if not servers:
            detail = "; ".join(f"{g.name}: {why}" for g, why in able) or "no scale groups are configured"
            result.unroutable.append(f"{unit.job_id}: no scale group can run it ({detail})")
            continue
        chosen = next((g for g in servers if states[g.name] == "available" and room[g.name] > 0), None)
        if chosen is None:
            first = servers[0]
            result.unmet.setdefault(first.name, _unavailable_reason(first, states[first.name], now_ms))
            result.job_waits.setdefault(unit.job_id, capacity_wait_reason(first, states[first.name], now_ms))
            result.demand[first.name] = result.demand.get(first.name, 0) + 1
            continue
        result.demand[chosen.name] = result.demand.get(chosen.name, 0) + 1
        if unit.gang_size > 1:
            need[chosen.name] += 1
        else:
            need[chosen.name] += 1 / chosen.tasks_per_slice(unit.demand)
    return need


def _slices_to_add(
    group: ScalingGroup, group_slices: list[SliceView], need: float, now_ms: int, settings: AutoscalerSettings, result: Plan
) -> int:
    """Slices the group's demand and min_slices call for, before availability and max limits."""
    name = group.name
    coming = sum(
        1
        for s in group_slices
        if s.state in IN_FLIGHT_SLICE_STATES or (s.state == SliceState.READY and not s.registered)
    )
    wanted = math.ceil(need - 1e-9)
    delayed = group.demand_since_ms is not None and now_ms - group.demand_since_ms < settings.scale_up_delay_ms
    add = 0
    if wanted > coming and not delayed:
        add = wanted - coming
        result.reasons[name] = f"{result.demand.get(name, 0)} pending unit(s) need {wanted} more slice(s)"
    elif wanted > coming:
        wait_s = (settings.scale_up_delay_ms - (now_ms - (group.demand_since_ms or now_ms))) / 1000
        result.unmet.setdefault(name, f"waiting {wait_s:.0f}s more (scale_up_delay) before adding slices")
    if len(group_slices) < group.min_slices:
        if group.min_slices - len(group_slices) > add:
            result.reasons[name] = f"below min_slices ({len(group_slices)} < {group.min_slices})"
        add = max(add, group.min_slices - len(group_slices))
    return add


def _idle_to_remove(
    group: ScalingGroup, group_slices: list[SliceView], now_ms: int, settings: AutoscalerSettings
) -> list[str]:
    """Slices idle past scale_down_delay, longest idle first, never going below min_slices."""
    idle = sorted(
        (s for s in group_slices if s.state == SliceState.READY and s.idle_since_ms is not None),
        key=lambda s: s.idle_since_ms or 0,
    )
    removable = len(group_slices) - group.min_slices
    removed = []
    for view in idle:
        if removable <= 0:
            break
        if now_ms - (view.idle_since_ms or now_ms) >= settings.scale_down_delay_ms:
            removed.append(view.slice_id)
            removable -= 1
    return removed


def capacity_wait_reason(group: ScalingGroup, state: str, now_ms: int) -> str:
    """Why `group` adds no slice for a job now: when every zone refused (quota or stockout), one
    line per zone with why, so that the job's own status says where capacity was tried."""
    if state != "quota-blocked":
        return _unavailable_reason(group, state, now_ms)
    lines = [f"{group.name} can add no slice: every zone refused"]
    lines += [f"  {zone or 'default'}: {why}" for zone, (_, why) in sorted(group.blocked_zones.items())]
    return "\n".join(lines)


def explain_pending(
    pending_reasons: dict[str, str], demands: list[TaskDemand], job_waits: dict[str, str]
) -> dict[str, str]:
    """The scheduler's reason for each pending task, followed by why the autoscaler brings no
    slice for the task's job (`Plan.job_waits`), if it says so."""
    if not job_waits:
        return pending_reasons
    job_of = {demand.task_id: demand.job_id for demand in demands}
    explained = {}
    for task_id, reason in pending_reasons.items():
        wait = job_waits.get(job_of.get(task_id, ""))
        explained[task_id] = f"{reason}\n{wait}" if wait else reason
    return explained


def _unavailable_reason(group: ScalingGroup, state: str, now_ms: int) -> str:
    if state == "backoff":
        wait = (group.backoff_until_ms - now_ms) / 1000
        return f"{group.name} is backing off for {wait:.0f}s after {group.consecutive_failures} failure(s): {group.last_failure}"
    if state == "quota-blocked":
        zones = ", ".join(f"{z or 'default'} ({why})" for z, (_, why) in sorted(group.blocked_zones.items()))
        return f"{group.name} has no zone with quota: {zones}"
    if state == "at-max":
        return f"{group.name} is at max_slices ({group.max_slices})"
    return f"{group.name} cannot grow now"


def healthy_members(members: list) -> set[str]:
    return {w["worker_id"] for w in members if w["state"] == pb.WORKER_STATE_HEALTHY}


def slice_registered(expected: list[str], healthy: set[str]) -> bool:
    """Every worker the platform started for the slice registered with its slice id. Workers
    are counted, not matched by name: a worker may register under its own id (host:port)."""
    return bool(expected) and len(healthy) >= len(expected)


def registration_failure(expected: list[str], healthy: set[str], ready_at_ms: int, now_ms: int, grace_ms: int) -> str:
    """Why a READY slice counts as failed: its workers did not all register within the startup
    grace; "" while they have, or may still."""
    if slice_registered(expected, healthy) or now_ms - ready_at_ms < grace_ms:
        return ""
    missing = sorted(set(expected) - healthy)
    short = len(expected) - len(healthy)
    who = f"worker(s) {', '.join(missing)}" if len(missing) == short else f"{short} of {len(expected)} worker(s)"
    return f"{who} did not register within the startup grace period ({grace_ms / 1000:.0f}s)"
