"""The Autoscaler against a real ControllerStore (SQLite in tmp_path) and the fake cloud platform.

Time is a `FakeClock` that both the fake cloud and the autoscaler read (it is the autoscaler's
injected clock), so slices move CREATING -> BOOTSTRAPPING -> READY and delays pass only when a test
advances the clock: no sleeps, no threads (`evaluate()` is called directly, as the autoscaler's
loop would). Workers "register" by the test writing them into the store with the slice's
attributes, as the worker daemons of a READY slice do; the scheduler runs when a test says so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from iris import chaos
from iris.cluster.controller.autoscaler import Autoscaler
from iris.cluster.controller.scheduler import find_assignments
from iris.cluster.controller.store import ControllerStore, Effects
from iris.cluster.platform.base import Platform, PlatformError, ResourceNotFoundError
from iris.cluster.types import attribute_to_proto
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "platform"))
from fake_cloud import FakeClock, FakeCloudPlatform  # noqa: E402

GiB = 1024**3
SECOND = 1000
MINUTE = 60 * SECOND
CONTROLLER = "http://controller.test:10000"
CREATE_MS = 30 * SECOND
BOOTSTRAP_MS = 60 * SECOND
UP_MS = CREATE_MS + BOOTSTRAP_MS
EVALUATION_MS = 10 * SECOND  # also the failure backoff base
SCALE_DOWN_MS = 5 * MINUTE
QUOTA_BACKOFF_MS = 5 * MINUTE
STARTUP_GRACE_MS = 10 * MINUTE


# ---------------------------------------------------------------- config


def scale_group(
    name: str,
    *,
    zones: tuple[str, ...] = ("zone-a", "zone-b"),
    num_vms: int = 1,
    min_slices: int = 0,
    max_slices: int = 4,
    priority: int | None = None,
    cpu: int = 8,
) -> config_pb2.ScaleGroupConfig:
    group = config_pb2.ScaleGroupConfig(name=name, min_slices=min_slices, max_slices=max_slices)
    if priority is not None:
        group.priority = priority
    group.zones.extend(zones)
    group.resources.CopyFrom(config_pb2.ScaleGroupResources(cpu=cpu, ram=32 * GiB))
    group.slice_template.num_vms = num_vms
    group.slice_template.accelerator_type = config_pb2.ACCELERATOR_TYPE_CPU
    group.slice_template.gcp.preemptible = False
    return group


def cluster_config(
    *groups: config_pb2.ScaleGroupConfig, scale_up_delay_ms: int = 0
) -> config_pb2.IrisClusterConfig:
    config = config_pb2.IrisClusterConfig(name="test")
    config.platform.label_prefix = "iris"
    auto = config.defaults.autoscaler
    auto.evaluation_interval.milliseconds = EVALUATION_MS
    auto.scale_up_delay.milliseconds = scale_up_delay_ms
    auto.scale_down_delay.milliseconds = SCALE_DOWN_MS
    auto.quota_backoff.milliseconds = QUOTA_BACKOFF_MS
    auto.failure_backoff_max.milliseconds = 10 * MINUTE
    auto.startup_grace_period.milliseconds = STARTUP_GRACE_MS
    for group in groups:
        config.scale_groups[group.name].CopyFrom(group)
    return config


def job_request(name: str, *, replicas: int = 1, cpu: int = 1000, group_by: str = "") -> pb.LaunchJobRequest:
    request = pb.LaunchJobRequest(
        name=name,
        entrypoint=pb.Entrypoint(command=pb.CommandEntrypoint(argv=["python", "-c", "pass"])),
        resources=pb.ResourceSpec(cpu_millicores=cpu, memory_bytes=GiB),
        bundle_uri="file:///bundles/b.zip",
        bundle_sha256="ab" * 32,
        replicas=replicas,
    )
    request.max_retries_preemption = 10
    if group_by:
        request.coscheduling.group_by = group_by
    return request


# ---------------------------------------------------------------- harness


class Env:
    """A controller's view of one cluster: store, fake cloud, autoscaler, and a clock."""

    def __init__(self, tmp_path: Path, clock: FakeClock, config: config_pb2.IrisClusterConfig):
        self.clock = clock
        self.store = ControllerStore(tmp_path / "controller.sqlite3")
        self.platform = FakeCloudPlatform(clock, "iris", create_ms=CREATE_MS, bootstrap_ms=BOOTSTRAP_MS)
        self.effects: list[Effects] = []
        self.config = config
        self.autoscaler = self.new_autoscaler(config)

    def new_autoscaler(self, config: config_pb2.IrisClusterConfig | None = None) -> Autoscaler:
        """A (re)started controller's autoscaler on the same store and cloud."""
        return Autoscaler(
            self.store, self.platform, config or self.config, CONTROLLER, self.effects.append, clock=self.clock
        )

    # -- time and evaluations

    def evaluate(self, advance_ms: int = 0):
        self.clock.advance(advance_ms)
        return self.autoscaler.evaluate()

    # -- jobs and workers

    def submit(self, name: str, **kwargs) -> str:
        job_id = "/" + name
        self.store.create_job(job_id, job_request(job_id, **kwargs), self.clock())
        return job_id

    def register_workers(self, slice_id: str, own_ids: bool = False) -> list[str]:
        """The daemons of a slice register with the controller, reporting the slice's attributes;
        with `own_ids` each keeps an id of its own (host:port) instead of the platform's."""
        row = self.slice_row(slice_id)
        worker_ids = []
        for index, worker in enumerate(self.platform.handle(slice_id).describe().workers):
            metadata = pb.WorkerMetadata(
                hostname=worker.worker_id,
                ip_address=worker.internal_address,
                cpu_millicores=8000,
                memory_bytes=32 * GiB,
                disk_bytes=100 * GiB,
                runtime="fake",
            )
            for key, value in {
                "slice-id": slice_id,
                "tpu-name": slice_id,
                "scale-group": row["scale_group"],
                "zone": row["zone"],
            }.items():
                metadata.attributes[key].CopyFrom(attribute_to_proto(value))
            worker_id = f"10.1.{index}.7:10001" if own_ids else worker.worker_id
            address = f"http://{worker.worker_id}:10001"
            self.store.register_worker(worker_id, address, metadata, self.clock())
            worker_ids.append(worker_id)
        return worker_ids

    def register_ready_slices(self) -> None:
        """Workers of every READY slice that have not registered yet do so now."""
        healthy = {w.worker_id for w in self.store.list_workers() if w.state == pb.WORKER_STATE_HEALTHY}
        for row in self.store.slices():
            if row["state"] == "READY" and not set(json.loads(row["worker_ids"])) <= healthy:
                self.register_workers(row["slice_id"])

    def schedule(self) -> list[tuple[str, str]]:
        demands, workers = self.store.scheduling_inputs()
        result = find_assignments(demands, workers)
        self.store.apply_assignments(result.assignments, result.pending_reasons, self.clock())
        return result.assignments

    def bring_up(self, slice_id: str) -> None:
        """Let the slice finish provisioning, observe it READY, and register its workers."""
        self.clock.advance(UP_MS)
        self.autoscaler.evaluate()
        assert self.slice_row(slice_id)["state"] == "READY"
        self.register_workers(slice_id)

    # -- reads

    def slice_row(self, slice_id: str):
        return next(r for r in self.store.slices(include_deleted=True) if r["slice_id"] == slice_id)

    def slice_states(self, include_deleted: bool = False) -> dict[str, str]:
        return {r["slice_id"]: r["state"] for r in self.store.slices(include_deleted=include_deleted)}

    def live_slice_ids(self) -> list[str]:
        return sorted(self.slice_states())

    def group_status(self, name: str) -> pb.ScaleGroupStatus:
        return next(g for g in self.autoscaler.status().groups if g.name == name)

    def actions(self, action: str | None = None) -> list[pb.AutoscalerAction]:
        """Recent actions, oldest first."""
        found = list(reversed(self.autoscaler.status().recent_actions))
        return [a for a in found if action is None or a.action == action]

    def worker_state(self, worker_id: str) -> int:
        return next(w.state for w in self.store.list_workers() if w.worker_id == worker_id)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_env(tmp_path: Path, clock: FakeClock, *groups: config_pb2.ScaleGroupConfig, **kwargs) -> Env:
    env = Env(tmp_path, clock, cluster_config(*groups, **kwargs))
    return env


