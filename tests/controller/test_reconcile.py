"""Reconciliation rules at the pure layer: stimuli and snapshots in, decisions out.

No SQLite, no sockets, no clock: each test builds what the controller expects, feeds one
stimulus (a heartbeat answer, a worker's death, a kill, a scheduling timeout) and matches the
decisions.
"""

from __future__ import annotations

from iris.cluster.controller.reconcile import (
    AttemptChange,
    AttemptRecord,
    Budget,
    PendingTask,
    Report,
    Snapshot,
    TaskChange,
    TaskDetail,
    TaskRecord,
    on_delivery_unconfirmed,
    on_heartbeat,
    on_kill,
    on_scheduling_timeouts,
    on_worker_lost,
)
from iris.rpc import cluster_pb2 as pb

RUNNING = pb.TASK_STATE_RUNNING
PENDING = pb.TASK_STATE_PENDING
ASSIGNED = pb.TASK_STATE_ASSIGNED


def running(task_id: str, attempt_id: int = 0, worker_id: str = "w1", **counts: int) -> TaskRecord:
    return TaskRecord(task_id, task_id.rsplit("/", 1)[0], RUNNING, attempt_id, worker_id, **counts)


def attempt(
    task_id: str, attempt_id: int = 0, worker_id: str = "w1", state: int = RUNNING, delivered: bool = True
):
    return AttemptRecord(task_id, attempt_id, worker_id, state, delivered)


def snapshot(
    tasks: list[TaskRecord], attempts: list[AttemptRecord], budget: Budget, gang: bool = False
) -> Snapshot:
    jobs = {t.job_id for t in tasks}
    gang_tasks = {job: [t.task_id for t in tasks if t.job_id == job] for job in jobs} if gang else {}
    return Snapshot(
        {t.task_id: t for t in tasks}, {a.key: a for a in attempts}, {job: budget for job in jobs}, gang_tasks
    )


def task_changes(decisions) -> list[tuple[str, int, int]]:
    return [(c.task_id, c.old, c.new) for c in decisions.changes if isinstance(c, TaskChange)]


def attempt_changes(decisions) -> list[tuple[str, int, int, int]]:
    return [
        (c.task_id, c.attempt_id, c.old, c.new) for c in decisions.changes if isinstance(c, AttemptChange)
    ]


def only_task_change(decisions) -> TaskChange:
    (change,) = [c for c in decisions.changes if isinstance(c, TaskChange)]
    return change


# ---------------------------------------------------------------- retry budgets


def test_reconcile_failed_attempt_with_failure_budget_left_is_retried_and_charged():
    state = snapshot([running("/j/0")], [attempt("/j/0")], Budget(max_retries_failure=1))
    report = Report("/j/0", 0, pb.TASK_STATE_FAILED, exit_code=3, error="exit 3")

    decisions, rejected = on_heartbeat("w1", [("/j/0", 0)], {report.key: report}, state)

    assert rejected == []
    assert attempt_changes(decisions) == [("/j/0", 0, RUNNING, pb.TASK_STATE_FAILED)]
    change = only_task_change(decisions)
    assert (change.old, change.new, change.failure_count, change.preemption_count) == (RUNNING, PENDING, 1, 0)
    assert change.reason == "attempt 0 failed (exit 3); retrying"
    assert change.pending_reason == "waiting to be retried"
    assert decisions.touched_jobs == {"/j"}


def test_reconcile_failed_attempt_past_failure_budget_fails_task_quoting_its_output():
    state = snapshot(
        [running("/j/0", 1, failure_count=1)], [attempt("/j/0", 1)], Budget(max_retries_failure=1)
    )
    report = Report("/j/0", 1, pb.TASK_STATE_FAILED, exit_code=3, error="exit 3")

    decisions, _ = on_heartbeat("w1", [("/j/0", 1)], {report.key: report}, state, {("/j/0", 1): ["boom"]})

    change = only_task_change(decisions)
    assert (change.new, change.failure_count, change.exit_code) == (pb.TASK_STATE_FAILED, 2, 3)
    assert change.error == "exit 3 (after 2 attempts); last output: boom"


def test_reconcile_worker_loss_spends_preemption_budget_not_failure_budget():
    state = snapshot(
        [running("/j/0")], [attempt("/j/0")], Budget(max_retries_failure=0, max_retries_preemption=1)
    )

    decisions = on_worker_lost("w1", "preempted", [attempt("/j/0")], state)

    change = only_task_change(decisions)
    assert (change.new, change.failure_count, change.preemption_count) == (PENDING, 0, 1)
    assert decisions.logs_complete == [("/j/0", 0)]


def test_reconcile_worker_loss_past_preemption_budget_is_worker_failed_with_limit_named():
    state = snapshot(
        [running("/j/0", preemption_count=2)], [attempt("/j/0")], Budget(max_retries_preemption=2)
    )

    decisions = on_worker_lost("w1", "preempted", [attempt("/j/0")], state)

    change = only_task_change(decisions)
    assert change.new == pb.TASK_STATE_WORKER_FAILED
    assert change.error == (
        "worker w1 failed: preempted; its worker was lost 3 time(s), past the limit of 2 (max_retries_preemption)"
    )


