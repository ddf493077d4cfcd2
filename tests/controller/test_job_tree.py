"""The job-level rules at the pure layer: a job's state from its tasks, what its end implies, and
the kill cascade down a job tree. No SQLite: records in, decisions out."""

from __future__ import annotations

from iris.cluster.controller.job_tree import (
    JobKill,
    JobRecord,
    TaskOutcomeRecord,
    decide_job_update,
    plan_tree_kill,
)
from iris.rpc import cluster_pb2 as pb

NOW = 50_000


def task(
    index: int, state: int, exit_code: int = 0, error: str = "", started: int | None = None
) -> TaskOutcomeRecord:
    return TaskOutcomeRecord(f"/j/{index}", state, exit_code, error, started)


# ---------------------------------------------------------------- a job's state from its tasks


def test_decide_job_update_first_running_task_starts_job_now():
    update = decide_job_update(JobRecord("/j", pb.JOB_STATE_PENDING), [task(0, pb.TASK_STATE_RUNNING)], NOW)

    assert update is not None
    assert (update.new, update.started_at_ms, update.finished) == (pb.JOB_STATE_RUNNING, NOW, False)
    assert update.reason == "a task started running"
    assert update.kill_tasks_reason == update.kill_children_reason == ""


def test_decide_job_update_running_job_keeps_its_first_start_time():
    job = JobRecord("/j", pb.JOB_STATE_BUILDING, started_at_ms=1_000)

    update = decide_job_update(job, [task(0, pb.TASK_STATE_RUNNING)], NOW)

    assert update is not None and update.started_at_ms == 1_000


def test_decide_job_update_unchanged_state_decides_nothing():
    job = JobRecord("/j", pb.JOB_STATE_RUNNING, started_at_ms=1_000)

    assert (
        decide_job_update(job, [task(0, pb.TASK_STATE_RUNNING), task(1, pb.TASK_STATE_PENDING)], NOW) is None
    )


def test_decide_job_update_ended_job_is_never_derived_again():
    job = JobRecord("/j", pb.JOB_STATE_KILLED, started_at_ms=1_000)

    assert decide_job_update(job, [task(0, pb.TASK_STATE_SUCCEEDED)], NOW) is None


def test_decide_job_update_all_succeeded_ends_job_without_killing_anything_but_children():
    job = JobRecord("/j", pb.JOB_STATE_RUNNING, started_at_ms=1_000)

    update = decide_job_update(job, [task(0, pb.TASK_STATE_SUCCEEDED), task(1, pb.TASK_STATE_SUCCEEDED)], NOW)

    assert update is not None
    assert (update.new, update.error, update.exit_code) == (pb.JOB_STATE_SUCCEEDED, "", 0)
    assert update.kill_tasks_reason == ""
    assert update.kill_children_reason == "parent job /j finished"


def test_decide_job_update_finished_between_heartbeats_takes_start_from_earliest_task():
    job = JobRecord("/j", pb.JOB_STATE_PENDING)
    tasks = [task(0, pb.TASK_STATE_SUCCEEDED, started=7_000), task(1, pb.TASK_STATE_SUCCEEDED, started=3_000)]

    update = decide_job_update(job, tasks, NOW)

    assert update is not None and update.new == pb.JOB_STATE_SUCCEEDED
    assert update.started_at_ms == 3_000


def test_decide_job_update_failure_past_budget_fails_with_first_failed_task_and_kills_the_rest():
    job = JobRecord("/j", pb.JOB_STATE_RUNNING, started_at_ms=1_000)
    tasks = [
        task(0, pb.TASK_STATE_RUNNING),
        task(1, pb.TASK_STATE_FAILED, exit_code=3, error="loss is nan"),
        task(2, pb.TASK_STATE_FAILED, exit_code=4, error="later"),
    ]

    update = decide_job_update(job, tasks, NOW)

    assert update is not None
    assert update.new == pb.JOB_STATE_FAILED
    assert update.error == "task /j/1 failed: loss is nan"
    assert update.exit_code == 3
    assert update.kill_tasks_reason == "job ended: task /j/1 failed: loss is nan"
    assert update.kill_children_reason == "parent job /j finished"


