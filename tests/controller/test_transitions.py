"""The controller's transition tables, job-state derivation and retry decisions (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iris.cluster.controller.transitions import (
    ATTEMPT_TRANSITIONS,
    JOB_TRANSITIONS,
    SLICE_TRANSITIONS,
    TASK_TRANSITIONS,
    WORKER_TRANSITIONS,
    InvalidTransitionError,
    SliceState,
    check_transition,
    decide_attempt_outcome,
    derive_job_state,
    state_label,
)
from iris.cluster.types import TERMINAL_JOB_STATES, TERMINAL_TASK_STATES
from iris.rpc import cluster_pb2 as pb

TABLES = {
    "task": TASK_TRANSITIONS,
    "attempt": ATTEMPT_TRANSITIONS,
    "job": JOB_TRANSITIONS,
    "worker": WORKER_TRANSITIONS,
    "slice": SLICE_TRANSITIONS,
}

ALL_EDGES = [
    pytest.param(kind, old, new, id=f"{kind}:{state_label(kind, old)}->{state_label(kind, new)}")
    for kind, table in TABLES.items()
    for old, moves in table.items()
    for new in moves
]

NON_TERMINAL_JOB_STATES = [pb.JOB_STATE_PENDING, pb.JOB_STATE_BUILDING, pb.JOB_STATE_RUNNING]
ACTIVE_TASK_STATES = [pb.TASK_STATE_ASSIGNED, pb.TASK_STATE_BUILDING, pb.TASK_STATE_RUNNING]
TASK_STATES = [v for v in pb.TaskState.values() if v != pb.TASK_STATE_UNSPECIFIED]

# ---------------------------------------------------------------- tables


@pytest.mark.parametrize(("kind", "old", "new"), ALL_EDGES)
def test_check_transition_every_table_edge_is_accepted(kind, old, new):
    check_transition(kind, "entity", old, new)  # must not raise
    assert TABLES[kind][old][new].strip(), "every edge explains the event that causes it"


def test_slice_table_every_state_is_reachable_and_deleted_is_final():
    reachable = {new for moves in SLICE_TRANSITIONS.values() for new in moves}
    assert set(SliceState) - {SliceState.UNSPECIFIED} <= reachable
    assert SLICE_TRANSITIONS[SliceState.DELETED] == {}
    with pytest.raises(InvalidTransitionError, match="illegal slice transition for s1: READY -> CREATING"):
        check_transition("slice", "s1", SliceState.READY, SliceState.CREATING)


def test_task_table_terminal_states_have_no_exits():
    for state in TERMINAL_TASK_STATES:
        assert TASK_TRANSITIONS[state] == {}, pb.TaskState.Name(state)
    for state in (pb.TASK_STATE_PENDING, *ACTIVE_TASK_STATES):
        assert TASK_TRANSITIONS[state], pb.TaskState.Name(state)


def test_job_table_terminal_states_have_no_exits_and_live_states_can_end():
    for state in TERMINAL_JOB_STATES:
        assert JOB_TRANSITIONS[state] == {}, pb.JobState.Name(state)
    for state in NON_TERMINAL_JOB_STATES:
        assert pb.JOB_STATE_KILLED in JOB_TRANSITIONS[state]
        assert pb.JOB_STATE_FAILED in JOB_TRANSITIONS[state]
        assert pb.JOB_STATE_SUCCEEDED in JOB_TRANSITIONS[state]


def test_attempt_table_never_moves_back_to_assigned_or_pending():
    for old, moves in ATTEMPT_TRANSITIONS.items():
        assert pb.TASK_STATE_ASSIGNED not in moves, pb.TaskState.Name(old)
        assert pb.TASK_STATE_PENDING not in moves, pb.TaskState.Name(old)


def test_task_table_active_states_can_return_to_pending_for_retry():
    for state in ACTIVE_TASK_STATES:
        assert pb.TASK_STATE_PENDING in TASK_TRANSITIONS[state], pb.TaskState.Name(state)


def test_worker_table_failed_worker_can_only_come_back_by_registering():
    assert set(WORKER_TRANSITIONS[pb.WORKER_STATE_FAILED]) == {pb.WORKER_STATE_HEALTHY}
    assert "registered" in WORKER_TRANSITIONS[pb.WORKER_STATE_FAILED][pb.WORKER_STATE_HEALTHY]
    with pytest.raises(InvalidTransitionError):
        check_transition("worker", "w1", pb.WORKER_STATE_FAILED, pb.WORKER_STATE_UNHEALTHY)


# ---------------------------------------------------------------- check_transition errors


def test_check_transition_terminal_task_restart_raises_with_names_and_history():
    with pytest.raises(InvalidTransitionError) as info:
        check_transition(
            "task",
            "/train/0",
            pb.TASK_STATE_SUCCEEDED,
            pb.TASK_STATE_RUNNING,
            history=["PENDING->ASSIGNED (assigned to w1)", "ASSIGNED->SUCCEEDED (exited 0)"],
        )
    message = str(info.value)
    assert "illegal task transition for /train/0" in message
    assert "TASK_STATE_SUCCEEDED -> TASK_STATE_RUNNING" in message
    assert "PENDING->ASSIGNED (assigned to w1); ASSIGNED->SUCCEEDED (exited 0)" in message


def test_check_transition_without_history_says_so():
    with pytest.raises(InvalidTransitionError, match="no recorded history"):
        check_transition("job", "/j", pb.JOB_STATE_KILLED, pb.JOB_STATE_RUNNING)


def test_check_transition_from_state_missing_in_table_raises():
    with pytest.raises(InvalidTransitionError, match="TASK_STATE_UNSPECIFIED -> TASK_STATE_RUNNING"):
        check_transition("attempt", "/j/0#0", pb.TASK_STATE_UNSPECIFIED, pb.TASK_STATE_RUNNING)


def test_check_transition_attempt_running_back_to_building_raises():
    with pytest.raises(InvalidTransitionError, match="illegal attempt transition"):
        check_transition("attempt", "/j/0#0", pb.TASK_STATE_RUNNING, pb.TASK_STATE_BUILDING)


def test_transition_tables_same_state_is_never_an_edge():
    # The store skips no-op moves itself; the table has no self loops.
    for kind, table in TABLES.items():
        for old, moves in table.items():
            assert old not in moves, f"{kind} {state_label(kind, old)} has a self loop"


# ---------------------------------------------------------------- derive_job_state


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        ([pb.TASK_STATE_PENDING, pb.TASK_STATE_PENDING], pb.JOB_STATE_PENDING),
        ([pb.TASK_STATE_ASSIGNED, pb.TASK_STATE_PENDING], pb.JOB_STATE_PENDING),
        ([pb.TASK_STATE_BUILDING, pb.TASK_STATE_PENDING], pb.JOB_STATE_BUILDING),
        ([pb.TASK_STATE_RUNNING, pb.TASK_STATE_BUILDING], pb.JOB_STATE_RUNNING),
        ([pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_RUNNING], pb.JOB_STATE_RUNNING),
        ([pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_SUCCEEDED], pb.JOB_STATE_SUCCEEDED),
        ([], pb.JOB_STATE_PENDING),
    ],
)
def test_derive_job_state_from_live_tasks_follows_most_advanced_task(tasks, expected):
    assert derive_job_state(pb.JOB_STATE_PENDING, tasks, max_task_failures=0).state == expected


def test_derive_job_state_all_succeeded_reason_says_every_task_finished():
    outcome = derive_job_state(pb.JOB_STATE_RUNNING, [pb.TASK_STATE_SUCCEEDED] * 3, 0)
    assert outcome == type(outcome)(pb.JOB_STATE_SUCCEEDED, "every task finished")


def test_derive_job_state_one_failure_over_budget_fails_with_detail():
    outcome = derive_job_state(
        pb.JOB_STATE_RUNNING,
        [pb.TASK_STATE_FAILED, pb.TASK_STATE_RUNNING],
        max_task_failures=0,
        failure_detail="task /j/0 failed: exit 3",
    )
    assert outcome.state == pb.JOB_STATE_FAILED
    assert outcome.reason == "task /j/0 failed: exit 3"


def test_derive_job_state_failure_without_detail_still_has_a_reason():
    outcome = derive_job_state(pb.JOB_STATE_RUNNING, [pb.TASK_STATE_FAILED], 0)
    assert outcome.state == pb.JOB_STATE_FAILED
    assert outcome.reason


def test_derive_job_state_failures_within_budget_keep_job_running():
    outcome = derive_job_state(
        pb.JOB_STATE_RUNNING, [pb.TASK_STATE_FAILED, pb.TASK_STATE_RUNNING], max_task_failures=1
    )
    assert outcome.state == pb.JOB_STATE_RUNNING


def test_derive_job_state_tolerated_failure_and_rest_succeeded_is_success():
    outcome = derive_job_state(
        pb.JOB_STATE_RUNNING, [pb.TASK_STATE_FAILED, pb.TASK_STATE_SUCCEEDED], max_task_failures=1
    )
    assert outcome.state == pb.JOB_STATE_SUCCEEDED


def test_derive_job_state_every_task_failed_within_budget_is_still_failed():
    outcome = derive_job_state(
        pb.JOB_STATE_RUNNING, [pb.TASK_STATE_FAILED, pb.TASK_STATE_FAILED], max_task_failures=5
    )
    assert outcome.state == pb.JOB_STATE_FAILED
    assert "every task failed" in outcome.reason


def test_derive_job_state_worker_failed_task_beats_running_and_succeeded():
    outcome = derive_job_state(
        pb.JOB_STATE_RUNNING,
        [pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_RUNNING, pb.TASK_STATE_WORKER_FAILED],
        max_task_failures=10,
    )
    assert outcome.state == pb.JOB_STATE_WORKER_FAILED
    assert outcome.reason


def test_derive_job_state_unschedulable_task_makes_job_unschedulable():
    outcome = derive_job_state(pb.JOB_STATE_PENDING, [pb.TASK_STATE_UNSCHEDULABLE, pb.TASK_STATE_PENDING], 0)
    assert outcome.state == pb.JOB_STATE_UNSCHEDULABLE


def test_derive_job_state_killed_is_sticky():
    outcome = derive_job_state(pb.JOB_STATE_KILLED, [pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_RUNNING], 0)
    assert outcome.state == pb.JOB_STATE_KILLED


def test_derive_job_state_running_job_between_attempts_keeps_running():
    # One task finished, the other was just re-assigned after losing its worker.
    outcome = derive_job_state(pb.JOB_STATE_RUNNING, [pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_ASSIGNED], 0)
    assert outcome.state == pb.JOB_STATE_RUNNING


def test_derive_job_state_running_job_next_task_starting_keeps_running_without_loss_reason():
    # Three tasks on room for two: the third starts after the first two finished. Nothing was lost.
    outcome = derive_job_state(
        pb.JOB_STATE_RUNNING, [pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_BUILDING], 0
    )

    assert outcome.state == pb.JOB_STATE_RUNNING


def test_derive_job_state_running_job_whose_only_task_is_retrying_goes_pending():
    outcome = derive_job_state(pb.JOB_STATE_RUNNING, [pb.TASK_STATE_PENDING], 0)
    assert outcome.state == pb.JOB_STATE_PENDING


@settings(max_examples=300, deadline=None)
@given(
    current=st.sampled_from(NON_TERMINAL_JOB_STATES),
    tasks=st.lists(st.sampled_from(TASK_STATES), max_size=6),
    max_task_failures=st.integers(0, 3),
)
def test_derive_job_state_any_derived_change_is_a_legal_job_edge(current, tasks, max_task_failures):
    outcome = derive_job_state(current, tasks, max_task_failures, "detail")
    if outcome.state != current:
        check_transition("job", "/j", current, outcome.state)  # must not raise


@settings(max_examples=300, deadline=None)
@given(
    current=st.sampled_from(NON_TERMINAL_JOB_STATES),
    tasks=st.lists(st.sampled_from(TASK_STATES), min_size=1, max_size=6),
    max_task_failures=st.integers(0, 3),
)
def test_derive_job_state_succeeded_only_when_every_task_is_done(current, tasks, max_task_failures):
    outcome = derive_job_state(current, tasks, max_task_failures)
    if outcome.state == pb.JOB_STATE_SUCCEEDED:
        assert all(t in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED) for t in tasks)
        assert tasks.count(pb.TASK_STATE_FAILED) <= max_task_failures
    if outcome.state in TERMINAL_JOB_STATES and outcome.state != pb.JOB_STATE_SUCCEEDED:
        assert outcome.reason, "a job that ends badly always says why"


# ---------------------------------------------------------------- decide_attempt_outcome


def test_decide_attempt_outcome_success_finishes_task_without_spending_budgets():
    outcome = decide_attempt_outcome(
        pb.TASK_STATE_SUCCEEDED, 1, 2, max_retries_failure=3, max_retries_preemption=3
    )
    assert (outcome.task_state, outcome.failure_count, outcome.preemption_count, outcome.retry) == (
        pb.TASK_STATE_SUCCEEDED,
        1,
        2,
        False,
    )


def test_decide_attempt_outcome_failure_with_budget_retries_and_counts_failure():
    outcome = decide_attempt_outcome(
        pb.TASK_STATE_FAILED, 0, 0, max_retries_failure=1, max_retries_preemption=0
    )
    assert outcome.task_state == pb.TASK_STATE_PENDING
    assert outcome.retry
    assert (outcome.failure_count, outcome.preemption_count) == (1, 0)


def test_decide_attempt_outcome_failure_with_budget_spent_fails_task():
    outcome = decide_attempt_outcome(
        pb.TASK_STATE_FAILED, 1, 0, max_retries_failure=1, max_retries_preemption=100
    )
    assert outcome.task_state == pb.TASK_STATE_FAILED
    assert not outcome.retry
    assert outcome.failure_count == 2


def test_decide_attempt_outcome_no_retries_configured_fails_on_first_failure():
    outcome = decide_attempt_outcome(
        pb.TASK_STATE_FAILED, 0, 0, max_retries_failure=0, max_retries_preemption=100
    )
    assert outcome.task_state == pb.TASK_STATE_FAILED


def test_decide_attempt_outcome_worker_loss_spends_preemption_not_failure_budget():
    outcome = decide_attempt_outcome(
        pb.TASK_STATE_WORKER_FAILED, 0, 0, max_retries_failure=0, max_retries_preemption=1
    )
    assert outcome.task_state == pb.TASK_STATE_PENDING
    assert outcome.retry
    assert (outcome.failure_count, outcome.preemption_count) == (0, 1)


def test_decide_attempt_outcome_preemption_budget_spent_is_worker_failed():
    outcome = decide_attempt_outcome(
        pb.TASK_STATE_WORKER_FAILED, 0, 1, max_retries_failure=5, max_retries_preemption=1
    )
    assert outcome.task_state == pb.TASK_STATE_WORKER_FAILED
    assert not outcome.retry
    assert outcome.preemption_count == 2


def test_decide_attempt_outcome_killed_attempt_counts_as_preemption():
    outcome = decide_attempt_outcome(
        pb.TASK_STATE_KILLED, 0, 0, max_retries_failure=0, max_retries_preemption=2
    )
    assert outcome.task_state == pb.TASK_STATE_PENDING
    assert (outcome.failure_count, outcome.preemption_count) == (0, 1)


@pytest.mark.parametrize("state", [pb.TASK_STATE_PENDING, *ACTIVE_TASK_STATES])
def test_decide_attempt_outcome_non_terminal_attempt_raises_value_error(state):
    with pytest.raises(ValueError, match=pb.TaskState.Name(state)):
        decide_attempt_outcome(state, 0, 0, 1, 1)


@settings(max_examples=100, deadline=None)
@given(max_retries_failure=st.integers(0, 6), max_retries_preemption=st.integers(0, 6))
def test_decide_attempt_outcome_always_failing_task_runs_exactly_retries_plus_one_times(
    max_retries_failure, max_retries_preemption
):
    failures, preemptions, attempts = 0, 0, 0
    while True:
        attempts += 1
        outcome = decide_attempt_outcome(
            pb.TASK_STATE_FAILED, failures, preemptions, max_retries_failure, max_retries_preemption
        )
        failures, preemptions = outcome.failure_count, outcome.preemption_count
        if not outcome.retry:
            break
    assert attempts == max_retries_failure + 1
    assert outcome.task_state == pb.TASK_STATE_FAILED
    assert preemptions == 0


@settings(max_examples=200, deadline=None)
@given(
    task_state=st.sampled_from(ACTIVE_TASK_STATES),
    attempt_state=st.sampled_from(
        [pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED, pb.TASK_STATE_WORKER_FAILED, pb.TASK_STATE_KILLED]
    ),
    failures=st.integers(0, 4),
    preemptions=st.integers(0, 4),
    max_retries_failure=st.integers(0, 4),
    max_retries_preemption=st.integers(0, 4),
)
def test_decide_attempt_outcome_result_is_a_legal_task_edge(
    task_state, attempt_state, failures, preemptions, max_retries_failure, max_retries_preemption
):
    outcome = decide_attempt_outcome(
        attempt_state, failures, preemptions, max_retries_failure, max_retries_preemption
    )
    check_transition("task", "/j/0", task_state, outcome.task_state)  # must not raise
    assert outcome.retry == (outcome.task_state == pb.TASK_STATE_PENDING)