# ---------------------------------------------------------------- the fake cloud itself


def test_fake_cloud_implements_the_platform_protocol(clock):
    assert isinstance(FakeCloudPlatform(clock), Platform)


def test_fake_cloud_slice_moves_through_creating_bootstrapping_ready_on_the_clock(clock):
    cloud = FakeCloudPlatform(clock, create_ms=CREATE_MS, bootstrap_ms=BOOTSTRAP_MS)
    template = scale_group("cpu", num_vms=2).slice_template
    template.gcp.zone = "zone-a"
    handle = cloud.create_slice(template, config_pb2.BootstrapConfig())

    assert handle.describe().state == "CREATING"
    clock.advance(CREATE_MS)
    assert handle.describe().state == "BOOTSTRAPPING"
    clock.advance(BOOTSTRAP_MS)
    status = handle.describe()
    assert status.state == "READY"
    assert [w.worker_id for w in status.workers] == [f"{handle.slice_id}-0", f"{handle.slice_id}-1"]
    assert handle.zone == "zone-a"

    handle.terminate()
    assert cloud.live_resources() == []
    with pytest.raises(ResourceNotFoundError):
        handle.describe()


def test_fake_cloud_list_slices_filters_by_labels_and_zone(clock):
    cloud = FakeCloudPlatform(clock)
    ours = cloud.add_existing_slice("cpu", "zone-a")
    cloud.add_existing_slice("cpu", "zone-b")
    cloud.add_existing_slice("cpu", "zone-a", managed=False)

    assert [h.slice_id for h in cloud.list_slices(["zone-a"], {"iris-managed": "true"})] == [ours.slice_id]
    assert len(cloud.list_slices([], {"iris-scale-group": "cpu"})) == 3
    assert ours.labels["iris-slice-id"] == ours.slice_id


# ---------------------------------------------------------------- scale up and zones


