"""A running attempt's resource use, as its status reports it: measured from one sample interval
into the run, then at most once per interval."""

from __future__ import annotations

import sys

from iris.cluster.worker import task_attempt
from iris.cluster.worker.task_attempt import TaskAttempt
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until
from worker_support import attempt_context

SAMPLE_INTERVAL_S = 2.0


def test_attempt_usage_is_reported_from_one_interval_into_the_run_then_kept_between_samples(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(task_attempt, "USAGE_SAMPLE_INTERVAL_S", SAMPLE_INTERVAL_S)
    request = pb.RunTaskRequest(task_id="/job/0", job_id="/job", attempt_id=0)
    request.entrypoint.command.argv.extend([sys.executable, "-c", "import time; time.sleep(60)"])
    attempt = TaskAttempt(request, {}, attempt_context(tmp_path))
    attempt.start()
    try:
        wait_until(lambda: attempt.state == pb.TASK_STATE_RUNNING, 30, 0.02, "the attempt to run")
        assert not attempt.status(None, 0).HasField("usage")

        measured = wait_until(
            lambda: (status := attempt.status(None, 0)).HasField("usage") and status,
            30,
            0.05,
            "a usage sample",
        )

        assert measured.usage.process_count >= 1
        assert measured.usage.memory_bytes > 0
        assert attempt.status(None, 0).usage == measured.usage
    finally:
        attempt.kill()
        attempt.join(30)
