"""ControllerStore driven by the controller's own synchronous core, against a scripted fake worker.

The `Cluster` harness below hands `ControllerCore` a clock that advances one second per reading
and carries each heartbeat the core builds to a `FakeWorker`, and its answer back: the core plans,
keeps the kill sets and applies the answer exactly as in the daemon. No network, no processes, no
sleeps: time is a number the tests advance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from controller_support import (
    ACTIVE,
    ARGV,
    CONTROLLER,
    T0,
    WORKER_TIMEOUT_MS,
    FakeWorker,
    GiB,
    job_request,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iris.cluster.controller.core import ControllerCore
from iris.cluster.controller.scheduler import find_assignments
from iris.cluster.controller.settings import ControllerSettings
from iris.cluster.controller.store import (
    ControllerStore,
    Effects,
    HeartbeatPlan,
    JobExistsError,
    NotFoundError,
)
from iris.cluster.types import (
    TERMINAL_JOB_STATES,
    TERMINAL_TASK_STATES,
    Constraint,
    Priority,
    tpu_device,
)
from iris.rpc import cluster_pb2 as pb

# ---------------------------------------------------------------- controller stand-in


@dataclass
class Round:
    plan: HeartbeatPlan
    request: pb.HeartbeatRequest
    response: pb.HeartbeatResponse
    unknown: list[tuple[str, int]]
    effects: Effects


class Cluster:
    def __init__(self, path: Path):
        self.path = path
        self.now = T0
        self.store = ControllerStore(path)
        self.core = self._new_core()

    def _new_core(self) -> ControllerCore:
        settings = ControllerSettings(CONTROLLER, worker_timeout_s=WORKER_TIMEOUT_MS / 1000)
        return ControllerCore(self.store, settings, clock=self.tick)

    def tick(self, ms: int = 1000) -> int:
        self.now += ms
        return self.now

    def reopen(self) -> None:
        """The controller process died and started again on the same database file."""
        self.store.close()
        self.store = ControllerStore(self.path)
        self.core = self._new_core()

    def apply(self, effects: Effects) -> Effects:
        self.core.apply(effects)
        return effects

    def worker(self, worker_id: str, **kwargs) -> FakeWorker:
        worker = FakeWorker(worker_id, clock=lambda: self.now, **kwargs)
        self.register(worker)
        return worker

    def register(self, worker: FakeWorker) -> Effects:
        effects = self.store.register_worker(worker.worker_id, worker.address, worker.metadata(), self.tick())
        return self.apply(effects)

    def submit(self, name: str, **kwargs) -> str:
        job_id = "/" + name.strip("/")
        self.apply(self.store.create_job(job_id, job_request(job_id, **kwargs), self.tick()))
        return job_id

    def child(self, job_id: str, parent_job_id: str, **kwargs) -> str:
        request = job_request(job_id, parent_job_id=parent_job_id, **kwargs)
        self.apply(self.store.create_job(job_id, request, self.tick()))
        return job_id

    def schedule(self) -> Effects:
        return self.core.run_scheduling_pass()

    def heartbeat(self, worker: FakeWorker) -> Round:
        heartbeat = self.core.begin_round(worker.worker_id)
        assert heartbeat is not None, f"worker {worker.worker_id} is not live"
        response = worker.heartbeat(heartbeat.request)
        outcome = self.core.round_answered(heartbeat, response)
        return Round(heartbeat.plan, heartbeat.request, response, outcome.unknown, outcome.effects)

    def job(self, job_id: str) -> pb.JobStatus:
        return self.store.job_status(job_id, include_tasks=True)

    def task(self, task_id: str) -> pb.TaskStatus:
        return self.store.task_status(task_id)

    def worker_info(self, worker_id: str) -> pb.WorkerInfo:
        return next(w for w in self.store.list_workers() if w.worker_id == worker_id)


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path / "controller.sqlite3")
    yield c
    c.store.close()


def transitions(history) -> list[tuple[str, str]]:
    return [(h.from_state, h.to_state) for h in history]


def log_data(lines) -> list[str]:
    return [line.line.data for line in lines]


def run_one(cluster: Cluster, name: str = "train", **kwargs) -> tuple[FakeWorker, str]:
    """A worker and a one-task job running on it."""
    worker = cluster.worker("w1")
    job_id = cluster.submit(name, **kwargs)
    cluster.schedule()
    cluster.heartbeat(worker)
    assert cluster.task(f"{job_id}/0").state == pb.TASK_STATE_RUNNING
    return worker, job_id


# ---------------------------------------------------------------- submit


def test_store_submit_creates_pending_job_and_tasks_with_pending_reason(cluster):
    effects = cluster.store.create_job("/train", job_request("/train", replicas=3), T0)

    assert effects.wake_scheduler
    job = cluster.job("/train")
    assert job.state == pb.JOB_STATE_PENDING
    assert job.num_tasks == 3
    assert dict(job.task_state_counts) == {"pending": 3}
    assert job.pending_reason == "waiting for the scheduler"
    assert job.submitted_at.epoch_ms == T0
    assert not job.HasField("started_at") and not job.HasField("finished_at")
    assert [t.task_id for t in job.tasks] == ["/train/0", "/train/1", "/train/2"]
    for task in job.tasks:
        assert task.state == pb.TASK_STATE_PENDING
        assert task.pending_reason == "waiting for the scheduler"
        assert len(task.attempts) == 0


def test_store_submit_without_workers_pending_reason_says_none_registered(cluster):
    job_id = cluster.submit("train", replicas=2)
    cluster.schedule()

    job = cluster.job(job_id)
    assert job.state == pb.JOB_STATE_PENDING
    assert job.pending_reason.startswith("no healthy workers are registered")
    assert all(t.pending_reason.startswith("no healthy workers are registered") for t in job.tasks)


def test_store_submit_task_too_large_pending_reason_names_worker(cluster):
    cluster.worker("w1", cpu=2000, memory=4 * GiB)
    job_id = cluster.submit("huge", cpu=1000, memory=64 * GiB)
    cluster.schedule()

    reason = cluster.job(job_id).pending_reason
    assert reason.startswith("no worker is large enough")
    assert "(w1)" in reason and "short of memory" in reason


def test_store_idle_capacities_count_busy_workers_whole_and_leave_out_failed_ones(cluster):
    worker, _ = run_one(cluster)
    cluster.worker("w2", cpu=2000, memory=4 * GiB)
    assert [w.worker_id for w in cluster.store.idle_capacities()] == ["w1", "w2"]
    cluster.store.fail_workers(["w2"], "its slice was deleted", cluster.tick())

    (idle,) = cluster.store.idle_capacities()

    assert idle.worker_id == worker.worker_id
    assert idle.available == idle.total and idle.total.cpu_millicores > 0


def test_store_submit_duplicate_name_raises_job_exists(cluster):
    cluster.submit("train")
    with pytest.raises(JobExistsError, match="/train already exists"):
        cluster.store.create_job("/train", job_request("/train"), cluster.tick())
    assert len(cluster.store.list_tasks("/train")) == 1


def test_store_submit_child_of_unknown_parent_raises_not_found(cluster):
    with pytest.raises(NotFoundError, match="parent job /nope not found"):
        cluster.store.create_job("/nope/child", job_request("/nope/child", parent_job_id="/nope"), T0)
    assert not cluster.store.job_exists("/nope/child")


def test_store_unknown_job_and_task_raise_not_found(cluster):
    with pytest.raises(NotFoundError, match="job /missing not found"):
        cluster.store.job_status("/missing")
    with pytest.raises(NotFoundError, match="task /missing/0 not found"):
        cluster.store.task_status("/missing/0")
    with pytest.raises(NotFoundError):
        cluster.store.list_tasks("/missing")


# ---------------------------------------------------------------- scheduling and dispatch


def test_store_schedule_assigns_tasks_and_plan_carries_run_requests_with_iris_env(cluster):
    worker = cluster.worker("w1")
    request = job_request("/train", replicas=2, env={"WANDB_MODE": "off"})
    cluster.store.create_job("/train", request, cluster.tick())

    effects = cluster.schedule()

    assert effects.heartbeat_workers == {"w1"}
    tasks = cluster.store.list_tasks("/train")
    assert [t.state for t in tasks] == [pb.TASK_STATE_ASSIGNED] * 2
    assert {t.worker_id for t in tasks} == {"w1"}
    assert {t.worker_address for t in tasks} == {worker.address}
    assert all(t.pending_reason == "" and t.current_attempt_id == 0 for t in tasks)
    assert [t.history[-1].reason for t in tasks] == ["assigned to w1"] * 2

    plan = cluster.store.plan_heartbeat("w1", CONTROLLER)
    assert plan.address == worker.address
    runs = {r.task_id: r for r in plan.to_run}
    assert set(runs) == {"/train/0", "/train/1"}
    run = runs["/train/1"]
    assert dict(run.env) == {
        "IRIS_JOB_ID": "/train",
        "IRIS_TASK_ID": "/train/1",
        "IRIS_TASK_INDEX": "1",
        "IRIS_NUM_TASKS": "2",
        "IRIS_ATTEMPT_ID": "0",
        "IRIS_WORKER_ID": "w1",
        "IRIS_CONTROLLER_ADDRESS": CONTROLLER,
    }
    assert (run.job_id, run.attempt_id, run.task_index, run.num_tasks) == ("/train", 0, 1, 2)
    assert list(run.entrypoint.command.argv) == ARGV
    assert run.resources.cpu_millicores == 1000
    assert run.bundle_uri == "file:///bundles/train.zip"
    assert dict(run.environment.env_vars) == {"WANDB_MODE": "off"}
    assert sorted((e.task_id, e.attempt_id, e.log_offset) for e in plan.expected) == [
        ("/train/0", 0, 0),
        ("/train/1", 0, 0),
    ]


def test_store_plan_heartbeat_after_delivery_expects_attempts_without_resending(cluster):
    worker = cluster.worker("w1")
    cluster.submit("train", replicas=2)
    cluster.schedule()
    cluster.heartbeat(worker)

    plan = cluster.store.plan_heartbeat("w1", CONTROLLER)

    assert plan.to_run == []
    assert sorted((e.task_id, e.attempt_id) for e in plan.expected) == [("/train/0", 0), ("/train/1", 0)]
    assert len(worker.received) == 2


def test_store_schedule_full_worker_leaves_task_pending_until_capacity_frees(cluster):
    worker = cluster.worker("w1", cpu=2000)
    cluster.submit("train", replicas=3, cpu=1000)
    cluster.schedule()
    cluster.heartbeat(worker)

    job = cluster.job("/train")
    assert dict(job.task_state_counts) == {"running": 2, "pending": 1}
    assert job.tasks[2].pending_reason.startswith("waiting for capacity")
    assert job.pending_reason.startswith("waiting for capacity")
    info = cluster.worker_info("w1")
    assert info.committed.cpu_millicores == 2000
    assert sorted(info.running_task_ids) == ["/train/0", "/train/1"]

    worker.script("/train/0", state=pb.TASK_STATE_SUCCEEDED)
    cluster.heartbeat(worker)
    cluster.schedule()

    assert cluster.task("/train/2").state == pb.TASK_STATE_ASSIGNED
    assert cluster.worker_info("w1").committed.cpu_millicores == 2000


def test_store_schedule_orders_higher_priority_job_first(cluster):
    cluster.worker("w1", cpu=1000)
    cluster.submit("early", cpu=1000)
    cluster.store.create_job("/urgent", _with_priority(job_request("/urgent", cpu=1000), 5), cluster.tick())
    cluster.schedule()

    assert cluster.task("/urgent/0").state == pb.TASK_STATE_ASSIGNED
    assert cluster.task("/early/0").state == pb.TASK_STATE_PENDING


def _with_priority(request: pb.LaunchJobRequest, priority: int) -> pb.LaunchJobRequest:
    request.priority = priority
    return request


# ---------------------------------------------------------------- success


def test_store_task_running_then_succeeded_job_succeeded_with_times_and_history(cluster):
    worker = cluster.worker("w1")
    cluster.submit("train")
    cluster.schedule()
    start_round = cluster.heartbeat(worker)
    running_at = cluster.now

    job = cluster.job("/train")
    assert job.state == pb.JOB_STATE_RUNNING
    assert job.started_at.epoch_ms == running_at
    assert job.tasks[0].started_at.epoch_ms == worker.attempts[("/train/0", 0)].started_at_ms
    assert start_round.effects.wake_scheduler

    worker.script("/train/0", state=pb.TASK_STATE_SUCCEEDED, exit_code=0)
    cluster.tick(30_000)
    cluster.heartbeat(worker)
    done_at = cluster.now

    job = cluster.job("/train")
    assert job.state == pb.JOB_STATE_SUCCEEDED
    assert (job.error, job.exit_code) == ("", 0)
    assert job.started_at.epoch_ms == running_at
    assert job.finished_at.epoch_ms == done_at
    assert dict(job.task_state_counts) == {"succeeded": 1}
    assert transitions(job.history) == [
        ("JOB_STATE_PENDING", "JOB_STATE_RUNNING"),
        ("JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"),
    ]
    assert all(h.reason for h in job.history)
    assert job.history[-1].reason == "every task finished"
    assert [h.at.epoch_ms for h in job.history] == [running_at, done_at]

    task = job.tasks[0]
    assert transitions(task.history) == [
        ("TASK_STATE_PENDING", "TASK_STATE_ASSIGNED"),
        ("TASK_STATE_ASSIGNED", "TASK_STATE_RUNNING"),
        ("TASK_STATE_RUNNING", "TASK_STATE_SUCCEEDED"),
    ]
    assert task.history[0].reason == "assigned to w1"
    assert task.history[-1].reason == "exited 0"
    assert task.finished_at.epoch_ms == done_at
    assert [(a.attempt_id, a.state, a.worker_id) for a in task.attempts] == [
        (0, pb.TASK_STATE_SUCCEEDED, "w1")
    ]
    assert cluster.store.plan_heartbeat("w1", CONTROLLER).expected == []
    assert cluster.store.count_by_state()[0] == {pb.JOB_STATE_SUCCEEDED: 1}


def test_store_building_then_running_job_passes_through_building(cluster):
    worker = cluster.worker("w1")
    worker.start_state = pb.TASK_STATE_BUILDING
    cluster.submit("train")
    cluster.schedule()
    cluster.heartbeat(worker)
    assert cluster.job("/train").state == pb.JOB_STATE_BUILDING

    worker.script("/train/0", state=pb.TASK_STATE_RUNNING)
    cluster.heartbeat(worker)

    job = cluster.job("/train")
    assert job.state == pb.JOB_STATE_RUNNING
    assert transitions(job.tasks[0].history)[1:] == [
        ("TASK_STATE_ASSIGNED", "TASK_STATE_BUILDING"),
        ("TASK_STATE_BUILDING", "TASK_STATE_RUNNING"),
    ]


def test_store_task_ports_and_result_reported_by_worker_are_visible(cluster):
    worker = cluster.worker("w1")
    worker.start_state = pb.TASK_STATE_BUILDING
    cluster.submit("server")
    cluster.schedule()
    cluster.heartbeat(worker)
    worker.script("/server/0", state=pb.TASK_STATE_RUNNING, ports={"http": 31000, "grpc": 31001})
    cluster.heartbeat(worker)

    assert dict(cluster.task("/server/0").ports) == {"http": 31000, "grpc": 31001}

    worker.script("/server/0", state=pb.TASK_STATE_SUCCEEDED, result=b"pickled-42")
    cluster.heartbeat(worker)

    task = cluster.task("/server/0")
    assert task.result == b"pickled-42"
    assert dict(task.ports) == {"http": 31000, "grpc": 31001}


def test_store_submit_zero_replicas_means_one_task(cluster):
    job_id = cluster.submit("single", replicas=0)

    assert cluster.job(job_id).num_tasks == 1
    assert [t.task_id for t in cluster.store.list_tasks(job_id)] == ["/single/0"]


def test_store_schedule_twice_does_not_assign_a_task_again(cluster):
    cluster.worker("w1")
    cluster.submit("train")
    cluster.schedule()

    effects = cluster.schedule()

    assert effects.heartbeat_workers == set()
    assert len(cluster.task("/train/0").attempts) == 1
    assert len(cluster.store.plan_heartbeat("w1", CONTROLLER).to_run) == 1


def test_store_assignment_of_task_killed_while_scheduling_is_dropped(cluster):
    cluster.worker("w1")
    job_id = cluster.submit("train")
    demands, workers = cluster.store.scheduling_inputs()
    result = find_assignments(demands, workers)
    assert result.assignments == [("/train/0", "w1")]

    cluster.store.terminate_job(job_id, "stop", cluster.tick())
    effects = cluster.store.apply_assignments(result.assignments, result.pending_reasons, cluster.tick())

    assert effects.heartbeat_workers == set()
    task = cluster.task("/train/0")
    assert (task.state, len(task.attempts)) == (pb.TASK_STATE_KILLED, 0)
    assert cluster.store.plan_heartbeat("w1", CONTROLLER).to_run == []


def test_store_scheduling_inputs_of_a_replaced_job_follow_its_new_request(cluster):
    cluster.worker("w1", cpu=500)
    job_id = cluster.submit("train", cpu=1000)
    [demand] = cluster.store.scheduling_inputs()[0]
    assert demand.resources.cpu_millicores == 1000
    cluster.store.terminate_job(job_id, "replaced", cluster.tick())
    cluster.store.delete_job_tree(job_id)

    cluster.submit("train", cpu=100, replicas=3)
    demands, _ = cluster.store.scheduling_inputs()

    assert [(d.task_id, d.resources.cpu_millicores) for d in demands] == [
        ("/train/0", 100),
        ("/train/1", 100),
        ("/train/2", 100),
    ]


def test_store_task_finished_between_heartbeats_job_records_start_time(cluster):
    worker = cluster.worker("w1")
    worker.start_state = pb.TASK_STATE_SUCCEEDED  # done before the controller ever saw it run
    cluster.submit("quick")
    cluster.schedule()
    cluster.heartbeat(worker)

    job = cluster.job("/quick")
    assert job.state == pb.JOB_STATE_SUCCEEDED
    assert job.tasks[0].started_at.epoch_ms == worker.attempts[("/quick/0", 0)].started_at_ms
    assert job.HasField("started_at"), "a job that ran and finished must say when it started"
    assert job.started_at.epoch_ms <= job.finished_at.epoch_ms


# ---------------------------------------------------------------- failures and retries


def test_store_failing_task_retried_once_then_job_failed_with_exit_code_and_error(cluster):
    worker, job_id = run_one(cluster, max_retries_failure=1)

    worker.script("/train/0", state=pb.TASK_STATE_FAILED, exit_code=3, error="exit status 3: bad lr")
    first = cluster.heartbeat(worker)

    assert first.effects.wake_scheduler
    task = cluster.task("/train/0")
    assert task.state == pb.TASK_STATE_PENDING
    assert (task.failure_count, task.preemption_count) == (1, 0)
    assert task.pending_reason == "waiting to be retried"
    assert "attempt 0 failed (exit status 3: bad lr); retrying" == task.history[-1].reason
    job = cluster.job(job_id)
    assert job.state == pb.JOB_STATE_PENDING
    assert job.failure_count == 1

    cluster.schedule()
    plan = cluster.store.plan_heartbeat("w1", CONTROLLER)
    runs = [(r.task_id, r.attempt_id, r.env["IRIS_ATTEMPT_ID"]) for r in plan.to_run]
    assert runs == [("/train/0", 1, "1")]
    cluster.heartbeat(worker)
    assert cluster.job(job_id).state == pb.JOB_STATE_RUNNING

    worker.script("/train/0", 1, state=pb.TASK_STATE_FAILED, exit_code=3, error="exit status 3: bad lr")
    cluster.heartbeat(worker)

    job = cluster.job(job_id)
    assert job.state == pb.JOB_STATE_FAILED
    assert job.exit_code == 3
    assert "/train/0" in job.error and "bad lr" in job.error
    assert job.finished_at.epoch_ms == cluster.now
    assert job.failure_count == 2
    task = job.tasks[0]
    assert task.state == pb.TASK_STATE_FAILED
    assert [(a.attempt_id, a.state, a.exit_code) for a in task.attempts] == [
        (0, pb.TASK_STATE_FAILED, 3),
        (1, pb.TASK_STATE_FAILED, 3),
    ]
    assert transitions(job.history)[-1] == ("JOB_STATE_RUNNING", "JOB_STATE_FAILED")
    assert "bad lr" in job.history[-1].reason


def test_store_failed_task_over_budget_kills_running_siblings(cluster):
    worker = cluster.worker("w1")
    cluster.submit("train", replicas=2)
    cluster.schedule()
    cluster.heartbeat(worker)

    worker.script("/train/0", state=pb.TASK_STATE_FAILED, exit_code=1, error="oom")
    failing = cluster.heartbeat(worker)

    assert failing.effects.kills == [("w1", "/train/1", 0)]
    sibling = cluster.task("/train/1")
    assert sibling.state == pb.TASK_STATE_KILLED
    assert sibling.error.startswith("job ended: task /train/0 failed: oom")
    assert cluster.job("/train").state == pb.JOB_STATE_FAILED

    follow_up = cluster.heartbeat(worker)
    assert [(k.task_id, k.attempt_id) for k in follow_up.request.tasks_to_kill] == [("/train/1", 0)]
    assert worker.attempts[("/train/1", 0)].state == pb.TASK_STATE_KILLED
    assert cluster.task("/train/1").attempts[0].state == pb.TASK_STATE_KILLED


def test_store_tolerated_task_failure_job_succeeds_with_exit_code_zero(cluster):
    worker = cluster.worker("w1")
    cluster.submit("sweep", replicas=2, max_task_failures=1)
    cluster.schedule()
    cluster.heartbeat(worker)

    worker.script("/sweep/0", state=pb.TASK_STATE_FAILED, exit_code=3, error="diverged")
    cluster.heartbeat(worker)
    assert cluster.job("/sweep").state == pb.JOB_STATE_RUNNING
    worker.script("/sweep/1", state=pb.TASK_STATE_SUCCEEDED)
    cluster.heartbeat(worker)

    job = cluster.job("/sweep")
    assert job.state == pb.JOB_STATE_SUCCEEDED
    assert job.exit_code == 0, f"a succeeded job reported exit code {job.exit_code} (error {job.error!r})"


# ---------------------------------------------------------------- worker reconciliation


def test_store_worker_missing_expected_attempt_marks_worker_failed_and_retries_without_failure(cluster):
    worker, job_id = run_one(cluster)

    worker.restart()
    lost = cluster.heartbeat(worker)

    assert lost.effects.wake_scheduler
    task = cluster.task("/train/0")
    assert task.state == pb.TASK_STATE_PENDING
    assert (task.preemption_count, task.failure_count) == (1, 0)
    assert task.attempts[0].state == pb.TASK_STATE_WORKER_FAILED
    assert "no longer has attempt 0" in task.attempts[0].error
    assert "retrying" in task.history[-1].reason
    job = cluster.job(job_id)
    assert job.state == pb.JOB_STATE_PENDING
    assert (job.preemption_count, job.failure_count) == (1, 0)

    cluster.schedule()
    cluster.heartbeat(worker)
    worker.script("/train/0", 1, state=pb.TASK_STATE_SUCCEEDED)
    cluster.heartbeat(worker)

    job = cluster.job(job_id)
    assert job.state == pb.JOB_STATE_SUCCEEDED
    assert [a.state for a in job.tasks[0].attempts] == [pb.TASK_STATE_WORKER_FAILED, pb.TASK_STATE_SUCCEEDED]


def test_store_worker_missing_attempt_without_preemption_budget_fails_job_as_worker_failed(cluster):
    worker, job_id = run_one(cluster, max_retries_preemption=0)

    worker.restart()
    cluster.heartbeat(worker)

    assert cluster.task("/train/0").state == pb.TASK_STATE_WORKER_FAILED
    job = cluster.job(job_id)
    assert job.state == pb.JOB_STATE_WORKER_FAILED
    assert "/train/0" in job.error and "no longer has attempt 0" in job.error


def test_store_unknown_running_attempt_is_returned_to_kill(cluster):
    worker, job_id = run_one(cluster)
    worker.script("/ghost/0", 0, state=pb.TASK_STATE_RUNNING)

    report = cluster.heartbeat(worker)

    assert report.unknown == [("/ghost/0", 0)]
    assert cluster.task("/train/0").state == pb.TASK_STATE_RUNNING
    assert not cluster.store.job_exists("/ghost")

    follow_up = cluster.heartbeat(worker)
    assert [(k.task_id, k.attempt_id) for k in follow_up.request.tasks_to_kill] == [("/ghost/0", 0)]
    assert follow_up.unknown == []
    assert worker.attempts[("/ghost/0", 0)].state == pb.TASK_STATE_KILLED


def test_store_worker_reregistered_after_restart_loses_attempts_and_they_are_retried(cluster):
    worker, job_id = run_one(cluster)

    worker.restart()
    effects = cluster.register(worker)
    assert effects.wake_scheduler and effects.heartbeat_workers == {"w1"}
    cluster.heartbeat(worker)

    task = cluster.task("/train/0")
    assert task.state == pb.TASK_STATE_PENDING
    assert task.preemption_count == 1


# ---------------------------------------------------------------- termination


def test_store_terminate_job_cascades_to_children_and_returns_kills(cluster):
    worker, parent = run_one(cluster, "pipeline")
    cluster.child("/pipeline/eval", parent)
    cluster.child("/pipeline/eval/shard", "/pipeline/eval")

    terminated, effects = cluster.store.terminate_job(parent, "terminated by user", cluster.tick())
    cluster.apply(effects)

    assert terminated == ["/pipeline", "/pipeline/eval", "/pipeline/eval/shard"]
    assert effects.kills == [("w1", "/pipeline/0", 0)]
    assert effects.heartbeat_workers == {"w1"}
    job = cluster.job(parent)
    assert job.state == pb.JOB_STATE_KILLED
    assert job.error == "terminated by user"
    assert job.finished_at.epoch_ms == cluster.now
    assert job.tasks[0].state == pb.TASK_STATE_KILLED
    assert job.tasks[0].attempts[0].state == pb.TASK_STATE_KILLED
    assert transitions(job.history)[-1] == ("JOB_STATE_RUNNING", "JOB_STATE_KILLED")
    for child in ("/pipeline/eval", "/pipeline/eval/shard"):
        status = cluster.job(child)
        assert status.state == pb.JOB_STATE_KILLED
        assert "terminated by user" in status.error and "parent job" in status.error
        assert status.tasks[0].state == pb.TASK_STATE_KILLED
    assert cluster.job("/pipeline/eval").parent_job_id == "/pipeline"

    follow_up = cluster.heartbeat(worker)
    assert [(k.task_id, k.attempt_id) for k in follow_up.request.tasks_to_kill] == [("/pipeline/0", 0)]
    assert cluster.task("/pipeline/0").attempts[0].state == pb.TASK_STATE_KILLED
    assert cluster.store.read_logs(parent, 0, 100)[2] is True


def test_store_terminate_child_leaves_parent_running(cluster):
    worker, parent = run_one(cluster, "pipeline")
    cluster.child("/pipeline/eval", parent)

    terminated, _ = cluster.store.terminate_job("/pipeline/eval", "not needed", cluster.tick())

    assert terminated == ["/pipeline/eval"]
    assert cluster.job(parent).state == pb.JOB_STATE_RUNNING
    assert cluster.job("/pipeline/eval").state == pb.JOB_STATE_KILLED


def test_store_terminate_finished_job_changes_nothing(cluster):
    job_id = cluster.submit("train")
    cluster.store.terminate_job(job_id, "first", cluster.tick())

    terminated, effects = cluster.store.terminate_job(job_id, "second", cluster.tick())

    assert terminated == []
    assert effects.kills == []
    assert cluster.job(job_id).error == "first"


def test_store_terminate_unknown_job_raises_not_found(cluster):
    with pytest.raises(NotFoundError, match="job /nope not found"):
        cluster.store.terminate_job("/nope", "x", T0)


def test_store_child_of_finished_parent_is_rejected(cluster):
    parent = cluster.submit("train")
    cluster.store.terminate_job(parent, "done", cluster.tick())

    with pytest.raises(JobExistsError, match="already finished"):
        cluster.child("/train/child", parent)


def test_store_terminate_before_delivery_withdraws_run_request(cluster):
    cluster.worker("w1")
    job_id = cluster.submit("train")
    cluster.schedule()

    cluster.store.terminate_job(job_id, "changed my mind", cluster.tick())

    plan = cluster.store.plan_heartbeat("w1", CONTROLLER)
    assert plan.to_run == [] and plan.expected == []
    assert cluster.store.read_logs(job_id, 0, 100)[2] is True
    assert cluster.worker_info("w1").committed.cpu_millicores == 0


def test_store_parent_job_finishing_kills_its_live_children(cluster):
    worker, parent = run_one(cluster, "pipeline")
    cluster.child("/pipeline/eval", parent)

    worker.script("/pipeline/0", state=pb.TASK_STATE_SUCCEEDED)
    cluster.heartbeat(worker)

    assert cluster.job(parent).state == pb.JOB_STATE_SUCCEEDED
    child = cluster.job("/pipeline/eval")
    assert child.state == pb.JOB_STATE_KILLED
    assert child.error == "parent job /pipeline finished"


# ---------------------------------------------------------------- worker health


def test_store_worker_heartbeat_failures_unhealthy_then_failed_and_tasks_retried(cluster):
    w1, job_id = run_one(cluster)
    last_ok = cluster.now

    cluster.store.record_heartbeat_failure("w1", "connection refused", last_ok + 5_000, WORKER_TIMEOUT_MS)
    info = cluster.worker_info("w1")
    assert info.state == pb.WORKER_STATE_UNHEALTHY
    assert info.error == "connection refused"
    assert [w.worker_id for w in cluster.store.scheduling_inputs()[1]] == []
    assert cluster.task("/train/0").state == pb.TASK_STATE_RUNNING

    cluster.now = last_ok + 10_000
    cluster.heartbeat(w1)
    assert cluster.worker_info("w1").state == pb.WORKER_STATE_HEALTHY
    assert cluster.worker_info("w1").error == ""
    last_ok = cluster.now

    cluster.store.record_heartbeat_failure("w1", "connection refused", last_ok + 30_000, WORKER_TIMEOUT_MS)
    assert cluster.worker_info("w1").state == pb.WORKER_STATE_UNHEALTHY
    effects = cluster.store.record_heartbeat_failure(
        "w1", "connection refused", last_ok + WORKER_TIMEOUT_MS, WORKER_TIMEOUT_MS
    )
    cluster.now = last_ok + WORKER_TIMEOUT_MS

    assert effects.wake_scheduler
    info = cluster.worker_info("w1")
    assert info.state == pb.WORKER_STATE_FAILED
    assert "no successful heartbeat for 60s" in info.error and "connection refused" in info.error
    assert cluster.store.plan_heartbeat("w1", CONTROLLER) is None
    task = cluster.task("/train/0")
    assert task.state == pb.TASK_STATE_PENDING
    assert (task.preemption_count, task.failure_count) == (1, 0)
    assert task.attempts[0].state == pb.TASK_STATE_WORKER_FAILED
    assert "worker w1 failed" in task.attempts[0].error
    assert cluster.store.count_by_state()[1] == {pb.WORKER_STATE_FAILED: 1}

    w2 = cluster.worker("w2")
    cluster.schedule()
    cluster.heartbeat(w2)
    task = cluster.task("/train/0")
    assert (task.state, task.worker_id, task.current_attempt_id) == (pb.TASK_STATE_RUNNING, "w2", 1)

    # The partition heals: w1 registers again, still running the attempt that was failed over.
    cluster.register(w1)
    stale = cluster.heartbeat(w1)
    assert stale.unknown == [("/train/0", 0)]
    assert cluster.task("/train/0").worker_id == "w2"


def test_store_fail_silent_workers_fails_only_workers_past_timeout(cluster):
    quiet = cluster.worker("quiet")
    chatty = cluster.worker("chatty", cpu=500)
    cluster.submit("train")
    cluster.schedule()
    assert cluster.task("/train/0").worker_id == "quiet"
    cluster.heartbeat(quiet)
    silent_since = cluster.now

    cluster.now = silent_since + WORKER_TIMEOUT_MS - 2_000
    cluster.heartbeat(chatty)  # applied one second later
    early = cluster.store.fail_silent_workers(silent_since + WORKER_TIMEOUT_MS - 1, WORKER_TIMEOUT_MS)
    assert early.wake_scheduler is False
    assert cluster.worker_info("quiet").state == pb.WORKER_STATE_HEALTHY

    effects = cluster.store.fail_silent_workers(silent_since + WORKER_TIMEOUT_MS + 1_000, WORKER_TIMEOUT_MS)

    assert effects.wake_scheduler
    assert cluster.worker_info("quiet").state == pb.WORKER_STATE_FAILED
    assert "no successful heartbeat for 61s" in cluster.worker_info("quiet").error
    assert cluster.worker_info("chatty").state == pb.WORKER_STATE_HEALTHY
    assert cluster.task("/train/0").state == pb.TASK_STATE_PENDING
    assert cluster.store.count_by_state()[1] == {pb.WORKER_STATE_HEALTHY: 1, pb.WORKER_STATE_FAILED: 1}


def test_store_failed_worker_registering_again_is_healthy_and_schedulable(cluster):
    worker = cluster.worker("w1")
    cluster.store.fail_silent_workers(cluster.now + WORKER_TIMEOUT_MS + 1, WORKER_TIMEOUT_MS)
    assert cluster.worker_info("w1").state == pb.WORKER_STATE_FAILED

    cluster.now += WORKER_TIMEOUT_MS + 2
    cluster.register(worker)
    cluster.submit("train")
    cluster.schedule()

    assert cluster.worker_info("w1").state == pb.WORKER_STATE_HEALTHY
    assert cluster.worker_info("w1").error == ""
    assert cluster.task("/train/0").worker_id == "w1"


# ---------------------------------------------------------------- logs


def test_store_logs_arrive_incrementally_and_finish_once_all_lines_received(cluster):
    worker = cluster.worker("w1", max_log_lines=2)
    job_id = cluster.submit("train")
    cluster.schedule()
    cluster.heartbeat(worker)

    worker.log("/train/0", 0, "l1", "l2", "l3")
    cluster.heartbeat(worker)
    assert [e.log_offset for e in cluster.store.plan_heartbeat("w1", CONTROLLER).expected] == [2]
    lines, cursor, finished = cluster.store.read_logs(job_id, 0, 100)
    assert log_data(lines) == ["l1", "l2"]
    assert finished is False

    worker.log("/train/0", 0, "l4", "l5", "l6")
    worker.script("/train/0", state=pb.TASK_STATE_SUCCEEDED)
    cluster.heartbeat(worker)  # l3, l4
    cluster.heartbeat(worker)  # l5, l6 arrive after the task already finished

    assert cluster.job(job_id).state == pb.JOB_STATE_SUCCEEDED
    lines, cursor, finished = cluster.store.read_logs(job_id, 0, 100)
    assert log_data(lines) == ["l1", "l2", "l3", "l4", "l5", "l6"]
    assert finished is True
    assert cluster.store.plan_heartbeat("w1", CONTROLLER).expected == []


def test_store_logs_of_finished_task_not_finished_until_last_line_arrives(cluster):
    worker = cluster.worker("w1", max_log_lines=2)
    job_id = cluster.submit("train")
    cluster.schedule()
    cluster.heartbeat(worker)
    worker.log("/train/0", 0, "a", "b", "c")
    worker.script("/train/0", state=pb.TASK_STATE_SUCCEEDED)

    cluster.heartbeat(worker)

    assert cluster.job(job_id).state == pb.JOB_STATE_SUCCEEDED
    lines, _, finished = cluster.store.read_logs(job_id, 0, 100)
    assert (log_data(lines), finished) == (["a", "b"], False)
    assert [(e.task_id, e.log_offset) for e in cluster.store.plan_heartbeat("w1", CONTROLLER).expected] == [
        ("/train/0", 2)
    ]

    cluster.heartbeat(worker)

    lines, _, finished = cluster.store.read_logs(job_id, 0, 100)
    assert (log_data(lines), finished) == (["a", "b", "c"], True)


def test_store_read_logs_cursor_pages_through_job_and_task_lines(cluster):
    worker = cluster.worker("w1")
    job_id = cluster.submit("train", replicas=2)
    cluster.schedule()
    cluster.heartbeat(worker)
    worker.log("/train/0", 0, "t0-a", "t0-b", "t0-c")
    worker.log("/train/1", 0, "t1-a", "t1-b")
    for task_id in ("/train/0", "/train/1"):
        worker.script(task_id, state=pb.TASK_STATE_SUCCEEDED)
    cluster.heartbeat(worker)
    assert cluster.job(job_id).state == pb.JOB_STATE_SUCCEEDED

    seen, cursor, pages = [], 0, 0
    while True:
        lines, cursor, finished = cluster.store.read_logs(job_id, cursor, 2)
        seen += log_data(lines)
        pages += 1
        assert all(line.cursor <= cursor for line in lines)
        if finished:
            break
        assert pages < 10
    assert sorted(seen) == ["t0-a", "t0-b", "t0-c", "t1-a", "t1-b"]
    assert len(seen) == len(set(seen))
    assert pages == 3  # 2 + 2 + 1, the short page says finished

    lines, next_cursor, finished = cluster.store.read_logs(job_id, cursor, 2)
    assert (lines, next_cursor, finished) == ([], cursor, True)

    task_lines, _, task_finished = cluster.store.read_logs("/train/1", 0, 100)
    assert log_data(task_lines) == ["t1-a", "t1-b"]
    assert {(line.task_id, line.attempt_id) for line in task_lines} == {("/train/1", 0)}
    assert task_finished is True


def test_store_read_logs_of_retried_task_keeps_every_attempt(cluster):
    worker, job_id = run_one(cluster, max_retries_failure=1)
    worker.log("/train/0", 0, "first try")
    worker.script("/train/0", state=pb.TASK_STATE_FAILED, exit_code=1)
    cluster.heartbeat(worker)
    cluster.schedule()
    cluster.heartbeat(worker)
    worker.log("/train/0", 1, "second try")
    cluster.heartbeat(worker)

    lines, _, finished = cluster.store.read_logs("/train/0", 0, 100)

    assert [(line.attempt_id, line.line.data) for line in lines] == [(0, "first try"), (1, "second try")]
    assert finished is False


def _job_with_lines(cluster, *lines: str) -> str:
    worker = cluster.worker("w1")
    job_id = cluster.submit("train")
    cluster.schedule()
    cluster.heartbeat(worker)
    worker.log("/train/0", 0, *lines)
    cluster.heartbeat(worker)
    return job_id


def test_store_read_logs_tail_returns_only_last_lines_and_a_cursor_to_follow_from(cluster):
    job_id = _job_with_lines(cluster, *(f"step {i}" for i in range(10)))

    lines, cursor, _ = cluster.store.read_logs(job_id, 0, 100, tail_lines=3)

    assert log_data(lines) == ["step 7", "step 8", "step 9"]
    assert cursor == lines[-1].cursor
    assert cluster.store.read_logs(job_id, 0, 100, tail_lines=0)[:2] == ([], cursor)
    assert log_data(cluster.store.read_logs(job_id, 0, 100, tail_lines=50)[0]) == [f"step {i}" for i in range(10)]


def test_store_read_logs_tail_larger_than_a_page_starts_at_the_tail_and_pages_on(cluster):
    job_id = _job_with_lines(cluster, *(f"step {i}" for i in range(10)))

    first, cursor, finished = cluster.store.read_logs(job_id, 0, 2, tail_lines=5)
    rest, _, _ = cluster.store.read_logs(job_id, cursor, 100)

    assert log_data(first) == ["step 5", "step 6"] and finished is False
    assert log_data(rest) == ["step 7", "step 8", "step 9"]


def test_store_read_logs_since_skips_older_lines_and_nothing_recent_starts_after_the_end(cluster):
    job_id = _job_with_lines(cluster, *(f"step {i}" for i in range(6)))
    all_lines, end, _ = cluster.store.read_logs(job_id, 0, 100)

    recent, _, _ = cluster.store.read_logs(job_id, 0, 100, since_ms=all_lines[4].line.timestamp_ms)
    none, cursor, _ = cluster.store.read_logs(job_id, 0, 100, since_ms=all_lines[-1].line.timestamp_ms + 1)
    both, _, _ = cluster.store.read_logs(job_id, 0, 100, tail_lines=4, since_ms=all_lines[3].line.timestamp_ms)

    assert log_data(recent) == ["step 4", "step 5"]
    assert (none, cursor) == ([], end)
    assert log_data(both) == ["step 3", "step 4", "step 5"]


def test_store_read_logs_unknown_id_raises_not_found(cluster):
    with pytest.raises(NotFoundError, match="no job or task named /nope"):
        cluster.store.read_logs("/nope", 0, 10)


# ---------------------------------------------------------------- endpoints


def test_store_endpoints_visible_while_job_live_and_hidden_once_finished(cluster):
    worker = cluster.worker("w1")
    job_id = cluster.submit("server")
    other = cluster.submit("other")
    cluster.store.register_endpoint(
        "ep-1", "/server/api", "10.0.0.1:8080", job_id, {"proto": "http"}, cluster.tick()
    )
    cluster.store.register_endpoint("ep-2", "/other/api", "10.0.0.2:8080", other, {}, cluster.tick())

    visible = cluster.store.list_endpoints("/server/")
    assert [(e.endpoint_id, e.name, e.address, e.job_id) for e in visible] == [
        ("ep-1", "/server/api", "10.0.0.1:8080", "/server")
    ]
    assert dict(visible[0].metadata) == {"proto": "http"}
    assert cluster.job(job_id).state == pb.JOB_STATE_PENDING
    assert [e.name for e in cluster.store.list_endpoints("")] == ["/other/api", "/server/api"]

    cluster.schedule()
    cluster.heartbeat(worker)
    assert cluster.job(job_id).state == pb.JOB_STATE_RUNNING
    assert [e.endpoint_id for e in cluster.store.list_endpoints("/server/")] == ["ep-1"]

    worker.script("/server/0", state=pb.TASK_STATE_SUCCEEDED)
    cluster.heartbeat(worker)

    assert cluster.job(job_id).state == pb.JOB_STATE_SUCCEEDED
    assert cluster.store.list_endpoints("/server/") == []
    assert [e.endpoint_id for e in cluster.store.list_endpoints("")] == ["ep-2"]
    with pytest.raises(JobExistsError, match="has finished"):
        cluster.store.register_endpoint("ep-3", "/server/late", "x:1", job_id, {}, cluster.tick())


def test_store_unregister_endpoint_removes_it_and_unknown_raises(cluster):
    job_id = cluster.submit("server")
    cluster.store.register_endpoint("ep-1", "/server/api", "10.0.0.1:8080", job_id, {}, cluster.tick())

    cluster.store.unregister_endpoint("ep-1")

    assert cluster.store.list_endpoints("/server/") == []
    with pytest.raises(NotFoundError, match="endpoint ep-1 not found"):
        cluster.store.unregister_endpoint("ep-1")
    with pytest.raises(NotFoundError, match="job /nope not found"):
        cluster.store.register_endpoint("ep-9", "/nope/api", "x:1", "/nope", {}, cluster.tick())


# ---------------------------------------------------------------- listing


def test_store_list_jobs_filters_by_state_and_prefix_and_paginates(cluster):
    for name in ("alpha-a", "alpha-b", "alpha-c", "beta"):
        cluster.submit(name)
    cluster.store.terminate_job("/alpha-b", "stop", cluster.tick())

    def ids(states=(), prefix="", limit=100, offset=0):
        jobs, total = cluster.store.list_jobs(states, prefix, limit, offset)
        return [j.job_id for j in jobs], total

    assert ids() == (["/beta", "/alpha-c", "/alpha-b", "/alpha-a"], 4)
    assert ids([pb.JOB_STATE_PENDING]) == (["/beta", "/alpha-c", "/alpha-a"], 3)
    assert ids([pb.JOB_STATE_KILLED, pb.JOB_STATE_SUCCEEDED], "/alpha") == (["/alpha-b"], 1)
    assert ids(prefix="/alpha", limit=2) == (["/alpha-c", "/alpha-b"], 3)
    assert ids(prefix="/alpha", limit=2, offset=2) == (["/alpha-a"], 3)
    assert ids(prefix="/alpha", limit=2, offset=4) == ([], 3)
    assert ids(prefix="/gamma") == ([], 0)

    jobs, _ = cluster.store.list_jobs([pb.JOB_STATE_KILLED], "", 10, 0)
    assert jobs[0].error == "stop"
    assert dict(jobs[0].task_state_counts) == {"killed": 1}
    assert len(jobs[0].tasks) == 0


def test_store_list_jobs_prefix_selects_children(cluster):
    parent = cluster.submit("train")
    cluster.child("/train/eval", parent)
    cluster.submit("training-2")

    jobs, total = cluster.store.list_jobs([], "/train/", 10, 0)

    assert ([j.job_id for j in jobs], total) == (["/train/eval"], 1)
    assert jobs[0].parent_job_id == "/train"


def test_store_list_workers_reports_metadata_state_and_running_tasks(cluster):
    worker = cluster.worker("w1", cpu=8000, memory=32 * GiB)
    cluster.submit("train", replicas=2, cpu=3000, memory=2 * GiB)
    cluster.schedule()
    cluster.heartbeat(worker)

    [info] = cluster.store.list_workers()

    assert (info.worker_id, info.address, info.state) == ("w1", worker.address, pb.WORKER_STATE_HEALTHY)
    assert info.metadata.cpu_millicores == 8000 and info.metadata.runtime == "fake"
    assert sorted(info.running_task_ids) == ["/train/0", "/train/1"]
    assert (info.committed.cpu_millicores, info.committed.memory_bytes) == (6000, 4 * GiB)
    assert info.last_heartbeat.epoch_ms == cluster.now


# ---------------------------------------------------------------- crash and restart


def test_store_reopen_keeps_running_attempt_expected_and_does_not_duplicate_it(cluster):
    worker = cluster.worker("w1", cpu=1000)
    job_id = cluster.submit("train", replicas=2, cpu=1000)
    cluster.schedule()
    cluster.heartbeat(worker)
    worker.log("/train/0", 0, "step 1")
    cluster.heartbeat(worker)
    history_before = list(cluster.job(job_id).history)

    cluster.reopen()

    job = cluster.job(job_id)
    assert job.state == pb.JOB_STATE_RUNNING
    assert list(job.history) == history_before
    assert [t.state for t in job.tasks] == [pb.TASK_STATE_RUNNING, pb.TASK_STATE_PENDING]
    assert job.tasks[1].pending_reason.startswith("waiting for capacity")
    plan = cluster.store.plan_heartbeat("w1", CONTROLLER)
    assert plan.to_run == []
    assert [(e.task_id, e.attempt_id, e.log_offset) for e in plan.expected] == [("/train/0", 0, 1)]
    assert log_data(cluster.store.read_logs(job_id, 0, 10)[0]) == ["step 1"]

    report = cluster.heartbeat(worker)  # the worker kept running it through the controller's restart
    cluster.schedule()

    assert report.unknown == []
    task = cluster.task("/train/0")
    assert (task.state, task.current_attempt_id, len(task.attempts)) == (pb.TASK_STATE_RUNNING, 0, 1)
    assert cluster.task("/train/1").state == pb.TASK_STATE_PENDING, "the running attempt still holds the cpu"
    assert len(worker.received) == 1

    worker.script("/train/0", state=pb.TASK_STATE_SUCCEEDED)
    cluster.heartbeat(worker)
    cluster.schedule()
    assert cluster.task("/train/1").state == pb.TASK_STATE_ASSIGNED


def test_store_reopen_after_long_downtime_touching_workers_keeps_them_alive(cluster):
    worker, job_id = run_one(cluster)
    cluster.reopen()
    cluster.now += 10 * WORKER_TIMEOUT_MS  # the controller was down for ten minutes

    cluster.store.touch_live_workers(cluster.now)
    effects = cluster.store.fail_silent_workers(cluster.now, WORKER_TIMEOUT_MS)

    assert effects.wake_scheduler is False
    assert cluster.worker_info("w1").state == pb.WORKER_STATE_HEALTHY
    cluster.heartbeat(worker)
    assert cluster.task("/train/0").state == pb.TASK_STATE_RUNNING
    assert len(cluster.task("/train/0").attempts) == 1


def test_store_reopen_after_terminate_still_kills_attempt_the_worker_runs(cluster):
    worker, job_id = run_one(cluster)
    cluster.apply(cluster.store.terminate_job(job_id, "stop", cluster.tick())[1])

    cluster.reopen()  # the controller died before its next heartbeat carried the kill
    cluster.heartbeat(worker)  # the worker still reports the attempt running
    cluster.heartbeat(worker)

    assert ("/train/0", 0) in worker.kill_requests, "a killed job's attempt keeps running on the worker"
    assert worker.attempts[("/train/0", 0)].state == pb.TASK_STATE_KILLED


def test_store_reopen_undelivered_assignment_is_still_sent(cluster):
    worker = cluster.worker("w1")
    cluster.submit("train")
    cluster.schedule()

    cluster.reopen()
    cluster.reopen()  # migrations are applied once; reopening again is harmless

    plan = cluster.store.plan_heartbeat("w1", CONTROLLER)
    runs = [(r.task_id, r.attempt_id, r.env["IRIS_JOB_ID"]) for r in plan.to_run]
    assert runs == [("/train/0", 0, "/train")]
    assert list(plan.to_run[0].entrypoint.command.argv) == ARGV
    cluster.heartbeat(worker)
    assert cluster.task("/train/0").state == pb.TASK_STATE_RUNNING


# ---------------------------------------------------------------- illegal transitions


def test_store_worker_reporting_running_attempt_back_in_setup_is_ignored_and_logged(cluster, caplog):
    worker, job_id = run_one(cluster)
    worker.script("/train/0", state=pb.TASK_STATE_BUILDING)

    cluster.heartbeat(worker)

    assert "illegal attempt transition for /train/0#0: TASK_STATE_RUNNING -> TASK_STATE_BUILDING" in caplog.text
    assert "story: TASK_STATE_ASSIGNED->TASK_STATE_RUNNING (worker report)" in caplog.text
    # The bad report changed nothing, and the worker itself stays healthy.
    task = cluster.task("/train/0")
    assert task.state == pb.TASK_STATE_RUNNING
    assert task.attempts[0].state == pb.TASK_STATE_RUNNING
    assert cluster.job(job_id).state == pb.JOB_STATE_RUNNING
    assert [w.state for w in cluster.store.list_workers()] == [pb.WORKER_STATE_HEALTHY]


# ---------------------------------------------------------------- random operation sequences

_FORWARD = {
    pb.TASK_STATE_BUILDING: [pb.TASK_STATE_RUNNING, pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED],
    pb.TASK_STATE_RUNNING: [pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED],
}

# Each operation is (kind, n1, n2, n3); kinds are weighted so that tasks actually run and finish.
_OPERATION_KINDS = ["submit"] * 2 + ["cycle"] * 5 + ["advance"] * 5 + [
    "restart",
    "lose",
    "register",
    "terminate",
    "reopen",
]
_operations = st.lists(
    st.tuples(st.sampled_from(_OPERATION_KINDS), st.integers(0, 8), st.integers(0, 8), st.integers(0, 8)),
    max_size=50,
)


def _check_invariants(cluster: Cluster, job_ids: list[str], workers: list[FakeWorker]) -> None:
    capacity = {w.worker_id: w.cpu for w in workers}
    for info in cluster.store.list_workers():
        if info.state == pb.WORKER_STATE_HEALTHY:
            assert info.committed.cpu_millicores <= capacity[info.worker_id], info
        else:
            assert list(info.running_task_ids) == [], info
    for job_id in job_ids:
        job = cluster.job(job_id)
        task_states = [t.state for t in job.tasks]
        if job.state in TERMINAL_JOB_STATES:
            assert all(s in TERMINAL_TASK_STATES for s in task_states), job
            assert job.HasField("finished_at")
        else:
            assert not all(s in TERMINAL_TASK_STATES for s in task_states), job
        for task in job.tasks:
            live = [a for a in task.attempts if a.state in ACTIVE]
            assert len(live) <= 1, task
            if task.state in ACTIVE:
                assert [a.attempt_id for a in live] == [task.current_attempt_id], task
                assert live[0].worker_id == task.worker_id
            else:
                assert live == [], task
            assert [a.attempt_id for a in task.attempts] == list(range(len(task.attempts)))
            if task.state == pb.TASK_STATE_PENDING:
                assert task.pending_reason, task


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=_operations)
def test_store_property_random_operations_keep_invariants(tmp_path_factory, operations):
    """Whatever order submits, placements, worker reports, worker restarts and losses, and
    controller restarts come in: no worker is over-committed, a task has at most one live attempt,
    and finished jobs have no live tasks."""
    cluster = Cluster(tmp_path_factory.mktemp("random") / "controller.sqlite3")
    try:
        workers = [FakeWorker(f"w{i}", cpu=4000, clock=lambda: cluster.now) for i in range(3)]
        for worker in workers:
            cluster.register(worker)
        job_ids: list[str] = []
        for kind, n1, n2, n3 in operations:
            if kind == "submit":
                job_ids.append(
                    cluster.submit(
                        f"job-{len(job_ids)}",
                        replicas=1 + n1 % 3,
                        cpu=[500, 1000, 3000][n2 % 3],
                        max_retries_failure=n3 % 2,
                        max_retries_preemption=n3 % 3,
                    )
                )
            elif kind == "cycle":
                cluster.schedule()
                for worker in workers:
                    if cluster.store.plan_heartbeat(worker.worker_id, CONTROLLER) is not None:
                        cluster.heartbeat(worker)
            elif kind == "advance":
                live = [a for w in workers for a in w.attempts.values() if a.state in _FORWARD]
                if live:
                    attempt = live[n1 % len(live)]
                    choices = _FORWARD[attempt.state]
                    attempt.state = choices[n2 % len(choices)]
                    attempt.exit_code = 1 if attempt.state == pb.TASK_STATE_FAILED else 0
            elif kind == "restart":
                workers[n1 % 3].restart()
            elif kind == "lose":
                worker_id = workers[n1 % 3].worker_id
                effects = cluster.store.record_heartbeat_failure(worker_id, "unreachable", cluster.tick(), 0)
                cluster.apply(effects)
            elif kind == "register":
                cluster.register(workers[n1 % 3])
            elif kind == "reopen":
                cluster.reopen()
            elif kind == "terminate" and job_ids:
                job_id = job_ids[n1 % len(job_ids)]
                cluster.apply(cluster.store.terminate_job(job_id, "stop", cluster.tick())[1])
            _check_invariants(cluster, job_ids, workers)
    finally:
        cluster.store.close()


# ---------------------------------------------------------------- job model: TPU gangs

V16 = "v5litepod-16"  # 4 hosts of 4 chips


def tpu_slice(cluster: Cluster, name: str, hosts: int = 4, subnet: int = 1) -> list[FakeWorker]:
    """The hosts of one slice, index i having tpu-worker-id i. Worker ids sort in the opposite
    order and hosts register last-first, so only the tpu-worker-id can put them in order."""
    workers = [
        FakeWorker(
            f"{name}-host-{chr(ord('z') - i)}",
            clock=lambda: cluster.now,
            ip_address=f"10.{subnet}.0.{10 + i}",
            attributes={"tpu-name": name, "tpu-worker-id": i, "zone": "us-central1-a"},
            device=tpu_device(V16, 4),
        )
        for i in range(hosts)
    ]
    for worker in reversed(workers):
        cluster.register(worker)
    return workers


def submit_gang(cluster: Cluster, name: str = "llm", replicas: int = 4, **kwargs) -> str:
    """What LaunchJob makes of a v5litepod-16 job: one whole-host task per host, coscheduled."""
    return cluster.submit(name, replicas=replicas, device=tpu_device(V16), group_by="tpu-name", **kwargs)


def run_requests(cluster: Cluster, workers: list[FakeWorker]) -> dict[int, tuple[str, pb.RunTaskRequest]]:
    """task index -> (worker id, run request), for the run requests the next heartbeats would carry."""
    runs = {}
    for worker in workers:
        for run in cluster.store.plan_heartbeat(worker.worker_id, CONTROLLER).to_run:
            assert run.task_index not in runs, f"task {run.task_index} sent to two workers"
            runs[run.task_index] = (worker.worker_id, run)
    return runs


def test_store_tpu_gang_of_four_lands_on_one_slice_with_tpu_env_in_task_order(cluster):
    too_small = tpu_slice(cluster, "slice-0", hosts=2, subnet=1)  # sorts first but cannot hold 4
    slice_1 = tpu_slice(cluster, "slice-1", hosts=4, subnet=2)
    job_id = submit_gang(cluster)

    effects = cluster.schedule()

    assert effects.heartbeat_workers == {w.worker_id for w in slice_1}
    runs = run_requests(cluster, too_small + slice_1)
    assert {i: worker_id for i, (worker_id, _) in runs.items()} == {i: slice_1[i].worker_id for i in range(4)}
    hostnames = "10.2.0.10,10.2.0.11,10.2.0.12,10.2.0.13"
    for index, (_, run) in runs.items():
        assert run.env["TPU_WORKER_ID"] == str(index)
        assert run.env["TPU_WORKER_HOSTNAMES"] == hostnames
        assert run.env["JAX_PLATFORMS"] == "tpu,cpu"
        assert run.env["PJRT_DEVICE"] == "TPU"
        assert run.env["TPU_NAME"] == "slice-1"
        # Four chips per host of a v5litepod-16, laid out 2x2.
        assert run.env["TPU_CHIPS_PER_HOST_BOUNDS"] == "2,2,1"
        assert (run.env["IRIS_TASK_INDEX"], run.env["IRIS_NUM_TASKS"]) == (str(index), "4")
        assert run.resources.device.tpu.variant == V16

    for worker in slice_1:
        cluster.heartbeat(worker)
    job = cluster.job(job_id)
    assert job.state == pb.JOB_STATE_RUNNING
    assert [t.state for t in job.tasks] == [pb.TASK_STATE_RUNNING] * 4
    assert all(w.received == [] for w in too_small)


def test_store_tpu_gang_second_gang_waits_whole_while_first_holds_the_slice(cluster):
    slice_1 = tpu_slice(cluster, "slice-1")
    first = submit_gang(cluster, "first")
    second = submit_gang(cluster, "second")
    cluster.schedule()

    assert dict(cluster.job(first).task_state_counts) == {"assigned": 4}
    job = cluster.job(second)
    assert dict(job.task_state_counts) == {"pending": 4}
    assert job.pending_reason == (
        "waiting for capacity: gang of 4 needs 4 free workers sharing one 'tpu-name'; "
        "at most 0 are free in any group"
    )
    assert all(cluster.worker_info(w.worker_id).committed.cpu_millicores == 1000 for w in slice_1)


def test_store_gang_member_failure_with_budget_kills_siblings_and_gang_is_placed_together_again(cluster):
    slice_1 = tpu_slice(cluster, "slice-1")
    job_id = submit_gang(cluster, max_retries_failure=1)
    cluster.schedule()
    for worker in slice_1:
        cluster.heartbeat(worker)
    assert cluster.job(job_id).state == pb.JOB_STATE_RUNNING

    slice_1[2].script("/llm/2", state=pb.TASK_STATE_FAILED, exit_code=1, error="exit status 1: NaN loss")
    failing = cluster.heartbeat(slice_1[2])

    assert sorted(failing.effects.kills) == sorted((slice_1[i].worker_id, f"/llm/{i}", 0) for i in (0, 1, 3))
    tasks = cluster.store.list_tasks(job_id)
    assert [t.state for t in tasks] == [pb.TASK_STATE_PENDING] * 4
    assert [(t.failure_count, t.preemption_count) for t in tasks] == [(0, 0), (0, 0), (1, 0), (0, 0)]
    for i in (0, 1, 3):
        assert tasks[i].attempts[0].state == pb.TASK_STATE_KILLED
        assert tasks[i].pending_reason == "waiting to be retried with its gang"
        restarted = "gang member /llm/2 is being retried; the gang restarts together"
        assert tasks[i].history[-1].reason == restarted
    assert tasks[2].history[-1].reason == "attempt 0 failed (exit status 1: NaN loss); retrying"

    cluster.schedule()
    rounds = {w.worker_id: cluster.heartbeat(w) for w in slice_1}

    for i in (0, 1, 3):
        request = rounds[slice_1[i].worker_id].request
        assert [(k.task_id, k.attempt_id) for k in request.tasks_to_kill] == [(f"/llm/{i}", 0)]
        assert slice_1[i].attempts[(f"/llm/{i}", 0)].state == pb.TASK_STATE_KILLED
    for i, worker in enumerate(slice_1):
        [run] = rounds[worker.worker_id].request.tasks_to_run
        assert (run.task_id, run.attempt_id) == (f"/llm/{i}", 1)
        assert run.env["TPU_WORKER_ID"] == str(i)
        assert run.env["TPU_WORKER_HOSTNAMES"] == "10.1.0.10,10.1.0.11,10.1.0.12,10.1.0.13"
    job = cluster.job(job_id)
    assert job.state == pb.JOB_STATE_RUNNING
    assert [(t.state, t.current_attempt_id, t.worker_id) for t in job.tasks] == [
        (pb.TASK_STATE_RUNNING, 1, worker.worker_id) for worker in slice_1
    ]
    assert (job.failure_count, job.preemption_count) == (1, 0)


def test_store_gang_member_failing_for_good_stops_its_siblings_even_when_job_tolerates_failures(cluster):
    """A gang is one program: when a member fails past its retries the rest cannot go on alone."""
    slice_1 = tpu_slice(cluster, "slice-1")
    job_id = submit_gang(cluster, max_task_failures=1)
    cluster.schedule()
    for worker in slice_1:
        cluster.heartbeat(worker)

    slice_1[1].script("/llm/1", state=pb.TASK_STATE_FAILED, exit_code=1, error="exit status 1")
    failing = cluster.heartbeat(slice_1[1])

    assert sorted(failing.effects.kills) == sorted((slice_1[i].worker_id, f"/llm/{i}", 0) for i in (0, 2, 3))
    states = [t.state for t in cluster.store.list_tasks(job_id)]
    assert states[1] == pb.TASK_STATE_FAILED
    assert all(s in TERMINAL_TASK_STATES for s in states), states


def test_store_gang_lands_only_on_slice_meeting_its_constraints(cluster):
    tpu_slice(cluster, "slice-1", subnet=1)
    slice_2 = tpu_slice(cluster, "slice-2", subnet=2)
    for worker in slice_2:
        worker.attributes["zone"] = "us-east5-b"
        cluster.register(worker)
    job_id = submit_gang(cluster, constraints=(Constraint.parse("zone=us-east5-b"),))

    cluster.schedule()

    assert {t.worker_id for t in cluster.store.list_tasks(job_id)} == {w.worker_id for w in slice_2}


# ---------------------------------------------------------------- job model: constraints, timeouts, delivery


def test_store_constraints_use_worker_attributes_with_their_types(cluster):
    cluster.worker("old", attributes={"zone": "a", "cpu-gen": 2})
    cluster.worker("new", attributes={"zone": "a", "cpu-gen": 10})
    cluster.worker("far", attributes={"zone": "b", "cpu-gen": 12})
    job_id = cluster.submit(
        "train", replicas=2, constraints=(Constraint.parse("zone=a"), Constraint.parse("cpu-gen>=3"))
    )
    unmet = cluster.submit("gpu", constraints=(Constraint.parse("zone=c"),))

    cluster.schedule()

    assert {t.worker_id for t in cluster.store.list_tasks(job_id)} == {"new"}
    assert cluster.job(unmet).pending_reason == "no worker satisfies constraint zone=c (3 worker(s) checked)"


def test_store_scheduling_timeout_expired_task_and_job_unschedulable_with_pending_reason(cluster):
    for i in range(3):
        cluster.worker(f"w{i}", device=tpu_device("v5litepod-8", 8))
    job_id = cluster.submit("llm", device=tpu_device(V16), scheduling_timeout_ms=60_000)
    patient = cluster.submit("patient", device=tpu_device(V16))
    submitted = cluster.job(job_id).submitted_at.epoch_ms
    cluster.schedule()
    reason = "no worker has tpu v5litepod-16 (workers have: 3 with tpu v5litepod-8 (8 chips))"
    assert cluster.job(job_id).pending_reason == reason

    cluster.store.expire_unschedulable(submitted + 59_999)
    assert cluster.job(job_id).state == pb.JOB_STATE_PENDING

    cluster.apply(cluster.store.expire_unschedulable(submitted + 60_000))

    task = cluster.task(f"{job_id}/0")
    assert task.state == pb.TASK_STATE_UNSCHEDULABLE
    assert task.error == f"not scheduled within 60s (scheduling_timeout): {reason}"
    assert task.pending_reason == ""
    job = cluster.job(job_id)
    assert job.state == pb.JOB_STATE_UNSCHEDULABLE
    assert reason in job.error and "scheduling_timeout" in job.error
    assert job.finished_at.epoch_ms == submitted + 60_000
    assert cluster.job(patient).state == pb.JOB_STATE_PENDING, "a job without a timeout waits forever"


def test_store_scheduling_timeout_counts_from_when_task_last_became_pending(cluster):
    worker, job_id = run_one(cluster, scheduling_timeout_ms=10_000)
    cluster.now += 60_000  # it ran for a minute, far past its scheduling timeout
    worker.restart()
    cluster.heartbeat(worker)
    assert cluster.task("/train/0").state == pb.TASK_STATE_PENDING

    cluster.store.expire_unschedulable(cluster.now + 9_999)

    assert cluster.task("/train/0").state == pb.TASK_STATE_PENDING
    cluster.store.expire_unschedulable(cluster.now + 10_000)
    assert cluster.task("/train/0").state == pb.TASK_STATE_UNSCHEDULABLE


def test_store_worker_failed_before_delivery_task_pending_without_spending_preemption_budget(cluster):
    cluster.worker("w1")
    job_id = cluster.submit("train", max_retries_preemption=0)
    cluster.schedule()
    assert cluster.task("/train/0").state == pb.TASK_STATE_ASSIGNED

    failure = cluster.store.record_heartbeat_failure("w1", "connection refused", cluster.tick(), 0)
    effects = cluster.apply(failure)

    assert effects.wake_scheduler
    task = cluster.task("/train/0")
    assert task.state == pb.TASK_STATE_PENDING
    assert (task.preemption_count, task.failure_count) == (0, 0)
    assert task.attempts[0].state == pb.TASK_STATE_WORKER_FAILED
    assert "connection refused" in task.attempts[0].error
    job = cluster.job(job_id)
    assert (job.state, job.preemption_count) == (pb.JOB_STATE_PENDING, 0)

    replacement = cluster.worker("w2")
    cluster.schedule()
    cluster.heartbeat(replacement)
    task = cluster.task("/train/0")
    assert (task.state, task.worker_id, task.current_attempt_id) == (pb.TASK_STATE_RUNNING, "w2", 1)
    assert task.preemption_count == 0


def test_store_worker_failed_after_delivery_spends_preemption_budget(cluster):
    worker, job_id = run_one(cluster, max_retries_preemption=0)

    cluster.apply(cluster.store.record_heartbeat_failure("w1", "connection refused", cluster.tick(), 0))

    task = cluster.task("/train/0")
    assert (task.state, task.preemption_count) == (pb.TASK_STATE_WORKER_FAILED, 1)
    assert cluster.job(job_id).state == pb.JOB_STATE_WORKER_FAILED


# ---------------------------------------------------------------- job model: failure explanations


def test_store_failed_task_job_error_quotes_last_output_lines(cluster):
    worker, job_id = run_one(cluster)
    worker.log("/train/0", 0, *(f"step {i}" for i in range(1, 8)), "ValueError: loss is NaN")
    worker.script("/train/0", state=pb.TASK_STATE_FAILED, exit_code=1, error="exit status 1")

    cluster.heartbeat(worker)

    job = cluster.job(job_id)
    assert (job.state, job.exit_code) == (pb.JOB_STATE_FAILED, 1)
    tail = "last output: step 4 | step 5 | step 6 | step 7 | ValueError: loss is NaN"
    assert job.error == f"task /train/0 failed: exit status 1; {tail}"
    assert "step 3" not in job.error
    assert job.tasks[0].error == f"exit status 1; {tail}"


def test_store_failed_retried_task_error_quotes_last_attempt_and_counts_attempts(cluster):
    worker, job_id = run_one(cluster, max_retries_failure=1)
    worker.log("/train/0", 0, "first attempt output")
    worker.script("/train/0", state=pb.TASK_STATE_FAILED, exit_code=2, error="exit status 2")
    cluster.heartbeat(worker)
    cluster.schedule()
    cluster.heartbeat(worker)
    worker.log("/train/0", 1, "second attempt output")
    worker.script("/train/0", 1, state=pb.TASK_STATE_FAILED, exit_code=2, error="exit status 2")

    cluster.heartbeat(worker)

    job = cluster.job(job_id)
    assert job.error == (
        "task /train/0 failed: exit status 2 (after 2 attempts); last output: second attempt output"
    )


# ---------------------------------------------------------------- job model: order


def test_store_schedule_priority_bands_run_production_then_interactive_then_batch_fifo(cluster):
    worker = cluster.worker("w1", cpu=1000)
    worker.start_state = pb.TASK_STATE_SUCCEEDED  # each job finishes as soon as it is delivered
    cluster.submit("batch-early", priority=Priority.BATCH)
    cluster.submit("interactive", priority=Priority.INTERACTIVE)
    cluster.submit("batch-late", priority=Priority.BATCH)
    cluster.submit("production", priority=Priority.PRODUCTION)

    order = []
    for _ in range(4):
        cluster.schedule()
        order += [run.job_id for run in cluster.heartbeat(worker).request.tasks_to_run]

    assert order == ["/production", "/interactive", "/batch-early", "/batch-late"]
    assert all(cluster.job(j).state == pb.JOB_STATE_SUCCEEDED for j in order)


def test_store_schedule_child_of_earlier_root_goes_before_later_root_of_equal_priority(cluster):
    cluster.worker("w1", cpu=2000)
    first = cluster.submit("first")
    later = cluster.submit("later")
    child = cluster.child("/first/eval", first)

    cluster.schedule()

    assert cluster.task(f"{first}/0").state == pb.TASK_STATE_ASSIGNED
    assert cluster.task(f"{child}/0").state == pb.TASK_STATE_ASSIGNED
    assert cluster.task(f"{later}/0").state == pb.TASK_STATE_PENDING
    assert cluster.job(later).pending_reason.startswith("waiting for capacity")


def test_store_schedule_child_submitted_while_parent_runs_goes_before_waiting_later_root(cluster):
    worker = cluster.worker("w1", cpu=2000)
    first = cluster.submit("first")
    filler = cluster.submit("filler")
    cluster.schedule()
    cluster.heartbeat(worker)
    later = cluster.submit("later")
    child = cluster.child("/first/eval", first)
    cluster.schedule()
    assert cluster.task(f"{later}/0").state == pb.TASK_STATE_PENDING
    assert cluster.task(f"{child}/0").state == pb.TASK_STATE_PENDING

    worker.script(f"{filler}/0", state=pb.TASK_STATE_SUCCEEDED)
    cluster.heartbeat(worker)
    cluster.schedule()

    assert cluster.task(f"{child}/0").state == pb.TASK_STATE_ASSIGNED
    assert cluster.task(f"{later}/0").state == pb.TASK_STATE_PENDING


# ---------------------------------------------------------------- deleting a job


def test_store_delete_finished_job_then_same_name_continues_attempt_ids(cluster):
    worker, job_id = run_one(cluster)
    worker.log("/train/0", 0, "old output")
    worker.script("/train/0", state=pb.TASK_STATE_SUCCEEDED)
    cluster.heartbeat(worker)
    assert cluster.job(job_id).state == pb.JOB_STATE_SUCCEEDED

    assert cluster.store.delete_job_tree(job_id) == [job_id]
    assert not cluster.store.job_exists(job_id)
    cluster.submit("train")
    cluster.schedule()
    round_ = cluster.heartbeat(worker)

    # The worker still holds attempt 0 of the old job: the new job's first attempt must not reuse its key.
    assert [(r.task_id, r.attempt_id) for r in round_.request.tasks_to_run] == [("/train/0", 1)]
    assert "JOB_STATE_SUCCEEDED" not in [h.to_state for h in cluster.job(job_id).history]
    assert log_data(cluster.store.read_logs(job_id, 0, 100)[0]) == []


def test_store_delete_running_job_refused(cluster):
    _, job_id = run_one(cluster)

    with pytest.raises(JobExistsError, match="kill it before deleting it"):
        cluster.store.delete_job_tree(job_id)
    assert cluster.job(job_id).state == pb.JOB_STATE_RUNNING


def test_store_heartbeats_applied_in_one_batch_match_one_by_one_and_revive_an_unhealthy_worker(cluster):
    busy, job_id = run_one(cluster)
    idle = cluster.worker("w2")
    flaky = cluster.worker("w3")
    cluster.store.record_heartbeat_failure("w3", "connection refused", cluster.tick(), WORKER_TIMEOUT_MS)
    busy.script("/train/0", state=pb.TASK_STATE_SUCCEEDED, exit_code=0)
    rounds = cluster.core.begin_rounds(["w1", "w2", "w3", "nobody"])
    assert rounds["nobody"] is None
    answers = [(rounds[w.worker_id], w.heartbeat(rounds[w.worker_id].request)) for w in (busy, idle, flaky)]

    outcomes = cluster.core.rounds_answered(answers)

    assert [o.unknown for o in outcomes] == [[], [], []]
    assert cluster.job(job_id).state == pb.JOB_STATE_SUCCEEDED
    infos = {w: cluster.worker_info(w) for w in ("w1", "w2", "w3")}
    assert {w: i.state for w, i in infos.items()} == dict.fromkeys(infos, pb.WORKER_STATE_HEALTHY)
    assert {i.last_heartbeat.epoch_ms for i in infos.values()} == {cluster.now}
    assert infos["w3"].error == ""


# ---------------------------------------------------------------- incremental passes


def frozen_clock_core(cluster: Cluster) -> None:
    """A core whose clock stands still, so no pass is full merely because time went by."""
    settings = ControllerSettings(CONTROLLER, worker_timeout_s=WORKER_TIMEOUT_MS / 1000)
    cluster.core = ControllerCore(cluster.store, settings, clock=lambda: T0)


def test_store_schedule_after_submit_tries_new_tasks_and_keeps_order_once_capacity_frees(cluster):
    frozen_clock_core(cluster)
    worker = cluster.worker("w1", cpu=2000)
    cluster.submit("first", replicas=2, cpu=1000)
    cluster.schedule()
    cluster.heartbeat(worker)
    waiting = cluster.submit("waiting", cpu=1000)
    cluster.schedule()
    assert cluster.task(f"{waiting}/0").pending_reason.startswith("waiting for capacity")
    cluster.store._conn.execute("UPDATE tasks SET pending_reason='as written before' WHERE job_id=?", (waiting,))

    later = cluster.submit("later", cpu=1000)
    cluster.schedule()

    assert cluster.task(f"{later}/0").pending_reason.startswith("waiting for capacity")
    assert cluster.task(f"{waiting}/0").pending_reason == "as written before", "an older task was tried again"
    worker.script("/first/0", state=pb.TASK_STATE_SUCCEEDED)
    cluster.heartbeat(worker)
    cluster.schedule()
    assert cluster.task(f"{waiting}/0").state == pb.TASK_STATE_ASSIGNED, "freed capacity goes to the older task"
    assert cluster.task(f"{later}/0").state == pb.TASK_STATE_PENDING


def test_store_schedule_new_worker_places_tasks_tried_before(cluster):
    frozen_clock_core(cluster)
    cluster.worker("w1", cpu=1000)
    cluster.submit("first", cpu=1000)
    waiting = cluster.submit("waiting", cpu=1000)
    cluster.schedule()
    assert cluster.task(f"{waiting}/0").state == pb.TASK_STATE_PENDING

    cluster.worker("w2", cpu=1000)
    cluster.schedule()

    assert cluster.task(f"{waiting}/0").state == pb.TASK_STATE_ASSIGNED


def test_store_schedule_task_back_to_pending_is_placed_again(cluster):
    frozen_clock_core(cluster)
    worker, job_id = run_one(cluster)
    worker.restart()
    cluster.heartbeat(worker)
    assert cluster.task(f"{job_id}/0").state == pb.TASK_STATE_PENDING

    cluster.schedule()

    assert cluster.task(f"{job_id}/0").state == pb.TASK_STATE_ASSIGNED


def test_store_schedule_job_submitted_after_a_deleted_one_is_placed(cluster):
    # The new job's task may get the deleted task's row number, which the last pass already tried.
    frozen_clock_core(cluster)
    cluster.worker("w1", cpu=2000)
    too_large = cluster.submit("too-large", cpu=8000)
    cluster.schedule()
    cluster.core.terminate_job(too_large, "not needed")
    cluster.store.delete_job_tree(too_large)

    fits = cluster.submit("fits", cpu=1000)
    cluster.schedule()

    assert cluster.task(f"{fits}/0").state == pb.TASK_STATE_ASSIGNED


def test_store_schedule_resubmitted_job_of_a_deleted_name_gets_its_pending_reason(cluster):
    worker = cluster.worker("w1", cpu=1000)
    cluster.submit("running", cpu=1000)
    waiting = cluster.submit("waiting", cpu=1000)
    cluster.schedule()
    cluster.heartbeat(worker)
    reason = cluster.task(f"{waiting}/0").pending_reason
    assert reason.startswith("waiting for capacity")
    cluster.core.terminate_job(waiting, "resubmitting")
    cluster.store.delete_job_tree(waiting)

    cluster.submit("waiting", cpu=1000)
    assert cluster.task(f"{waiting}/0").pending_reason == "waiting for the scheduler"
    cluster.schedule()

    assert cluster.task(f"{waiting}/0").pending_reason == reason


def test_store_scheduling_inputs_leave_healthy_workers_what_their_active_attempts_do_not_hold(cluster):
    cluster.worker("w-cpu", cpu=4000)
    cluster.worker("w-tpu", cpu=4000, device=tpu_device("v5litepod-8", 8))
    cluster.submit("small", cpu=1000, replicas=2)
    cluster.submit("chips", cpu=500, device=tpu_device("v5litepod-8", 4))
    cluster.schedule()
    placed = {t.task_id: t.worker_id for job in ("/small", "/chips") for t in cluster.store.list_tasks(job)}
    cluster.submit("waiting", cpu=64_000)
    # Unhealthy, not yet failed: its task still runs there, and it is offered to no new task.
    cluster.store.record_heartbeat_failure("w-cpu", "connection refused", cluster.tick(), WORKER_TIMEOUT_MS)

    demands, workers = cluster.store.scheduling_inputs()

    assert placed == {"/small/0": "w-cpu", "/small/1": "w-tpu", "/chips/0": "w-tpu"}
    assert [d.task_id for d in demands] == ["/waiting/0"]
    assert [(w.worker_id, w.available.cpu_millicores, w.device_free) for w in workers] == [("w-tpu", 2500, 4)]
