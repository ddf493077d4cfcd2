"""The autoscaler: capacity that follows demand.

`plan()` (autoscaler_plan.py) is pure: demand, scale groups, slices and the time in; slices to
create and remove, and why demand is unmet, out. `Autoscaler` is the I/O around it, on its own
thread so that slow cloud calls never hold up scheduling: each evaluation observes every slice
through `describe()`, records what changed in the store, plans, and carries out the plan through
the `Platform`.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from iris import chaos
from iris.cluster.controller import render
from iris.cluster.controller.autoscaler_plan import (
    Plan,
    SliceView,
    demand_units,
    group_state,
    healthy_members,
    plan,
    registration_failure,
    slice_registered,
)
from iris.cluster.controller.scaling_group import ScalingGroup
from iris.cluster.controller.settings import AutoscalerSettings
from iris.cluster.controller.store import ControllerStore, Effects
from iris.cluster.controller.transitions import LIVE_SLICE_STATES, SliceState
from iris.cluster.platform.base import (
    CloudSliceState,
    Labels,
    Platform,
    PlatformError,
    QuotaExhaustedError,
    ResourceNotFoundError,
    SliceHandle,
    prepare_slice_config,
)
from iris.config import DEFAULT_LABEL_PREFIX
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2, time_pb2
from iris.time import Clock, now_ms

logger = logging.getLogger(__name__)

RECENT_ACTIONS = 200

@dataclass
class _Tracked:
    handle: SliceHandle
    group: str
    zone: str


class Autoscaler:
    def __init__(
        self,
        store: ControllerStore,
        platform: Platform,
        config: config_pb2.IrisClusterConfig,
        controller_address: str,
        apply_effects: Callable[[Effects], None],
        evaluation_interval_s: float | None = None,
        clock: Clock = now_ms,
        worker_token: str = "",
    ):
        self._store = store
        # What the workers of new slices authenticate with; empty when auth is off.
        self._worker_token = worker_token
        self._clock = clock
        self._platform = platform
        self._config = config
        self._controller_address = controller_address
        self._apply_effects = apply_effects
        self._labels = Labels(config.platform.label_prefix or DEFAULT_LABEL_PREFIX)
        self.settings = AutoscalerSettings.from_config(config)
        self._interval_s = evaluation_interval_s or self.settings.evaluation_interval_s
        saved = store.load_scale_groups()
        self.groups = {
            name: ScalingGroup.restore(group, saved.get(name)) for name, group in sorted(config.scale_groups.items())
        }
        self._saved_groups = {name: group.bookkeeping() for name, group in self.groups.items()}
        self._tracked: dict[str, _Tracked] = {}
        self._actions: collections.deque[pb.AutoscalerAction] = collections.deque(maxlen=RECENT_ACTIONS)
        self._last_plan = Plan()
        self._adopted = False
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="autoscaler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(30)

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.evaluate()
            except Exception:
                logger.exception("autoscaler evaluation failed")
            self._wake.wait(self._interval_s)
            self._wake.clear()

    # ------------------------------------------------------------ bookkeeping

    def _record(self, group: str, action: str, slice_id: str = "", zone: str = "", reason: str = "") -> None:
        logger.info("autoscaler %s %s %s %s", action, group, slice_id, reason)
        self._actions.append(
            pb.AutoscalerAction(
                at=time_pb2.Timestamp(epoch_ms=self._clock()),
                scale_group=group,
                action=action,
                slice_id=slice_id,
                zone=zone,
                reason=reason,
            )
        )

    def _zones(self) -> list[str]:
        return sorted({z for g in self.groups.values() for z in g.zones()})

    # ------------------------------------------------------------ adoption

    def adopt_existing(self) -> None:
        """After a (re)start: take over the slices that exist and are ours, end the ones no group
        owns, and forget records of slices that vanished while the controller was away."""
        now = self._clock()
        found = self._platform.list_slices(self._zones(), {self._labels.managed: "true"})
        known = {row["slice_id"]: row for row in self._store.slices()}
        seen = set()
        for handle in found:
            seen.add(handle.slice_id)
            group = handle.scale_group
            if group not in self.groups:
                reason = f"no scale group named {group!r} is configured"
                self._record(group, "terminate_orphan", handle.slice_id, handle.zone, reason)
                handle.terminate()
                if handle.slice_id in known:
                    self._forget(handle.slice_id, known[handle.slice_id]["state"], reason, now)
                continue
            if handle.slice_id not in known:
                self._store.record_slice(
                    handle.slice_id, group, handle.zone, "found running at controller start", now,
                    handle.labels, handle.created_at.epoch_ms,
                )  # fmt: skip
                self._record(group, "adopt", handle.slice_id, handle.zone, "found running at controller start")
            with self._lock:
                self._tracked[handle.slice_id] = _Tracked(handle, group, handle.zone)
        for slice_id, row in known.items():
            if slice_id not in seen and row["state"] != SliceState.DELETED:
                self._vanished(slice_id, row["scale_group"], row["state"], now)

    def _vanished(self, slice_id: str, group: str, state: str, now: int) -> None:
        reason = "the slice no longer exists on the platform"
        self._forget(slice_id, state, reason, now)
        self._record(group, "failed", slice_id, reason=reason)

    def _forget(self, slice_id: str, state: str, reason: str, now: int) -> None:
        """Record a slice that is gone from the platform as DELETED, failing its workers first."""
        if state not in (SliceState.FAILED, SliceState.DELETING):
            self._store.update_slice(slice_id, SliceState.FAILED, reason, now, error=reason)
            self._fail_slice_workers(slice_id, reason)
        if state != SliceState.DELETING:
            self._store.update_slice(slice_id, SliceState.DELETING, "cleaning up", now)
        self._store.update_slice(slice_id, SliceState.DELETED, reason, now)

    def _fail_slice_workers(self, slice_id: str, reason: str, on_purpose: bool = False) -> None:
        worker_ids = [w["worker_id"] for w in self._store.slice_members().get(slice_id, [])]
        if not worker_ids:
            return
        if on_purpose:
            effects = self._store.fail_workers(
                worker_ids, f"slice {slice_id} {reason}", self._clock(), final_state=pb.WORKER_STATE_TERMINATED
            )
        else:
            effects = self._store.fail_workers(worker_ids, f"slice {slice_id} failed: {reason}", self._clock())
        self._apply_effects(effects)

    # ------------------------------------------------------------ one evaluation

    def evaluate(self) -> Plan:
        if not self._adopted:
            # Until the platform has been asked what exists, acting could double-create or leak slices.
            try:
                self.adopt_existing()
            except PlatformError as exc:
                logger.warning("cannot list existing slices yet (%s); retrying on the next evaluation", exc)
                return self._last_plan
            self._adopted = True
        self._observe_slices()
        now = self._clock()
        views = self._slice_views(now)
        demands = self._store.pending_demands()
        units = demand_units(demands)
        with self._lock:
            groups = list(self.groups.values())
            result = plan(groups, views, units, now, self.settings)
            newly_waiting = any(g.demand_since_ms is None and result.demand_since[g.name] for g in groups)
            for group in groups:
                group.demand_since_ms = result.demand_since[group.name]
            if newly_waiting:
                # Demand first seen now must wait out scale_up_delay like any other: plan again
                # with its start recorded.
                result = plan(groups, views, units, now, self.settings)
            waits_changed = result.job_waits != self._last_plan.job_waits
            self._last_plan = result
        if waits_changed:
            # The pending reasons the scheduler writes carry these: have them rewritten now.
            self._apply_effects(Effects(wake_scheduler=True))
        for name, count in result.scale_up.items():
            for _ in range(count):
                if not self._scale_up(self.groups[name], result.reasons.get(name, "demand")):
                    break
        for name, slice_id in result.scale_down:
            self._terminate(slice_id, f"idle for {self.settings.scale_down_delay_ms / 1000:.0f}s (scale_down_delay)")
        self._save_groups()
        return result

    def job_waits(self) -> dict[str, str]:
        """The last evaluation's `Plan.job_waits`: why no slice comes for each waiting job."""
        with self._lock:
            return dict(self._last_plan.job_waits)

    def _save_groups(self) -> None:
        """Persist each group's bookkeeping that changed, so a restarted controller keeps its
        backoffs, blocked zones and how long demand has waited."""
        with self._lock:
            for name, group in self.groups.items():
                saved = group.bookkeeping()
                if self._saved_groups.get(name) != saved:
                    self._store.save_scale_group(name, **saved)
                    self._saved_groups[name] = saved

    def _slice_views(self, now: int) -> list[SliceView]:
        """Each slice with its members joined on the slice id they registered with; an idle
        slice's idle-since time is kept in the store, so a restart does not reset it."""
        members = self._store.slice_members()
        views = []
        for row in self._store.slices():
            slice_id = row["slice_id"]
            own = members.get(slice_id, [])
            expected = json.loads(row["worker_ids"])
            is_registered = row["state"] == SliceState.READY and slice_registered(expected, healthy_members(own))
            idle_since = row["idle_since_ms"]
            if is_registered and not any(w["busy"] for w in own):
                if idle_since is None:
                    idle_since = now
                    self._store.update_slice_bookkeeping(slice_id, idle_since_ms=now)
            elif idle_since is not None:
                idle_since = None
                self._store.update_slice_bookkeeping(slice_id, idle_since_ms=None)
            views.append(
                SliceView(slice_id, row["scale_group"], row["zone"], row["state"], idle_since, is_registered)
            )
        return views

    def _observe_slices(self) -> None:
        """Poll every slice and record what changed; FAILED slices are cleaned up and counted."""
        now = self._clock()
        rows = {row["slice_id"]: row for row in self._store.slices()}
        with self._lock:
            tracked = dict(self._tracked)
        for slice_id, entry in tracked.items():
            row = rows.get(slice_id)
            if row is None:
                continue
            if row["state"] in (SliceState.DELETING, SliceState.FAILED):
                # A termination cut short (platform outage, controller crash): finish it.
                self._terminate(slice_id, row["error"] or "finishing an interrupted termination", action="terminate")
                continue
            try:
                chaos.maybe_fail(chaos.PLATFORM_DESCRIBE_SLICE, PlatformError)
                status = entry.handle.describe()
            except ResourceNotFoundError:
                self._vanished(slice_id, entry.group, row["state"], now)
                self._untrack(slice_id)
                continue
            except PlatformError as exc:
                logger.warning("cannot describe slice %s: %s", slice_id, exc)
                continue
            state = status.state.value
            if state == row["state"] or state in (CloudSliceState.UNKNOWN.value, CloudSliceState.REPAIRING.value):
                self._check_registration(slice_id, entry, row, now)
                continue
            if state == SliceState.FAILED or (state == SliceState.DELETING and row["state"] != SliceState.DELETING):
                reason = status.message or "the platform reported it failed"
                self._slice_failed(slice_id, entry, row["state"], reason, zone_exhausted=status.quota_exhausted)
                continue
            worker_ids = [w.worker_id for w in status.workers]
            self._store.update_slice(slice_id, state, f"platform reports {state}", now, worker_ids=worker_ids)
            if state == SliceState.READY:
                self.groups[entry.group].record_success()
                self._record(entry.group, "ready", slice_id, entry.zone, f"{len(worker_ids)} worker(s) up")

    def _check_registration(self, slice_id: str, entry: _Tracked, row, now: int) -> None:
        """A READY slice whose workers never register is as good as failed."""
        if row["state"] != SliceState.READY or row["ready_at_ms"] is None:
            return
        expected = json.loads(row["worker_ids"])
        healthy = healthy_members(self._store.slice_members().get(slice_id, []))
        if slice_registered(expected, healthy):
            # Registered: the deadline no longer applies, even across a controller restart.
            self._store.update_slice_bookkeeping(slice_id, ready_at_ms=None)
            return
        failure = registration_failure(expected, healthy, row["ready_at_ms"], now, self.settings.startup_grace_ms)
        if failure:
            self._slice_failed(slice_id, entry, row["state"], failure, never_usable=True)

    def _slice_failed(
        self,
        slice_id: str,
        entry: _Tracked,
        current: str,
        reason: str,
        never_usable: bool = False,
        zone_exhausted: bool = False,
    ) -> None:
        now = self._clock()
        group = self.groups[entry.group]
        if current != SliceState.FAILED:
            self._store.update_slice(slice_id, SliceState.FAILED, reason, now, error=reason)
        self._fail_slice_workers(slice_id, reason)
        if zone_exhausted:
            # The zone ran out after accepting the request: the group's other zones may still have room.
            group.block_zone(entry.zone, now, self.settings.quota_backoff_ms, reason)
            self._record(entry.group, "quota", zone=entry.zone, reason=f"{reason}; trying the next zone")
        elif current != SliceState.READY or never_usable:
            # A slice that never came up says something about the group (bad image, no capacity);
            # a READY slice dying (preemption) does not, so it costs no backoff.
            group.record_failure(now, reason, self.settings.failure_backoff_base_ms, self.settings.failure_backoff_max_ms)
        self._record(entry.group, "failed", slice_id, entry.zone, reason)
        # The platform cleans up after a failure itself; terminate() is the safety net.
        self._terminate(slice_id, f"cleaning up after failure: {reason}", action="terminate")

    def _untrack(self, slice_id: str) -> None:
        with self._lock:
            self._tracked.pop(slice_id, None)

    # ------------------------------------------------------------ actions

    def _bootstrap_config(self) -> config_pb2.BootstrapConfig:
        bootstrap = config_pb2.BootstrapConfig()
        bootstrap.CopyFrom(self._config.defaults.bootstrap)
        bootstrap.controller_address = self._controller_address
        bootstrap.worker_token = self._worker_token
        return bootstrap

    def _scale_up(self, group: ScalingGroup, reason: str) -> str | None:
        """Create one slice, trying the group's zones in order; its id, or None when none would take it."""
        now = self._clock()
        for zone in group.available_zones(now):
            config = prepare_slice_config(
                group.config.slice_template, group.name, self._labels.prefix, zone, group.provider
            )
            try:
                chaos.maybe_fail(chaos.PLATFORM_CREATE_SLICE, PlatformError)
                handle = self._platform.create_slice(config, self._bootstrap_config())
            except QuotaExhaustedError as exc:
                group.block_zone(zone, now, self.settings.quota_backoff_ms, str(exc))
                self._record(group.name, "quota", zone=zone, reason=f"{exc}; trying the next zone")
                continue
            except PlatformError as exc:
                group.record_failure(now, str(exc), self.settings.failure_backoff_base_ms, self.settings.failure_backoff_max_ms)
                self._record(group.name, "failed", zone=zone, reason=str(exc))
                return None
            self._store.record_slice(
                handle.slice_id, group.name, handle.zone or zone, reason, now, handle.labels,
                handle.created_at.epoch_ms,
            )  # fmt: skip
            with self._lock:
                self._tracked[handle.slice_id] = _Tracked(handle, group.name, handle.zone or zone)
            group.last_scale_up_ms = now
            self._record(group.name, "scale_up", handle.slice_id, handle.zone or zone, reason)
            return handle.slice_id
        return None

    def _terminate(self, slice_id: str, reason: str, action: str = "scale_down") -> None:
        now = self._clock()
        with self._lock:
            entry = self._tracked.get(slice_id)
        row = next((r for r in self._store.slices() if r["slice_id"] == slice_id), None)
        if row is None:
            return
        if row["state"] != SliceState.DELETING:
            self._store.update_slice(slice_id, SliceState.DELETING, reason, now)
        self._record(row["scale_group"], action, slice_id, row["zone"], reason)
        if entry is not None:
            try:
                chaos.maybe_fail(chaos.PLATFORM_TERMINATE_SLICE, PlatformError)
                entry.handle.terminate()
            except ResourceNotFoundError:
                pass
            except PlatformError as exc:
                # The slice stays DELETING; the next evaluation tries again.
                logger.warning("terminating slice %s failed: %s; will retry", slice_id, exc)
                return
        self._fail_slice_workers(slice_id, f"terminated: {reason}", on_purpose=True)
        self._store.update_slice(slice_id, SliceState.DELETED, "terminated", self._clock())
        self._untrack(slice_id)

    # ------------------------------------------------------------ operator actions

    def create_slice(self, group_name: str) -> str:
        group = self.groups.get(group_name)
        if group is None:
            known = ", ".join(self.groups) or "none"
            raise ValueError(f"no scale group named {group_name!r} (configured: {known})")
        live = [
            r for r in self._store.slices() if r["scale_group"] == group_name and r["state"] in LIVE_SLICE_STATES
        ]
        if len(live) >= group.max_slices:
            raise ValueError(f"scale group {group_name} is at max_slices ({group.max_slices})")
        slice_id = self._scale_up(group, "requested by an operator")
        self._save_groups()
        if slice_id is None:
            raise PlatformError(f"could not create a slice for {group_name}: {group.last_failure or 'no zone had quota'}")
        return slice_id

    def terminate_slice(self, slice_id: str) -> None:
        if not any(r["slice_id"] == slice_id for r in self._store.slices()):
            raise ResourceNotFoundError(f"slice {slice_id} not found")
        self._terminate(slice_id, "terminated by an operator", action="terminate")

    def terminate_all(self) -> list[str]:
        ended = []
        for row in self._store.slices():
            self._terminate(row["slice_id"], "terminated by an operator (all)", action="terminate")
            ended.append(row["slice_id"])
        return ended

    # ------------------------------------------------------------ status

    def status(self) -> pb.GetAutoscalerStatusResponse:
        now = self._clock()
        views = {v.slice_id: v for v in self._slice_views(now)}
        rows = self._store.slices()
        response = pb.GetAutoscalerStatusResponse(enabled=True, unroutable=self._last_plan.unroutable)
        with self._lock:
            for name, group in self.groups.items():
                group_views = [v for v in views.values() if v.group == name]
                state = group_state(group, group_views, now)
                waiting = group.demand_since_ms is not None and now - group.demand_since_ms < self.settings.scale_up_delay_ms
                if state == "available" and waiting:
                    # Demand is there but has not yet waited out scale_up_delay.
                    state = "cooldown"
                status = pb.ScaleGroupStatus(
                    name=name,
                    state=state,
                    min_slices=group.min_slices,
                    max_slices=group.max_slices,
                    priority=group.priority,
                    demand=self._last_plan.demand.get(name, 0),
                    unmet_reason=self._last_plan.unmet.get(name, ""),
                    blocked_zones=[
                        f"{z or 'default'}: {why}" for z, (until, why) in sorted(group.blocked_zones.items()) if until > now
                    ],
                    consecutive_failures=group.consecutive_failures,
                    detail=group.last_failure,
                )
                if group.backoff_until_ms > now:
                    status.backoff_until.CopyFrom(time_pb2.Timestamp(epoch_ms=group.backoff_until_ms))
                status.slices.extend(render.slice_info(r) for r in rows if r["scale_group"] == name)
                response.groups.append(status)
            response.recent_actions.extend(reversed(self._actions))
        return response