def test_reconcile_worker_death_retries_undelivered_attempt_without_spending_a_budget():
    task = TaskRecord("/j/0", "/j", ASSIGNED, 0, "w1")
    undelivered = attempt("/j/0", state=ASSIGNED, delivered=False)
    state = snapshot([task], [undelivered], Budget(max_retries_preemption=0))

    decisions = on_worker_lost("w1", "gone", [undelivered], state)

    change = only_task_change(decisions)
    assert (change.new, change.failure_count, change.preemption_count) == (PENDING, 0, 0)
    assert attempt_changes(decisions) == [("/j/0", 0, ASSIGNED, pb.TASK_STATE_WORKER_FAILED)]


# ---------------------------------------------------------------- missing and unknown attempts


def test_reconcile_expected_attempt_the_worker_no_longer_reports_is_lost_and_retried():
    state = snapshot([running("/j/0")], [attempt("/j/0")], Budget(max_retries_preemption=5))

    decisions, _ = on_heartbeat("w1", [("/j/0", 0)], {}, state)

    assert attempt_changes(decisions) == [("/j/0", 0, RUNNING, pb.TASK_STATE_WORKER_FAILED)]
    change = only_task_change(decisions)
    assert (change.new, change.preemption_count) == (PENDING, 1)
    assert "worker w1 no longer has attempt 0" in change.reason
    assert decisions.logs_complete == [("/j/0", 0)]


def test_reconcile_reported_attempt_the_controller_does_not_know_is_marked_unknown():
    state = snapshot([], [], Budget())
    report = Report("/ghost/0", 0, RUNNING)

    decisions, _ = on_heartbeat("w1", [], {report.key: report}, state)

    assert decisions.unknown == [("/ghost/0", 0)]
    assert decisions.changes == []


def test_reconcile_attempt_reported_by_another_worker_or_already_killed_is_unknown():
    killed = attempt("/j/0", state=pb.TASK_STATE_KILLED)
    elsewhere = attempt("/j/1", worker_id="w2")
    state = snapshot([running("/j/0"), running("/j/1", worker_id="w2")], [killed, elsewhere], Budget())
    reports = {r.key: r for r in (Report("/j/0", 0, RUNNING), Report("/j/1", 0, RUNNING))}

    decisions, _ = on_heartbeat("w1", [], reports, state)

    assert decisions.unknown == [("/j/0", 0), ("/j/1", 0)]


def test_reconcile_report_of_a_superseded_attempt_ends_it_without_touching_the_task():
    state = snapshot([running("/j/0", attempt_id=1)], [attempt("/j/0", 0), attempt("/j/0", 1)], Budget())
    report = Report("/j/0", 0, pb.TASK_STATE_FAILED, error="late")

    decisions, _ = on_heartbeat("w1", [("/j/0", 0)], {report.key: report}, state)

    assert attempt_changes(decisions) == [("/j/0", 0, RUNNING, pb.TASK_STATE_FAILED)]
    assert task_changes(decisions) == []


def test_reconcile_report_breaking_the_table_is_rejected_and_others_still_apply():
    state = snapshot([running("/j/0"), running("/j/1")], [attempt("/j/0"), attempt("/j/1")], Budget())
    backwards = Report("/j/0", 0, pb.TASK_STATE_BUILDING)
    done = Report("/j/1", 0, pb.TASK_STATE_SUCCEEDED, started_at_ms=5)

    decisions, rejected = on_heartbeat(
        "w1", [("/j/0", 0), ("/j/1", 0)], {backwards.key: backwards, done.key: done}, state
    )

    assert [key for key, _ in rejected] == [("/j/0", 0)]
    assert "TASK_STATE_RUNNING -> TASK_STATE_BUILDING" in str(rejected[0][1])
    assert task_changes(decisions) == [("/j/1", RUNNING, pb.TASK_STATE_SUCCEEDED)]
    assert TaskDetail("/j/1", 0, started_at_ms=5) in decisions.changes


def test_reconcile_progress_report_moves_attempt_and_task_with_ports():
    task = TaskRecord("/j/0", "/j", ASSIGNED, 0, "w1")
    state = snapshot([task], [attempt("/j/0", state=ASSIGNED)], Budget())
    report = Report("/j/0", 0, RUNNING, started_at_ms=42, ports={"http": 8080})

    decisions, _ = on_heartbeat("w1", [("/j/0", 0)], {report.key: report}, state)

    assert decisions.changes[0] == TaskDetail("/j/0", 0, ports={"http": 8080})
    assert attempt_changes(decisions) == [("/j/0", 0, ASSIGNED, RUNNING)]
    assert task_changes(decisions) == [("/j/0", ASSIGNED, RUNNING)]
    assert only_task_change(decisions).started_at_ms == 42
    assert decisions.unknown == []


