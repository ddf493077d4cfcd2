"""Turning controller answers into terminal tables and JSON."""

from __future__ import annotations

import json
import sys
import time

import click
from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Table

from iris.cluster.types import job_state_name, task_state_name
from iris.config import format_size
from iris.rpc import cluster_pb2 as pb
from iris.rpc import time_pb2

# Piped output is never wrapped or folded: `iris job list | grep` must see whole rows.
PIPE_WIDTH = 10_000
console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else PIPE_WIDTH)

_STATE_STYLE = {
    "succeeded": "green",
    "running": "cyan",
    "building": "cyan",
    "pending": "yellow",
    "assigned": "yellow",
    "failed": "red",
    "worker_failed": "red",
    "unschedulable": "red",
    "killed": "magenta",
    "healthy": "green",
    "unhealthy": "yellow",
    "terminated": "dim",
    "stopped": "dim",
}


def styled_state(name: str) -> str:
    style = _STATE_STYLE.get(name)
    return f"[{style}]{name}[/{style}]" if style else name


def short_state(name: str) -> str:
    """JOB_STATE_RUNNING or TASK_STATE_RUNNING -> running."""
    return name.split("_STATE_", 1)[-1].lower()


def age(ts: time_pb2.Timestamp) -> str:
    if not ts.epoch_ms:
        return "-"
    seconds = max(0.0, time.time() - ts.epoch_ms / 1000)
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h ago"
    return f"{seconds / 86400:.1f}d ago"


def clock_time(ts: time_pb2.Timestamp) -> str:
    """Local wall-clock time of an event, with the date when it is not today."""
    if not ts.epoch_ms:
        return "-"
    moment = time.localtime(ts.epoch_ms / 1000)
    same_day = time.strftime("%Y-%m-%d", moment) == time.strftime("%Y-%m-%d")
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", moment)


def duration_between(start: time_pb2.Timestamp, end: time_pb2.Timestamp) -> str:
    if not start.epoch_ms:
        return "-"
    end_ms = end.epoch_ms or int(time.time() * 1000)
    seconds = (end_ms - start.epoch_ms) / 1000
    return f"{seconds:.1f}s" if seconds < 120 else f"{seconds / 60:.1f}m"


def message_dict(message: Message) -> dict:
    """camelCase keys, as the controller's JSON API answers, so one parser reads both."""
    return json_format.MessageToDict(message)


def print_json(messages: Message | list[Message]) -> None:
    data = [message_dict(m) for m in messages] if isinstance(messages, list) else message_dict(messages)
    click.echo(json.dumps(data, indent=2, sort_keys=True))


# Workers that left (terminated, failed, stopped) stay listed this long, then only with --all.
GONE_WORKER_SHOWN_MS = 10 * 60 * 1000
LIVE_WORKER_STATES = (pb.WORKER_STATE_HEALTHY, pb.WORKER_STATE_UNHEALTHY)


def recent_workers(workers: list[pb.WorkerInfo], now_ms: float) -> list[pb.WorkerInfo]:
    """Live workers, and those gone within GONE_WORKER_SHOWN_MS (by their last heartbeat)."""
    return [
        w
        for w in workers
        if w.state in LIVE_WORKER_STATES or now_ms - w.last_heartbeat.epoch_ms < GONE_WORKER_SHOWN_MS
    ]


def task_summary(job: pb.JobStatus) -> str:
    done = job.task_state_counts.get("succeeded", 0)
    return f"{done}/{job.num_tasks}"


def jobs_table(jobs: list[pb.JobStatus]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("JOB", "STATE", "TASKS", "SUBMITTED", "DURATION", "DETAIL"):
        table.add_column(column, overflow="fold")
    for job in jobs:
        detail = job.error if job.error else job.pending_reason
        table.add_row(
            job.job_id,
            styled_state(job_state_name(job.state)),
            task_summary(job),
            age(job.submitted_at),
            duration_between(job.started_at, job.finished_at),
            detail,
        )
    return table


def tasks_table(tasks: list[pb.TaskStatus]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("TASK", "STATE", "WORKER", "ATTEMPTS", "EXIT", "DETAIL"):
        table.add_column(column, overflow="fold")
    for task in tasks:
        exited = task.state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED)
        table.add_row(
            task.task_id,
            styled_state(task_state_name(task.state)),
            task.worker_id or "-",
            str(len(task.attempts)),
            str(task.exit_code) if exited else "-",
            task.error or task.pending_reason,
        )
    return table


def workers_table(workers: list[pb.WorkerInfo]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("WORKER", "STATE", "ADDRESS", "CPU", "MEMORY", "TASKS", "LAST HEARTBEAT", "DETAIL"):
        table.add_column(column, overflow="fold")
    for worker in workers:
        meta = worker.metadata
        cpu = f"{worker.committed.cpu_millicores / 1000:g}/{meta.cpu_millicores / 1000:g}"
        memory = f"{format_size(worker.committed.memory_bytes)}/{format_size(meta.memory_bytes)}"
        table.add_row(
            worker.worker_id,
            styled_state(pb.WorkerState.Name(worker.state).removeprefix("WORKER_STATE_").lower()),
            worker.address,
            cpu,
            memory,
            str(len(worker.running_task_ids)),
            age(worker.last_heartbeat),
            worker.error,
        )
    return table
