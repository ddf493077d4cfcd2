"""The status line `iris run` shows on stderr while a job waits to start.

On a terminal it is one line refreshed in place; piped, it is a plain line each time what it says
changes (not each time a counter ticks), so a log file stays readable.
"""

from __future__ import annotations

import re
import time
from typing import TextIO

from iris.client.client import IrisClient, IrisError
from iris.cluster.types import job_state_name
from iris.rpc import cluster_pb2 as pb

WAITING_STATES = (pb.JOB_STATE_PENDING, pb.JOB_STATE_BUILDING)
# Slices on their way: what a waiting job is most likely waiting for.
BOOTING_SLICE_STATES = ("CREATING", "BOOTSTRAPPING")


def _seconds_since(epoch_ms: int, now_ms: int) -> str:
    return f"{max(0, now_ms - epoch_ms) // 1000} s"


def describe_wait(status: pb.JobStatus, autoscaler: pb.GetAutoscalerStatusResponse | None, now_ms: int) -> str:
    """One line: the job's state and for how long, why it waits, and what the autoscaler is doing.
    Only the pending reason's first line: the lines after it name each zone that refused, which
    the group's own one-line reason below says again."""
    line = f"{status.job_id} {job_state_name(status.state)} ({_seconds_since(status.submitted_at.epoch_ms, now_ms)})"
    if status.pending_reason:
        line += f": {status.pending_reason.splitlines()[0]}"
    if autoscaler is None or not autoscaler.enabled:
        return line
    for group in autoscaler.groups:
        if not group.demand:
            continue
        booting = [s for s in group.slices if s.state in BOOTING_SLICE_STATES]
        if booting:
            newest = max(booting, key=lambda s: s.created_at.epoch_ms)
            line += (
                f"; waiting for a slice of {group.name} "
                f"({newest.state.lower()}, {_seconds_since(newest.created_at.epoch_ms, now_ms)})"
            )
        elif group.unmet_reason:
            line += f"; {group.name}: {group.unmet_reason}"
    for reason in autoscaler.unroutable:
        if reason.startswith(f"{status.job_id}:"):
            line += f"; {reason.split(': ', 1)[1]}"
    return line


def _without_counters(line: str) -> str:
    return re.sub(r"\d+(\.\d+)? ?s\b", "", line)


class WaitingLine:
    def __init__(self, client: IrisClient, stream: TextIO) -> None:
        self._client = client
        self._stream = stream
        self._terminal = stream.isatty()
        self._showing = False
        self._last = ""

    def update(self, status: pb.JobStatus) -> None:
        if status.state not in WAITING_STATES:
            self.clear()
            return
        autoscaler = None
        if status.state == pb.JOB_STATE_PENDING:
            try:
                autoscaler = self._client.call("get_autoscaler_status", pb.GetAutoscalerStatusRequest())
            except IrisError:
                autoscaler = None  # the job's own status still says why it waits
        line = f"iris: {describe_wait(status, autoscaler, int(time.time() * 1000))}"
        if self._terminal:
            self._stream.write(f"\r\x1b[K{line}")
            self._showing = True
        elif _without_counters(line) != _without_counters(self._last):
            self._stream.write(f"{line}\n")
        self._last = line
        self._stream.flush()

    def clear(self) -> None:
        """Before anything else is written: a terminal's status line is erased."""
        if self._showing:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._showing = False