# ---------------------------------------------------------------- gang restart


def test_reconcile_gang_member_retried_restarts_running_siblings_without_charging_them():
    tasks = [
        running("/g/0", worker_id="w1"),
        running("/g/1", worker_id="w2"),
        running("/g/2", worker_id="w3"),
    ]
    attempts = [
        attempt("/g/0", worker_id="w1"),
        attempt("/g/1", worker_id="w2"),
        attempt("/g/2", worker_id="w3"),
    ]
    state = snapshot(tasks, attempts, Budget(max_retries_failure=1, gang=True), gang=True)
    report = Report("/g/0", 0, pb.TASK_STATE_FAILED, error="exit 1")

    decisions, _ = on_heartbeat("w1", [("/g/0", 0)], {report.key: report}, state)

    assert task_changes(decisions) == [
        ("/g/0", RUNNING, PENDING),
        ("/g/1", RUNNING, PENDING),
        ("/g/2", RUNNING, PENDING),
    ]
    siblings = [c for c in decisions.changes if isinstance(c, TaskChange) and c.task_id != "/g/0"]
    assert all(
        c.failure_count is None and c.pending_reason == "waiting to be retried with its gang"
        for c in siblings
    )
    assert decisions.kills == [("w2", "/g/1", 0), ("w3", "/g/2", 0)]
    assert ("/g/1", 0, RUNNING, pb.TASK_STATE_KILLED) in attempt_changes(decisions)


def test_reconcile_gang_sibling_report_after_restart_changes_nothing_more():
    tasks = [running("/g/0"), running("/g/1")]
    state = snapshot(
        tasks, [attempt("/g/0"), attempt("/g/1")], Budget(max_retries_failure=1, gang=True), gang=True
    )
    reports = {
        ("/g/0", 0): Report("/g/0", 0, pb.TASK_STATE_FAILED, error="exit 1"),
        ("/g/1", 0): Report("/g/1", 0, pb.TASK_STATE_SUCCEEDED),
    }

    decisions, _ = on_heartbeat("w1", [("/g/0", 0), ("/g/1", 0)], reports, state)

    # The sibling was killed by the restart before its own report was read.
    assert task_changes(decisions) == [("/g/0", RUNNING, PENDING), ("/g/1", RUNNING, PENDING)]


# ---------------------------------------------------------------- kills and timeouts


def test_reconcile_kill_ends_live_tasks_and_kills_only_attempts_that_run():
    pending = TaskRecord("/j/1", "/j", PENDING)
    state = snapshot([running("/j/0"), pending], [attempt("/j/0")], Budget())

    decisions = on_kill([running("/j/0"), pending], "terminated by user", state)

    assert task_changes(decisions) == [
        ("/j/0", RUNNING, pb.TASK_STATE_KILLED),
        ("/j/1", PENDING, pb.TASK_STATE_KILLED),
    ]
    assert decisions.kills == [("w1", "/j/0", 0)]
    assert decisions.touched_jobs == set()


def test_reconcile_scheduling_timeout_makes_only_overdue_tasks_unschedulable_with_reason():
    overdue = PendingTask("/a/0", "/a", 0, "no worker has 8 cpu", scheduling_timeout_ms=60_000)
    fresh = PendingTask("/b/0", "/b", 30_000, "", scheduling_timeout_ms=60_000)
    no_timeout = PendingTask("/c/0", "/c", 0, "", scheduling_timeout_ms=0)

    decisions = on_scheduling_timeouts([overdue, fresh, no_timeout], now_ms=60_000)

    change = only_task_change(decisions)
    assert (change.task_id, change.new) == ("/a/0", pb.TASK_STATE_UNSCHEDULABLE)
    assert change.error == "not scheduled within 60s (scheduling_timeout): no worker has 8 cpu"
    assert decisions.touched_jobs == {"/a"}


def test_reconcile_attempt_sent_in_an_unanswered_heartbeat_is_retried_as_a_new_attempt_free():
    task = TaskRecord("/j/0", "/j", ASSIGNED, 0, "w1")
    sent = attempt("/j/0", state=ASSIGNED, delivered=False)
    state = snapshot([task], [sent], Budget(max_retries_preemption=0))

    decisions = on_delivery_unconfirmed("w1", [sent], state)

    assert attempt_changes(decisions) == [("/j/0", 0, ASSIGNED, pb.TASK_STATE_WORKER_FAILED)]
    change = only_task_change(decisions)
    assert (change.new, change.preemption_count, change.failure_count) == (PENDING, 0, 0)
    assert "got no answer" in change.reason


def test_reconcile_unanswered_heartbeat_leaves_delivered_attempts_alone():
    delivered = attempt("/j/0", state=RUNNING, delivered=True)
    state = snapshot([running("/j/0")], [delivered], Budget())

    assert on_delivery_unconfirmed("w1", [delivered], state).changes == []
