"""Reused threads: a call runs at once, on an idle thread when there is one."""

from __future__ import annotations

import threading

from iris.cluster.reused_threads import ReusedThreads
from iris.time import wait_until


def _run(threads: ReusedThreads, call=lambda: None) -> threading.Thread:
    ran_on: list[threading.Thread] = []

    def recorded() -> None:
        ran_on.append(threading.current_thread())
        call()

    threads.run(recorded)
    wait_until(lambda: bool(ran_on), 10, 0.01, "the call to run")
    return ran_on[0]


def test_reused_threads_call_after_an_earlier_one_ended_runs_on_its_thread():
    threads = ReusedThreads("t")
    first = _run(threads)
    wait_until(lambda: threads._idle == 1, 10, 0.01, "the thread to be idle")

    assert _run(threads) is first


def test_reused_threads_calls_at_once_each_get_a_thread():
    threads = ReusedThreads("t")
    both_running = threading.Barrier(2, timeout=10)

    first = _run(threads, both_running.wait)
    second = _run(threads, both_running.wait)

    assert first is not second


def test_reused_threads_failing_call_leaves_the_thread_serving():
    threads = ReusedThreads("t")

    def fail() -> None:
        raise RuntimeError("the call failed")

    first = _run(threads, fail)
    wait_until(lambda: threads._idle == 1, 10, 0.01, "the thread to be idle")

    assert _run(threads) is first


def test_reused_threads_idle_thread_ends_after_the_idle_timeout():
    threads = ReusedThreads("t", idle_timeout_s=0.05)

    thread = _run(threads)

    wait_until(lambda: not thread.is_alive(), 10, 0.01, "the idle thread to end")
    assert threads._idle == 0
    assert _run(threads) is not thread