def test_autoscaler_pending_job_creates_a_slice_that_becomes_ready(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu"))
    env.submit("train")

    env.evaluate()
    (slice_id,) = env.live_slice_ids()
    assert env.slice_states() == {slice_id: "CREATING"}
    assert env.platform.slice_zone(slice_id) == "zone-a"

    env.evaluate(CREATE_MS)
    assert env.slice_row(slice_id)["state"] == "BOOTSTRAPPING"
    env.evaluate(BOOTSTRAP_MS)
    row = env.slice_row(slice_id)
    assert row["state"] == "READY"
    assert row["worker_ids"] == f'["{slice_id}-0"]'
    assert [a.action for a in env.actions()] == ["scale_up", "ready"]
    assert len(env.platform.create_requests) == 1


def test_autoscaler_scale_up_delay_holds_back_the_first_request(tmp_path, clock):
    """A job seen for the first time must wait scale_up_delay before the autoscaler buys a slice
    for it; it should not be bought at once and the delay applied only to later evaluations."""
    env = make_env(tmp_path, clock, scale_group("cpu"), scale_up_delay_ms=60 * SECOND)
    env.submit("train")

    env.evaluate()
    assert env.platform.create_requests == []
    assert env.group_status("cpu").unmet_reason == "waiting 60s more (scale_up_delay) before adding slices"

    env.evaluate(30 * SECOND)
    assert env.platform.create_requests == []

    env.evaluate(30 * SECOND)
    assert len(env.platform.create_requests) == 1


def test_autoscaler_quota_in_zone_a_creates_in_zone_b_within_one_evaluation(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("tpu", zones=("zone-a", "zone-b")))
    env.platform.exhaust_quota("zone-a", "quota exhausted: TPUS_PER_PROJECT_PER_ZONE in zone-a")
    env.submit("train")

    env.evaluate()

    (slice_id,) = env.live_slice_ids()
    assert env.slice_row(slice_id)["zone"] == "zone-b"
    assert env.platform.live_slice_ids() == [slice_id]
    assert env.platform.slice_zone(slice_id) == "zone-b"
    status = env.group_status("tpu")
    assert list(status.blocked_zones) == ["zone-a: quota exhausted: TPUS_PER_PROJECT_PER_ZONE in zone-a"]
    assert status.state == "available"
    quota, scale_up = env.actions()
    assert (quota.action, quota.zone) == ("quota", "zone-a")
    assert quota.reason == "quota exhausted: TPUS_PER_PROJECT_PER_ZONE in zone-a; trying the next zone"
    assert (scale_up.action, scale_up.zone, scale_up.slice_id) == ("scale_up", "zone-b", slice_id)


def test_autoscaler_blocked_zone_is_not_asked_again_until_quota_backoff_passes(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("tpu", zones=("zone-a", "zone-b")))
    env.platform.exhaust_quota("zone-a")
    env.submit("first")
    env.evaluate()
    env.platform.restore_quota("zone-a")

    env.submit("second", cpu=8000)
    env.evaluate(QUOTA_BACKOFF_MS - 1)
    assert [zone for zone, _ in env.platform.create_requests] == ["zone-b", "zone-b"]
    assert env.platform.refused_requests == [("zone-a", "quota")]

    env.submit("third", cpu=8000)
    env.evaluate(1)
    assert [zone for zone, _ in env.platform.create_requests] == ["zone-b", "zone-b", "zone-a"]
    assert list(env.group_status("tpu").blocked_zones) == []


def test_autoscaler_quota_in_every_zone_leaves_group_quota_blocked_with_reason(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("tpu", zones=("zone-a", "zone-b")))
    env.platform.exhaust_quota("zone-a", "no quota in a")
    env.platform.exhaust_quota("zone-b", "no quota in b")
    env.submit("train")

    env.evaluate()
    assert env.live_slice_ids() == []
    env.evaluate(EVALUATION_MS)

    status = env.group_status("tpu")
    assert status.state == "quota-blocked"
    assert sorted(status.blocked_zones) == ["zone-a: no quota in a", "zone-b: no quota in b"]
    assert status.unmet_reason == "tpu has no zone with quota: zone-a (no quota in a), zone-b (no quota in b)"
    # Blocked zones are not asked again while blocked.
    assert env.platform.refused_requests == [("zone-a", "quota"), ("zone-b", "quota")]


def test_autoscaler_quota_blocked_group_falls_through_to_the_next_priority(tmp_path, clock):
    env = make_env(
        tmp_path,
        clock,
        scale_group("preferred", zones=("zone-a",), priority=0),
        scale_group("fallback", zones=("zone-c",), priority=10),
    )
    env.platform.exhaust_quota("zone-a")
    env.submit("train")

    env.evaluate()  # preferred's only zone refuses: blocked
    assert env.live_slice_ids() == []
    env.evaluate(EVALUATION_MS)  # the demand now goes to the next group

    (slice_id,) = env.live_slice_ids()
    assert env.slice_row(slice_id)["scale_group"] == "fallback"
    assert env.group_status("preferred").state == "quota-blocked"


# ---------------------------------------------------------------- failures and backoff


def test_autoscaler_bootstrap_failure_cleans_up_and_backs_off(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", num_vms=2))
    env.platform.fail_next_bootstrap("bootstrap failed: docker pull iris-worker:latest: not found")
    env.submit("train")

    env.evaluate()
    (slice_id,) = env.live_slice_ids()
    env.evaluate(CREATE_MS)
    assert env.slice_row(slice_id)["state"] == "BOOTSTRAPPING"
    env.evaluate(BOOTSTRAP_MS)

    row = env.slice_row(slice_id)
    assert row["state"] == "DELETED"
    assert row["error"] == "bootstrap failed: docker pull iris-worker:latest: not found"
    assert [(h.from_state, h.to_state) for h in env.store.slice_history(slice_id)] == [
        ("", "CREATING"),
        ("CREATING", "BOOTSTRAPPING"),
        ("BOOTSTRAPPING", "FAILED"),
        ("FAILED", "DELETING"),
        ("DELETING", "DELETED"),
    ]
    assert env.platform.live_resources() == []
    assert env.live_slice_ids() == []

    status = env.group_status("cpu")
    assert status.state == "backoff"
    assert status.consecutive_failures == 1
    assert "docker pull iris-worker:latest: not found" in status.detail
    assert status.backoff_until.epoch_ms == clock() + EVALUATION_MS
    assert "backing off" in status.unmet_reason and "not found" in status.unmet_reason
    failed = env.actions("failed")
    assert [(a.slice_id, a.reason) for a in failed] == [
        (slice_id, "bootstrap failed: docker pull iris-worker:latest: not found")
    ]

    # No new request while backing off; one once the backoff has passed.
    env.evaluate(EVALUATION_MS - 1)
    assert len(env.platform.create_requests) == 1
    env.evaluate(1)
    assert len(env.platform.create_requests) == 2


def test_autoscaler_repeated_bootstrap_failures_back_off_exponentially(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu"))
    env.platform.fail_next_bootstrap("bootstrap failed", count=3)
    env.submit("train")

    backoffs = []
    for _ in range(3):
        env.evaluate()
        env.evaluate(UP_MS)
        status = env.group_status("cpu")
        backoffs.append(status.backoff_until.epoch_ms - clock())
        clock.advance(backoffs[-1])

    assert backoffs == [EVALUATION_MS, 2 * EVALUATION_MS, 4 * EVALUATION_MS]
    assert env.platform.live_resources() == []


def test_autoscaler_create_failure_backs_off_without_recording_a_slice(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu"))
    env.platform.fail_next_create("INVALID_ARGUMENT: machine type n2-weird not found")
    env.submit("train")

    env.evaluate()

    assert env.store.slices(include_deleted=True) == []
    status = env.group_status("cpu")
    assert status.state == "backoff"
    assert status.detail == "INVALID_ARGUMENT: machine type n2-weird not found"
    (failed,) = env.actions("failed")
    assert failed.zone == "zone-a"
    # A refused request is not retried in the next zone: the group backs off as a whole.
    assert env.platform.refused_requests == [("zone-a", "INVALID_ARGUMENT: machine type n2-weird not found")]

    env.evaluate(EVALUATION_MS)
    assert len(env.platform.create_requests) == 1


def test_autoscaler_ready_slice_whose_workers_never_register_fails_after_startup_grace(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", num_vms=2))
    env.submit("train")
    env.evaluate()
    (slice_id,) = env.live_slice_ids()
    env.evaluate(UP_MS)
    env.register_workers(slice_id)
    # Only one of the two workers ever registers... and then the other one is failed in the store.
    env.store.fail_workers([f"{slice_id}-1"], "gone", clock())

    env.evaluate(STARTUP_GRACE_MS - 1)
    assert env.slice_row(slice_id)["state"] == "READY"
    env.evaluate(1)

    row = env.slice_row(slice_id)
    assert row["state"] == "DELETED"
    assert f"worker(s) {slice_id}-1 did not register within the startup grace period (600s)" in row["error"]
    assert env.platform.live_resources() == []
    assert env.group_status("cpu").state == "backoff"


def test_autoscaler_unavailable_platform_leaves_slices_as_they_were(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", min_slices=1))
    env.evaluate()
    (slice_id,) = env.live_slice_ids()

    env.platform.unavailable = True
    env.evaluate(UP_MS)

    assert env.slice_states() == {slice_id: "CREATING"}
    assert env.actions("failed") == []
    env.platform.unavailable = False
    env.evaluate()
    assert env.slice_states() == {slice_id: "READY"}


def test_autoscaler_scale_down_during_an_outage_finishes_once_the_platform_is_back(tmp_path, clock):
    """terminate() failing (cloud API down) must not leave the slice stuck in DELETING with every
    later evaluation failing: once the platform answers again the slice is deleted and the
    autoscaler keeps working."""
    env = make_env(tmp_path, clock, scale_group("cpu"))
    slice_id = env.autoscaler.create_slice("cpu")
    env.bring_up(slice_id)
    env.evaluate()  # idle from now

    env.platform.unavailable = True
    try:
        env.evaluate(SCALE_DOWN_MS)  # decides to scale down; terminate() fails
    except PlatformError:
        pass  # the loop logs and carries on; what matters is what happens next
    env.platform.unavailable = False

    env.evaluate(EVALUATION_MS)
    env.evaluate(EVALUATION_MS)

    assert env.slice_row(slice_id)["state"] == "DELETED"
    assert env.platform.live_resources() == []


def test_autoscaler_restart_finishes_a_termination_cut_short_by_a_crash(tmp_path, clock):
    """The controller died after recording DELETING but before the cloud deleted the slice: the
    restarted controller must finish the job, not fail every evaluation on DELETING -> READY."""
    env = make_env(tmp_path, clock, scale_group("cpu"))
    slice_id = env.autoscaler.create_slice("cpu")
    env.bring_up(slice_id)
    env.store.update_slice(slice_id, "DELETING", "scaled down", clock())  # ...and then the crash

    env.autoscaler = env.new_autoscaler()
    env.autoscaler.adopt_existing()
    env.evaluate(EVALUATION_MS)
    env.evaluate(EVALUATION_MS)

    assert env.slice_row(slice_id)["state"] == "DELETED"
    assert env.platform.live_resources() == []


# ---------------------------------------------------------------- gangs never thrash


def test_autoscaler_pending_gang_causes_one_scale_up_and_no_scale_down(tmp_path, clock):
    """A gang of 4 needs one slice of 4 workers: the small preferred group is never asked, the big
    group gets exactly one slice, and nothing is removed while the gang waits or runs, however many
    scale_down_delays pass."""
    env = make_env(
        tmp_path,
        clock,
        scale_group("small", num_vms=2, priority=0),
        scale_group("big", num_vms=4, priority=10),
    )
    job_id = env.submit("gang", replicas=4, group_by="tpu-name")

    for _ in range(40):  # 20 minutes: four times scale_down_delay
        env.evaluate(30 * SECOND)
        env.register_ready_slices()
        env.schedule()

    scale_ups = env.actions("scale_up")
    assert [(a.scale_group, a.action) for a in scale_ups] == [("big", "scale_up")]
    assert env.actions("scale_down") == []
    (slice_id,) = env.live_slice_ids()
    tasks = env.store.list_tasks(job_id)
    assert {t.worker_id for t in tasks} == {f"{slice_id}-{i}" for i in range(4)}
    assert all(t.state == pb.TASK_STATE_ASSIGNED for t in tasks)

    # The gang ends; only then does its idle slice go, once, after scale_down_delay.
    env.store.terminate_job(job_id, "done", clock())
    for _ in range(20):
        env.evaluate(30 * SECOND)
        env.schedule()
    assert [a.slice_id for a in env.actions("scale_down")] == [slice_id]
    assert len(env.actions("scale_up")) == 1
    assert env.platform.live_resources() == []


def test_autoscaler_gang_waiting_on_a_full_group_keeps_its_idle_slice(tmp_path, clock):
    """An idle slice past scale_down_delay is kept when a gang needing the group arrives, instead of
    being removed and bought again for the gang."""
    env = make_env(tmp_path, clock, scale_group("big", num_vms=4, max_slices=1))
    first = env.submit("first", replicas=4, group_by="tpu-name")
    env.evaluate()
    (slice_id,) = env.live_slice_ids()
    env.bring_up(slice_id)
    env.schedule()
    env.store.terminate_job(first, "done", clock())
    env.evaluate()  # idle from now

    clock.advance(SCALE_DOWN_MS)
    env.submit("second", replicas=4, group_by="tpu-name")
    for _ in range(10):
        env.evaluate(30 * SECOND)

    assert env.actions("scale_down") == []
    assert len(env.actions("scale_up")) == 1
    assert env.slice_states() == {slice_id: "READY"}
    assert env.group_status("big").unmet_reason == "big is at max_slices (1)"
    assert len(env.schedule()) == 4


# ---------------------------------------------------------------- restart and adoption


def test_autoscaler_restart_adopts_existing_slices_and_ends_orphans(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", min_slices=1, max_slices=3))
    env.evaluate()
    (known,) = env.live_slice_ids()
    env.bring_up(known)

    # While the controller is down: a slice of ours appears (an earlier controller's), one of a
    # scale group this config no longer has, and an unmanaged one that is none of Iris's business.
    existing = env.platform.add_existing_slice("cpu", "zone-b")
    orphan = env.platform.add_existing_slice("retired", "zone-a")
    foreign = env.platform.add_existing_slice("cpu", "zone-a", managed=False)

    env.autoscaler = env.new_autoscaler()
    env.autoscaler.adopt_existing()

    assert env.slice_states() == {known: "READY", existing.slice_id: "CREATING"}
    adopt = env.actions("adopt")
    assert [(a.slice_id, a.scale_group, a.zone) for a in adopt] == [(existing.slice_id, "cpu", "zone-b")]
    (terminated,) = env.actions("terminate_orphan")
    assert (terminated.slice_id, terminated.scale_group) == (orphan.slice_id, "retired")
    assert "no scale group named 'retired'" in terminated.reason
    assert env.platform.live_slice_ids() == sorted([known, existing.slice_id, foreign.slice_id])

    # The adopted slice is observed like any other, and counts against min/max: nothing new bought.
    env.evaluate()
    assert env.slice_states() == {known: "READY", existing.slice_id: "READY"}
    assert len(env.platform.create_requests) == 1
    # And the restarted autoscaler can end the slices it inherited.
    env.autoscaler.terminate_slice(known)
    assert known not in env.platform.live_slice_ids()


def test_autoscaler_restart_marks_slices_that_vanished_as_deleted_and_fails_their_workers(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", num_vms=2))
    env.submit("train")
    env.evaluate()
    (slice_id,) = env.live_slice_ids()
    env.bring_up(slice_id)

    env.platform.kill_slice(slice_id, vanish=True)
    env.autoscaler = env.new_autoscaler()
    env.autoscaler.adopt_existing()

    row = env.slice_row(slice_id)
    assert row["state"] == "DELETED"
    assert row["error"] == "the slice no longer exists on the platform"
    assert env.worker_state(f"{slice_id}-0") == pb.WORKER_STATE_FAILED
    assert env.worker_state(f"{slice_id}-1") == pb.WORKER_STATE_FAILED


def test_autoscaler_restart_orphan_known_to_the_store_is_recorded_deleted(tmp_path, clock):
    """A slice the store knows, of a group removed from the config, is terminated at restart; its
    record must end DELETED too, not stay READY with nothing tracking it."""
    env = make_env(tmp_path, clock, scale_group("cpu"), scale_group("retired", min_slices=1))
    env.evaluate()
    (slice_id,) = env.live_slice_ids()
    env.bring_up(slice_id)

    env.autoscaler = env.new_autoscaler(cluster_config(scale_group("cpu")))
    env.autoscaler.adopt_existing()

    assert env.platform.live_resources() == []
    assert [a.slice_id for a in env.actions("terminate_orphan")] == [slice_id]
    assert env.slice_row(slice_id)["state"] == "DELETED"
    assert env.worker_state(f"{slice_id}-0") == pb.WORKER_STATE_FAILED


class _Ticks:
    """Stands in for the autoscaler loop's wake event: each wait is one interval passing; after
    `rounds` waits the loop is told to stop, so `_run()` can be driven on the test's thread."""

    def __init__(self, autoscaler: Autoscaler, clock: FakeClock, rounds: int):
        self.autoscaler, self.clock, self.rounds = autoscaler, clock, rounds

    def wait(self, timeout: float | None = None) -> bool:
        self.clock.advance(EVALUATION_MS)
        self.rounds -= 1
        if self.rounds <= 0:
            self.autoscaler._stop.set()
        return False

    def set(self) -> None:
        pass

    def clear(self) -> None:
        pass


def test_autoscaler_loop_retries_adoption_that_failed_at_start(tmp_path, clock):
    """If listing slices fails when the controller starts, the loop must adopt them later (it says
    it will retry): otherwise the slices it already knows are never observed, and terminating one
    only edits the record while the cloud keeps it running."""
    env = make_env(tmp_path, clock, scale_group("cpu"))
    slice_id = env.autoscaler.create_slice("cpu")
    env.bring_up(slice_id)

    env.autoscaler = env.new_autoscaler()
    env.platform.fail_next_list()
    env.autoscaler._wake = _Ticks(env.autoscaler, clock, rounds=3)
    env.autoscaler._run()

    env.autoscaler.terminate_slice(slice_id)
    assert env.slice_row(slice_id)["state"] == "DELETED"
    assert env.platform.live_resources() == []


# ---------------------------------------------------------------- a slice dies: tasks fail over


@pytest.mark.parametrize("vanish", [False, True], ids=["reports-failed", "vanishes"])
def test_autoscaler_dead_slice_fails_its_workers_and_tasks_fail_over(tmp_path, clock, vanish):
    env = make_env(tmp_path, clock, scale_group("cpu", num_vms=2, min_slices=2, max_slices=3))
    env.evaluate()
    doomed, survivor = env.live_slice_ids()
    clock.advance(UP_MS)
    env.evaluate()
    env.register_workers(doomed)
    job_id = env.submit("train", replicas=2, cpu=8000)
    assert sorted(w for _, w in env.schedule()) == [f"{doomed}-0", f"{doomed}-1"]
    env.register_workers(survivor)
    env.effects.clear()

    env.platform.kill_slice(doomed, "the TPU was preempted", vanish=vanish)
    env.evaluate()

    row = env.slice_row(doomed)
    assert row["state"] == "DELETED"
    expected_reason = "the slice no longer exists on the platform" if vanish else "the TPU was preempted"
    assert row["error"] == expected_reason
    assert env.worker_state(f"{doomed}-0") == pb.WORKER_STATE_FAILED
    assert env.worker_state(f"{doomed}-1") == pb.WORKER_STATE_FAILED
    tasks = env.store.list_tasks(job_id)
    assert [t.state for t in tasks] == [pb.TASK_STATE_PENDING, pb.TASK_STATE_PENDING]
    assert all(t.preemption_count == 0 for t in tasks)  # never delivered: no budget spent
    assert any(e.wake_scheduler for e in env.effects)
    assert doomed not in env.platform.live_resources()

    # The tasks fail over to the other slice.
    assert sorted(w for _, w in env.schedule()) == [f"{survivor}-0", f"{survivor}-1"]
    # And the group replaces the lost capacity (min_slices 2).
    env.evaluate(EVALUATION_MS)
    assert len(env.live_slice_ids()) == 2


# ---------------------------------------------------------------- operator actions


def test_autoscaler_operator_create_slice_records_it_and_respects_max(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", max_slices=1))

    slice_id = env.autoscaler.create_slice("cpu")

    assert env.slice_states() == {slice_id: "CREATING"}
    assert env.platform.live_slice_ids() == [slice_id]
    (action,) = env.actions("scale_up")
    assert (action.slice_id, action.reason) == (slice_id, "requested by an operator")
    with pytest.raises(ValueError, match=r"scale group cpu is at max_slices \(1\)"):
        env.autoscaler.create_slice("cpu")
    with pytest.raises(ValueError, match=r"no scale group named 'gpu' \(configured: cpu\)"):
        env.autoscaler.create_slice("gpu")


def test_autoscaler_operator_create_slice_without_quota_anywhere_raises_with_reason(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", zones=("zone-a",)))
    env.platform.exhaust_quota("zone-a")

    with pytest.raises(PlatformError, match="could not create a slice for cpu: no zone had quota"):
        env.autoscaler.create_slice("cpu")
    assert env.live_slice_ids() == []


def test_autoscaler_operator_terminate_slice_deletes_it_everywhere(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", num_vms=2))
    slice_id = env.autoscaler.create_slice("cpu")
    env.bring_up(slice_id)

    env.autoscaler.terminate_slice(slice_id)

    assert env.slice_row(slice_id)["state"] == "DELETED"
    assert env.platform.live_resources() == []
    assert env.worker_state(f"{slice_id}-0") == pb.WORKER_STATE_TERMINATED
    with pytest.raises(ResourceNotFoundError, match="not found"):
        env.autoscaler.terminate_slice("no-such-slice")


def test_autoscaler_operator_terminate_all_leaves_nothing(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", max_slices=3), scale_group("gpu", max_slices=2))
    created = [env.autoscaler.create_slice(group) for group in ("cpu", "cpu", "gpu")]
    env.bring_up(created[0])

    ended = env.autoscaler.terminate_all()

    assert sorted(ended) == sorted(created)
    assert env.live_slice_ids() == []
    assert env.platform.live_resources() == []
    assert env.autoscaler.terminate_all() == []


# ---------------------------------------------------------------- status


def test_autoscaler_status_reports_each_groups_state_slices_and_reasons(tmp_path, clock):
    env = make_env(
        tmp_path,
        clock,
        scale_group("avail", zones=("zone-a",), priority=0),
        scale_group("full", zones=("zone-a",), max_slices=1, priority=1),
        scale_group("broken", zones=("zone-b",), priority=2),
        scale_group("noquota", zones=("zone-c",), priority=3),
    )
    full_slice = env.autoscaler.create_slice("full")
    env.evaluate(CREATE_MS)
    env.platform.fail_next_create("the cloud refused")
    with pytest.raises(PlatformError):
        env.autoscaler.create_slice("broken")
    env.platform.exhaust_quota("zone-c", "no quota in zone-c")
    with pytest.raises(PlatformError):
        env.autoscaler.create_slice("noquota")
    env.evaluate()

    status = env.autoscaler.status()

    assert status.enabled
    groups = {g.name: g for g in status.groups}
    assert {name: g.state for name, g in groups.items()} == {
        "avail": "available",
        "full": "at-max",
        "broken": "backoff",
        "noquota": "quota-blocked",
    }
    assert [(s.slice_id, s.state, s.zone) for s in groups["full"].slices] == [
        (full_slice, "BOOTSTRAPPING", "zone-a")
    ]
    assert groups["full"].slices[0].created_at.epoch_ms == clock() - CREATE_MS
    assert (groups["full"].min_slices, groups["full"].max_slices, groups["full"].priority) == (0, 1, 1)
    assert groups["broken"].detail == "the cloud refused"
    assert groups["broken"].consecutive_failures == 1
    assert groups["broken"].HasField("backoff_until")
    assert list(groups["noquota"].blocked_zones) == ["zone-c: no quota in zone-c"]
    # Newest first.
    assert [a.action for a in status.recent_actions] == ["quota", "failed", "scale_up"]
    times = [a.at.epoch_ms for a in status.recent_actions]
    assert times == sorted(times, reverse=True)


def test_autoscaler_status_shows_cooldown_while_demand_waits_out_scale_up_delay(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu"), scale_up_delay_ms=60 * SECOND)
    assert env.group_status("cpu").state == "available"
    env.submit("train")

    env.evaluate()
    assert env.group_status("cpu").state == "cooldown"
    env.evaluate(60 * SECOND - 1)
    assert env.group_status("cpu").state == "cooldown"

    env.evaluate(1)
    assert env.group_status("cpu").state == "available"


def test_autoscaler_status_reports_unmet_and_unroutable_demand(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", max_slices=1, num_vms=2))
    env.autoscaler.create_slice("cpu")
    env.submit("waits")
    env.submit("gang", replicas=3, group_by="tpu-name")

    env.evaluate()

    status = env.autoscaler.status()
    (group,) = status.groups
    assert group.demand == 1
    assert group.unmet_reason == "cpu is at max_slices (1)"
    assert list(status.unroutable) == [
        "/gang: no scale group can run it (cpu: a gang of 3 needs a slice of 3 workers; its slices have 2)"
    ]


def test_autoscaler_status_marks_idle_slices(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", min_slices=1))
    env.evaluate()
    (slice_id,) = env.live_slice_ids()
    env.bring_up(slice_id)
    env.evaluate()

    (info,) = env.group_status("cpu").slices
    assert (info.slice_id, info.state, info.idle) == (slice_id, "READY", True)
    assert list(info.worker_ids) == [f"{slice_id}-0"]


def test_autoscaler_idle_slice_is_scaled_down_after_delay_but_not_below_min(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", min_slices=1, max_slices=3))
    env.evaluate()
    (first,) = env.live_slice_ids()
    env.bring_up(first)
    jobs = [env.submit(name, cpu=8000) for name in ("a", "b", "c")]
    assert len(env.schedule()) == 1
    env.evaluate()  # two tasks left, a slice each
    slice_ids = env.live_slice_ids()
    assert len(slice_ids) == 3
    clock.advance(UP_MS)
    env.evaluate()
    env.register_ready_slices()
    assert len(env.schedule()) == 2
    env.evaluate(SCALE_DOWN_MS * 2)
    assert env.actions("scale_down") == []  # busy slices stay, however long

    for job_id in jobs:
        env.store.terminate_job(job_id, "done", clock())
    env.evaluate()  # every slice idle from now
    env.evaluate(SCALE_DOWN_MS - 1)
    assert env.actions("scale_down") == []
    env.evaluate(1)

    downs = env.actions("scale_down")
    assert len(downs) == 2
    assert all(a.reason == "idle for 300s (scale_down_delay)" for a in downs)
    assert len(env.live_slice_ids()) == 1
    assert len(env.platform.live_slice_ids()) == 1
    env.evaluate(SCALE_DOWN_MS * 3)
    assert len(env.live_slice_ids()) == 1
    assert len(env.platform.create_requests) == 3


def test_autoscaler_workers_registered_under_their_own_ids_count_in_their_slice(tmp_path, clock):
    """Remote workers keep their default ids (host:port) and register with the slice id their
    platform gave them: the slice counts as registered, outlives the startup grace, and is
    scaled down once idle."""
    env = make_env(tmp_path, clock, scale_group("cpu", num_vms=2))
    slice_id = env.autoscaler.create_slice("cpu")
    env.evaluate(UP_MS)
    env.register_workers(slice_id, own_ids=True)

    env.evaluate(STARTUP_GRACE_MS)

    assert env.slice_row(slice_id)["state"] == "READY"
    assert env.group_status("cpu").state == "available"
    (info,) = env.group_status("cpu").slices
    assert info.idle
    env.evaluate(SCALE_DOWN_MS)
    assert [a.slice_id for a in env.actions("scale_down")] == [slice_id]
    assert env.platform.live_resources() == []


def test_autoscaler_dead_slice_fails_workers_registered_under_their_own_ids(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu"))
    slice_id = env.autoscaler.create_slice("cpu")
    env.evaluate(UP_MS)
    (worker_id,) = env.register_workers(slice_id, own_ids=True)

    env.platform.kill_slice(slice_id)
    env.evaluate()

    assert env.worker_state(worker_id) == pb.WORKER_STATE_FAILED


def test_autoscaler_restart_keeps_a_groups_backoff_and_blocked_zones(tmp_path, clock):
    env = make_env(tmp_path, clock, scale_group("cpu", num_vms=2))
    env.platform.fail_next_bootstrap("bootstrap failed: no image")
    env.platform.exhaust_quota("zone-a")
    env.submit("train")
    env.evaluate()
    env.evaluate(UP_MS)
    before = env.group_status("cpu")
    assert before.state == "backoff" and before.consecutive_failures == 1

    env.autoscaler = env.new_autoscaler()  # the controller restarted on the same store

    after = env.group_status("cpu")
    assert (after.state, after.consecutive_failures, after.detail) == ("backoff", 1, before.detail)
    assert after.backoff_until == before.backoff_until
    assert list(after.blocked_zones) == list(before.blocked_zones)
    assert after.blocked_zones


# ---------------------------------------------------------------- chaos at the platform calls


@pytest.fixture
def platform_chaos():
    # Deterministic: one thread, a fake clock, and each point's own seeded generator.
    chaos.seed(1122)
    for point in PLATFORM_POINTS:
        chaos.enable(point, 0.3)
    yield
    chaos.reset()


PLATFORM_POINTS = (chaos.PLATFORM_CREATE_SLICE, chaos.PLATFORM_DESCRIBE_SLICE, chaos.PLATFORM_TERMINATE_SLICE)


def test_autoscaler_platform_calls_failing_30_percent_still_serve_demand_and_leak_nothing(
    tmp_path, clock, platform_chaos
):
    env = make_env(tmp_path, clock, scale_group("cpu", max_slices=4))
    for round_number in range(3):
        jobs = [env.submit(f"{name}-{round_number}", cpu=8000) for name in ("a", "b", "c")]

        def scheduled() -> set[str]:
            env.register_ready_slices()
            env.schedule()
            return {t.job_id for j in jobs for t in env.store.list_tasks(j) if t.state == pb.TASK_STATE_ASSIGNED}

        for _ in range(200):
            env.evaluate(EVALUATION_MS)
            if scheduled() == set(jobs):
                break
        assert scheduled() == set(jobs), env.autoscaler.status()

        for job_id in jobs:
            env.store.terminate_job(job_id, "done", clock())
        for _ in range(200):
            env.evaluate(EVALUATION_MS)
            if not env.live_slice_ids() and not env.platform.live_slice_ids():
                break
        # Every slice the cloud made was ended, and the store agrees: nothing leaked, nothing forgotten.
        assert env.platform.live_slice_ids() == [] and env.live_slice_ids() == []

    fired = chaos.injections()
    assert all(fired.get(point) for point in PLATFORM_POINTS), fired