def test_decide_job_update_failures_within_budget_keep_job_running():
    job = JobRecord("/j", pb.JOB_STATE_RUNNING, started_at_ms=1_000, tolerated_failures=1)

    update = decide_job_update(job, [task(0, pb.TASK_STATE_FAILED, 1), task(1, pb.TASK_STATE_RUNNING)], NOW)

    assert update is None


def test_decide_job_update_worker_failed_task_ends_job_as_worker_failed():
    job = JobRecord("/j", pb.JOB_STATE_RUNNING, started_at_ms=1_000, tolerated_failures=5)
    tasks = [task(0, pb.TASK_STATE_WORKER_FAILED, -1, "worker w1 failed"), task(1, pb.TASK_STATE_RUNNING)]

    update = decide_job_update(job, tasks, NOW)

    assert update is not None and update.new == pb.JOB_STATE_WORKER_FAILED
    assert update.error == "task /j/0 worker_failed: worker w1 failed"
    assert update.kill_tasks_reason.startswith("job ended: task /j/0")


def test_decide_job_update_unschedulable_task_ends_pending_job_with_its_reason():
    job = JobRecord("/j", pb.JOB_STATE_PENDING)
    tasks = [
        task(0, pb.TASK_STATE_UNSCHEDULABLE, error="not scheduled within 5s"),
        task(1, pb.TASK_STATE_PENDING),
    ]

    update = decide_job_update(job, tasks, NOW)

    assert update is not None and update.new == pb.JOB_STATE_UNSCHEDULABLE
    assert update.started_at_ms is None
    assert "not scheduled within 5s" in update.error


# ---------------------------------------------------------------- the kill cascade


def test_plan_tree_kill_kills_parents_before_children_with_reasons_naming_the_parent():
    states = {"/a": pb.JOB_STATE_RUNNING, "/a/b": pb.JOB_STATE_RUNNING, "/a/b/c": pb.JOB_STATE_PENDING}
    children = {"/a": ["/a/b"], "/a/b": ["/a/b/c"]}

    kills = plan_tree_kill(["/a"], "terminated by user", states, children)

    assert kills == [
        JobKill("/a", pb.JOB_STATE_RUNNING, "terminated by user"),
        JobKill("/a/b", pb.JOB_STATE_RUNNING, "parent job /a ended: terminated by user"),
        JobKill(
            "/a/b/c", pb.JOB_STATE_PENDING, "parent job /a/b ended: parent job /a ended: terminated by user"
        ),
    ]


def test_plan_tree_kill_ended_job_is_skipped_but_its_live_children_are_killed():
    states = {"/a": pb.JOB_STATE_FAILED, "/a/done": pb.JOB_STATE_SUCCEEDED, "/a/live": pb.JOB_STATE_RUNNING}
    children = {"/a": ["/a/done", "/a/live"]}

    kills = plan_tree_kill(["/a"], "cleanup", states, children)

    assert [k.job_id for k in kills] == ["/a/live"]
    assert kills[0].reason == "parent job /a ended: cleanup"


def test_plan_tree_kill_several_roots_keeps_their_order_and_leaves_siblings_alone():
    states = {
        "/p": pb.JOB_STATE_SUCCEEDED,
        "/p/x": pb.JOB_STATE_RUNNING,
        "/p/y": pb.JOB_STATE_PENDING,
        "/q": pb.JOB_STATE_RUNNING,
    }
    children = {"/p": ["/p/x", "/p/y"]}

    kills = plan_tree_kill(children["/p"], "parent job /p finished", states, children)

    assert [(k.job_id, k.reason) for k in kills] == [
        ("/p/x", "parent job /p finished"),
        ("/p/y", "parent job /p finished"),
    ]


def test_plan_tree_kill_whole_tree_already_ended_kills_nothing():
    states = {"/a": pb.JOB_STATE_KILLED, "/a/b": pb.JOB_STATE_SUCCEEDED}

    assert plan_tree_kill(["/a"], "again", states, {"/a": ["/a/b"]}) == []
