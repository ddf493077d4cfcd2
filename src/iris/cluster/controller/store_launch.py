"""Creating jobs in the store: one job, or the submissions that arrived together in one transaction.

A commit costs more than the rows of a one-task job (it writes every page the job's row and its
indexes touched), so the controller hands the store each burst of LaunchJobs at once. Each job is
its own event: one refused (its name taken, its request already served, its parent gone) is rolled
back alone and its error takes its place in the result.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from iris.cluster.controller.store_base import (
    Effects,
    JobExistsError,
    NotFoundError,
    RequestAlreadyServedError,
    StoreBase,
)
from iris.cluster.controller.transitions import state_label
from iris.cluster.types import TERMINAL_JOB_STATES
from iris.rpc import cluster_pb2 as pb

# (job id, its launch request, the user who launched it: empty when auth is off)
Launch = tuple[str, pb.LaunchJobRequest, str]


class JobLaunches(StoreBase):
    def create_job(self, job_id: str, request: pb.LaunchJobRequest, now_ms: int, owner: str = "") -> Effects:
        """`owner` is the user who launched the job (empty when auth is off)."""
        (result,) = self.create_jobs([(job_id, request, owner)], now_ms)
        if isinstance(result, Exception):
            raise result
        return result

    def create_jobs(self, launches: Sequence[Launch], now_ms: int) -> list[Effects | Exception]:
        """`create_job` for each launch, in order, in one transaction; a launch that fails gets its
        exception in the result and leaves no row behind."""
        results: list[Effects | Exception] = []
        created: list[tuple[str, pb.LaunchJobRequest]] = []
        subject = launches[0][0] if len(launches) == 1 else f"{len(launches)} jobs"
        with self._write("launch_job", subject) as db:
            for job_id, request, owner in launches:
                stored = pb.LaunchJobRequest()
                stored.CopyFrom(request)
                stored.ClearField("bundle_blob")
                try:
                    with self._event_within("launch_job", job_id):
                        self._insert_job(db, job_id, request, stored, now_ms, owner)
                except Exception as exc:  # noqa: BLE001 - one refused launch must not undo the others
                    results.append(exc)
                    continue
                created.append((job_id, stored))
                results.append(Effects(wake_scheduler=True))
        with self._lock:
            for job_id, stored in created:
                self._remember_request(job_id, stored)
        return results

    def _insert_job(
        self,
        db: sqlite3.Connection,
        job_id: str,
        request: pb.LaunchJobRequest,
        stored: pb.LaunchJobRequest,
        now_ms: int,
        owner: str,
    ) -> None:
        root_submitted_ms = self._root_submitted_ms(db, request.parent_job_id) if request.parent_job_id else now_ms
        num_tasks = max(1, request.replicas)
        # A job and its tasks are born PENDING; their history starts with their first move.
        try:
            db.execute(
                "INSERT INTO jobs(job_id, parent_job_id, state, request, num_tasks, priority, submitted_at_ms,"
                " root_submitted_at_ms, request_id, owner) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    job_id,
                    request.parent_job_id or None,
                    pb.JOB_STATE_PENDING,
                    stored.SerializeToString(),
                    num_tasks,
                    request.priority,
                    now_ms,
                    root_submitted_ms,
                    request.request_id or None,
                    owner,
                ),
            )
        except sqlite3.IntegrityError:
            # The unique keys on job_id and request_id make both checks; which one failed is read
            # only then (two reads per launch otherwise, in the batch every launch waits for).
            self._refuse_duplicate(db, job_id, request.request_id)
            raise
        self._insert_tasks(db, job_id, num_tasks, now_ms)

    def _refuse_duplicate(self, db: sqlite3.Connection, job_id: str, request_id: str) -> None:
        """Raise for a launch already served (a retry), then for a job id already taken."""
        if request_id:
            served = db.execute("SELECT job_id FROM jobs WHERE request_id=?", (request_id,)).fetchone()
            if served is not None:
                raise RequestAlreadyServedError(served["job_id"])
        existing = db.execute("SELECT state FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if existing is not None:
            raise JobExistsError(
                f"job {job_id} already exists ({state_label('job', existing['state'])}); "
                "choose another name or kill it first"
            )

    def _root_submitted_ms(self, db: sqlite3.Connection, parent_job_id: str) -> int:
        """When the root of a new child's tree was submitted; the parent must exist and still live."""
        parent = db.execute(
            "SELECT state, root_submitted_at_ms FROM jobs WHERE job_id=?", (parent_job_id,)
        ).fetchone()
        if parent is None:
            raise NotFoundError(f"parent job {parent_job_id} not found")
        if parent["state"] in TERMINAL_JOB_STATES:
            raise JobExistsError(
                f"parent job {parent_job_id} has already finished "
                f"({state_label('job', parent['state'])}); cannot add a child to it"
            )
        return parent["root_submitted_at_ms"]

    def _insert_tasks(self, db: sqlite3.Connection, job_id: str, num_tasks: int, now_ms: int) -> None:
        # A task of a deleted job's name continues from its last attempt id.
        previous = {
            r["task_id"]: r["last_attempt"]
            for r in db.execute(
                "SELECT task_id, last_attempt FROM deleted_task_attempts WHERE task_id>? AND task_id<?",
                (job_id + "/", job_id + "/\U0010ffff"),
            )
        }
        db.executemany(
            "INSERT INTO tasks(task_id, job_id, task_index, state, pending_reason, pending_since_ms,"
            " current_attempt) VALUES (?,?,?,?,?,?,?)",
            [
                (
                    f"{job_id}/{i}",
                    job_id,
                    i,
                    pb.TASK_STATE_PENDING,
                    "waiting for the scheduler",
                    now_ms,
                    previous.get(f"{job_id}/{i}", -1),
                )
                for i in range(num_tasks)
            ],
        )
