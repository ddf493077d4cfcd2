"""The controller's state in SQLite: jobs, tasks, attempts, workers, slices, endpoints, logs, history.

The store stores: schema (`schema.py`), queries, and one mutation path (`store_base.py`). The rules
that decide state changes are pure functions in `reconcile.py`; write methods load a snapshot, ask
them, and persist the decisions. Write methods are one short transaction each and never call out
over the network; they return `Effects` telling the controller which workers need a heartbeat and
whether the scheduler should run.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence

from iris.cluster.controller import reconcile
from iris.cluster.controller.dispatch import run_request
from iris.cluster.controller.feasibility import demand_from_request
from iris.cluster.controller.pending_order import OrderKey
from iris.cluster.controller.reconcile import (
    ACTIVE_ATTEMPT_STATES,
    FAILURE_LOG_LINES,
    AttemptKey,
    PendingTask,
)
from iris.cluster.controller.scheduling_types import (
    Device,
    Resources,
    TaskDemand,
    WorkerCapacity,
    device_from_proto,
)
from iris.cluster.controller.transitions import (
    state_label,
)
from iris.cluster.types import (
    ATTR_SLICE_ID,
    TERMINAL_JOB_STATES,
    AttributeValue,
    attribute_from_proto,
)
from iris.rpc import cluster_pb2 as pb

logger = logging.getLogger(__name__)

# Distinct task shapes whose objects jobs share (see `_with_shared_shape`).
MAX_SHARED_SHAPES = 1024


from iris.cluster.controller.store_base import (
    ACTIVE_SQL,
    LIVE_WORKER_SQL,
    Effects,
    HeartbeatPlan,
    JobExistsError,
    NotFoundError,
    attempt_record,
    chunks,
    worker_metadata,
)
from iris.cluster.controller.store_launch import JobLaunches
from iris.cluster.controller.store_reads import StoreReads


class ControllerStore(JobLaunches, StoreReads):
    # ------------------------------------------------------------ jobs

    def terminate_job(self, job_id: str, reason: str, now_ms: int) -> tuple[list[str], Effects]:
        """Kill a job and, recursively, its children. Returns the ids of jobs that changed."""
        effects = Effects()
        with self._write("terminate_job", job_id) as db:
            if db.execute("SELECT 1 FROM jobs WHERE job_id=?", (job_id,)).fetchone() is None:
                raise NotFoundError(f"job {job_id} not found")
            terminated = self._kill_job_tree(job_id, reason, now_ms, effects)
        return terminated, effects

    def delete_job_tree(self, job_id: str) -> list[str]:
        """Forget a finished job and its children (rows, history, logs, endpoints); their ids."""
        with self._write("delete_job", job_id) as db:
            rows = db.execute(
                "SELECT job_id, state FROM jobs WHERE job_id=? OR (job_id>? AND job_id<?)",
                (job_id, job_id + "/", job_id + "/\U0010ffff"),
            ).fetchall()
            if not rows:
                raise NotFoundError(f"job {job_id} not found")
            for row in rows:
                if row["state"] not in TERMINAL_JOB_STATES:
                    raise JobExistsError(
                        f"job {row['job_id']} is still {state_label('job', row['state'])}; kill it before deleting it"
                    )
            tree = [row["job_id"] for row in rows]
            for member in tree:
                self._forget_job(db, member)
        return tree

    def _forget_job(self, db: sqlite3.Connection, job_id: str) -> None:
        # Each task's last attempt id outlives the job, so a job created again under the same name
        # continues from there: a worker still holding an old attempt never takes a new one for it.
        for task in db.execute("SELECT task_id, current_attempt FROM tasks WHERE job_id=?", (job_id,)).fetchall():
            task_id = task["task_id"]
            # A pass that ran while the task was killed may have remembered a reason for it.
            self._written_reasons.pop(task_id, None)
            db.execute(
                "INSERT OR REPLACE INTO deleted_task_attempts(task_id, last_attempt) VALUES (?,?)",
                (task_id, task["current_attempt"]),
            )
            db.execute("DELETE FROM attempts WHERE task_id=?", (task_id,))
            db.execute(
                "DELETE FROM transitions WHERE (kind='task' AND entity_id=?)"
                " OR (kind='attempt' AND entity_id>? AND entity_id<?)",
                (task_id, task_id + "#", task_id + "#\U0010ffff"),
            )
        for table in ("tasks", "task_logs", "endpoints", "jobs"):
            db.execute(f"DELETE FROM {table} WHERE job_id=?", (job_id,))
        self.on_job_state_change(job_id, None)
        db.execute("DELETE FROM transitions WHERE kind='job' AND entity_id=?", (job_id,))
        with self._lock:
            self._requests.pop(job_id, None)
            self._forget_job_shape(job_id)
            self.capacity_epoch += 1  # a new task may now reuse a deleted task's row number
            self._pending_order.lose()

    # ------------------------------------------------------------ scheduling

    def _demand_template(self, job_id: str) -> TaskDemand:
        """The scheduling shape shared by every task of a job (cached while the job is live:
        requests never change)."""
        template = self._demand_templates.get(job_id)
        if template is None:
            template = self._with_shared_shape(demand_from_request(job_id, self.request_for(job_id)))
            self._demand_templates[job_id] = template
        return template

    def _with_shared_shape(self, template: TaskDemand) -> TaskDemand:
        """The template with the resources, device and constraints objects of any other job of the
        same shape: the scheduler takes consecutive tasks sharing those objects as one run, so a
        backlog of one-task jobs of one shape is one step of a pass, not one per job."""
        shape = template.shape()
        shared = self._shared_shapes.get(shape)
        if shared is None:
            if len(self._shared_shapes) >= MAX_SHARED_SHAPES:
                self._shared_shapes.clear()  # sharing is an optimisation: later jobs start afresh
            shared = self._shared_shapes[shape] = shape
        return TaskDemand(template.task_id, template.job_id, *shared, template.gang_group_by)

    def _task_demands(self, job_id: str) -> list[TaskDemand]:
        """A live job's demand per task index, kept with its template for every pass to reuse."""
        if job_id not in self._task_demands_by_job:
            template, tasks = self._demand_template(job_id), max(1, self.request_for(job_id).replicas)
            self._task_demands_by_job[job_id] = [template.for_task(f"{job_id}/{i}") for i in range(tasks)]
        return self._task_demands_by_job[job_id]

    def scheduling_mark(self) -> tuple[int, int]:
        """(capacity_epoch, the newest task's row number): a pass that started from this mark
        can skip, in the next pass, every task it tried while the epoch stays the same."""
        with self._read() as db:
            return self.capacity_epoch, db.execute("SELECT COALESCE(MAX(rowid), 0) FROM tasks").fetchone()[0]

    def scheduling_inputs(self, after_row: int = 0) -> tuple[list[TaskDemand], list[WorkerCapacity]]:
        """Pending tasks in scheduling order (only those created after task row `after_row`), and
        the capacity each healthy worker has left (not read when no task is pending)."""
        with self._read() as db:
            demands = self._pending_demands(db, after_row)
            return demands, self._healthy_capacities(db) if demands else []

    def pending_demands(self) -> list[TaskDemand]:
        """Every pending task in scheduling order, without the workers' capacities."""
        with self._read() as db:
            return self._pending_demands(db, 0)

    def _pending_demands(self, db: sqlite3.Connection, after_row: int) -> list[TaskDemand]:
        """Every pending task in order, or only those created after task row `after_row`."""
        if after_row:
            return self._read_pending(db, after_row)[1]
        through_row = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM tasks").fetchone()[0]
        order = self._pending_order
        if order.through_row is None:
            order.reset(*self._read_pending(db, 0), through_row)
        else:
            order.advance(*self._read_pending(db, order.through_row), through_row)
        return order.demands()

    def _read_pending(self, db: sqlite3.Connection, after_row: int) -> tuple[list[OrderKey], list[TaskDemand]]:
        """Pending tasks created after task row `after_row` in scheduling order, with their order
        keys. Order: higher priority first; then by the submission of the job's root, so a running
        job's children go before jobs submitted after it; then FIFO by job; then task index."""
        rows = db.execute(
            f"SELECT t.job_id, t.task_index, j.priority, j.root_submitted_at_ms, j.submitted_at_ms"
            f" FROM tasks t JOIN jobs j ON j.job_id = t.job_id"
            f" WHERE t.state = {pb.TASK_STATE_PENDING} AND t.rowid > ?"
            f" ORDER BY j.priority DESC, j.root_submitted_at_ms, j.submitted_at_ms, t.job_id, t.task_index",
            (after_row,),
        ).fetchall()
        by_job = self._task_demands_by_job
        keys = [
            (-priority, root_ms, submitted_ms, job_id, index)
            for job_id, index, priority, root_ms, submitted_ms in rows
        ]
        return keys, [(by_job.get(job_id) or self._task_demands(job_id))[index] for *_, job_id, index in keys]

    def _healthy_capacities(self, db: sqlite3.Connection) -> list[WorkerCapacity]:
        """Each healthy worker's capacity less what its active attempts hold. The attempts are
        summed by SQLite and only for healthy workers (none at all when no worker is healthy): at a
        million jobs there are tens of thousands of active attempts, read on every full pass."""
        healthy = db.execute(
            f"SELECT worker_id, metadata, registered_at_ms FROM workers "
            f"WHERE state = {pb.WORKER_STATE_HEALTHY} ORDER BY worker_id"
        ).fetchall()
        if not healthy:
            return []
        # CROSS JOIN keeps the workers outside: each seeks its own attempts in `attempts_worker`.
        on_healthy = "workers w CROSS JOIN attempts a ON a.worker_id = w.worker_id"
        active = f"w.state = {pb.WORKER_STATE_HEALTHY} AND a.state IN ({ACTIVE_SQL})"
        committed = {
            worker_id: Resources(cpu, memory, disk)
            for worker_id, cpu, memory, disk in db.execute(
                f"SELECT a.worker_id, SUM(a.cpu_millicores), SUM(a.memory_bytes), SUM(a.disk_bytes)"
                f" FROM {on_healthy} WHERE {active} GROUP BY a.worker_id"
            )
        }
        offers = [(w["worker_id"], *self._worker_offer(w)) for w in healthy]
        devices_used: dict[str, int] = {}
        if any(device is not None for *_, device in offers):
            for worker_id, job_id in db.execute(
                f"SELECT a.worker_id, t.job_id FROM {on_healthy} JOIN tasks t ON t.task_id = a.task_id WHERE {active}"
            ):
                device = self._demand_template(job_id).device
                if device is not None:
                    # A whole-host TPU request (count 0) takes every chip: count it as "a lot".
                    devices_used[worker_id] = devices_used.get(worker_id, 0) + (device.count or 1 << 20)
        return [
            WorkerCapacity(
                worker_id,
                total,
                total - committed.get(worker_id, Resources()),
                attributes,
                device,
                max(0, (device.count if device else 0) - devices_used.get(worker_id, 0)),
            )
            for worker_id, total, attributes, device in offers
        ]

    def idle_capacities(self) -> list[WorkerCapacity]:
        """Every healthy worker as if it ran nothing: what the cluster could hold at best.

        Checked on every submission, so kept until a worker changes state or registers again."""
        with self._read() as db:
            if self._idle_capacities is None:
                capacities = []
                for w in db.execute(
                    f"SELECT worker_id, metadata, registered_at_ms FROM workers "
                    f"WHERE state = {pb.WORKER_STATE_HEALTHY} ORDER BY worker_id"
                ):
                    total, attributes, device = self._worker_offer(w)
                    capacities.append(
                        WorkerCapacity(w["worker_id"], total, total, attributes, device, device.count if device else 0)
                    )
                self._idle_capacities = capacities
            return self._idle_capacities

    def _worker_offer(self, row: sqlite3.Row) -> tuple[Resources, dict[str, AttributeValue], Device | None]:
        """A worker's capacity, attributes and device, parsed once per registration: every
        scheduling pass needs them for every worker."""
        cached = self._worker_offers.get(row["worker_id"])
        if cached is not None and cached[0] == row["registered_at_ms"]:
            return cached[1]
        meta = pb.WorkerMetadata.FromString(row["metadata"])
        offer = (
            Resources(meta.cpu_millicores, meta.memory_bytes, meta.disk_bytes),
            {k: attribute_from_proto(v) for k, v in meta.attributes.items()},
            device_from_proto(meta.device),
        )
        self._worker_offers[row["worker_id"]] = (row["registered_at_ms"], offer)
        return offer

    def expire_unschedulable(self, now_ms: int) -> Effects:
        """Tasks pending past their job's scheduling timeout become UNSCHEDULABLE."""
        effects = Effects()
        with self._write("scheduling_timeouts", "") as db:
            pending = [
                PendingTask(task_id, job_id, since_ms, reason, timeout_ms)
                for task_id, job_id, since_ms, reason in db.execute(
                    "SELECT task_id, job_id, pending_since_ms, pending_reason FROM tasks "
                    f"WHERE state = {pb.TASK_STATE_PENDING}"
                ).fetchall()
                if (timeout_ms := self._scheduling_timeout(job_id))
            ]
            self._persist(reconcile.on_scheduling_timeouts(pending, now_ms), now_ms, effects)
        # Only a job that changed needs another scheduling pass; a timeout alone does not.
        effects.wake_scheduler = False
        return effects

    def apply_assignments(
        self, assignments: list[tuple[str, str]], pending_reasons: dict[str, str], now_ms: int
    ) -> Effects:
        effects = Effects()
        with self._write("schedule", "") as db:
            tasks, worker_states = {}, {}
            for chunk in chunks([task_id for task_id, _ in assignments]):
                marks = ",".join("?" * len(chunk))
                tasks.update((t["task_id"], t) for t in db.execute(
                    f"SELECT * FROM tasks WHERE task_id IN ({marks})", chunk
                ))  # fmt: skip
            for chunk in chunks(list({worker_id for _, worker_id in assignments})):
                marks = ",".join("?" * len(chunk))
                worker_states.update(db.execute(
                    f"SELECT worker_id, state FROM workers WHERE worker_id IN ({marks})", chunk
                ).fetchall())  # fmt: skip
            for task_id, worker_id in assignments:
                task = tasks.get(task_id)
                if task is None or task["state"] != pb.TASK_STATE_PENDING:
                    continue  # killed while the scheduler was deciding
                if worker_states.get(worker_id) != pb.WORKER_STATE_HEALTHY:
                    continue
                spec = self.request_for(task["job_id"]).resources
                attempt_id = task["current_attempt"] + 1
                db.execute(
                    "INSERT INTO attempts(task_id, attempt_id, worker_id, state, cpu_millicores, memory_bytes,"
                    " disk_bytes, created_at_ms) VALUES (?,?,?,?,?,?,?,?)",
                    (
                        task_id,
                        attempt_id,
                        worker_id,
                        pb.TASK_STATE_ASSIGNED,
                        spec.cpu_millicores,
                        spec.memory_bytes,
                        spec.disk_bytes,
                        now_ms,
                    ),
                )
                self._set_state(
                    "task", task_id, task["state"], pb.TASK_STATE_ASSIGNED, f"assigned to {worker_id}", now_ms,
                    current_attempt=attempt_id, worker_id=worker_id, pending_reason="",
                )  # fmt: skip
                effects.heartbeat_workers.add(worker_id)
            # Most reasons are what the last pass wrote: leaving those rows alone keeps the write small.
            db.executemany(
                f"UPDATE tasks SET pending_reason=? WHERE task_id=? AND state={pb.TASK_STATE_PENDING}",
                [(r, task_id) for task_id, r in pending_reasons.items() if self._written_reasons.get(task_id) != r],
            )
        self._written_reasons.update(pending_reasons)
        return effects

    # ------------------------------------------------------------ workers

    def register_worker(
        self, worker_id: str, address: str, metadata: pb.WorkerMetadata, now_ms: int, callback_token: str = ""
    ) -> Effects:
        """A worker (re)registers with the id and slice id its platform gave it at bootstrap."""
        slice_attribute = metadata.attributes.get(ATTR_SLICE_ID)
        slice_id = str(attribute_from_proto(slice_attribute)) if slice_attribute is not None else ""
        with self._write("register_worker", worker_id) as db:
            row = db.execute("SELECT state FROM workers WHERE worker_id=?", (worker_id,)).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO workers(worker_id, address, metadata, state, registered_at_ms, last_heartbeat_ms)"
                    " VALUES (?,?,?,?,?,?)",
                    (worker_id, address, b"", pb.WORKER_STATE_UNSPECIFIED, now_ms, now_ms),
                )
                old, reason = pb.WORKER_STATE_UNSPECIFIED, "registered"
            else:
                old, reason = row["state"], "registered again"
            self._set_state(
                "worker", worker_id, old, pb.WORKER_STATE_HEALTHY, reason, now_ms,
                address=address, metadata=metadata.SerializeToString(), slice_id=slice_id,
                registered_at_ms=now_ms, last_heartbeat_ms=now_ms, error="", callback_token=callback_token,
            )  # fmt: skip
        return Effects(heartbeat_workers={worker_id}, wake_scheduler=True)

    def live_workers(self) -> list[sqlite3.Row]:
        with self._read() as db:
            return db.execute(f"SELECT * FROM workers WHERE state IN ({LIVE_WORKER_SQL})").fetchall()

    def touch_live_workers(self, now_ms: int) -> None:
        """After a controller restart, give every known worker a fresh timeout window."""
        with self._write("controller_start", "") as db:
            db.execute(
                f"UPDATE workers SET last_heartbeat_ms=? WHERE state IN ({LIVE_WORKER_SQL})", (now_ms,)
            )

    def plan_heartbeat(self, worker_id: str, controller_address: str) -> HeartbeatPlan | None:
        """What a live worker gets in its next heartbeat: attempts to start, attempts expected."""
        return self.plan_heartbeats([worker_id], controller_address)[worker_id]

    def plan_heartbeats(
        self, worker_ids: Sequence[str], controller_address: str
    ) -> dict[str, HeartbeatPlan | None]:
        """`plan_heartbeat` for many workers in two queries per chunk of ids, not two per worker;
        None for a worker that is no longer live."""
        plans: dict[str, HeartbeatPlan | None] = dict.fromkeys(worker_ids)
        with self._read() as db:
            for chunk in chunks(list(plans)):
                marks = ",".join("?" * len(chunk))
                workers = {
                    w["worker_id"]: w
                    for w in db.execute(
                        f"SELECT * FROM workers WHERE worker_id IN ({marks}) AND state IN ({LIVE_WORKER_SQL})",
                        chunk,
                    )
                }
                open_attempts: dict[str, list[sqlite3.Row]] = {}
                for a in db.execute(
                    "SELECT a.*, t.job_id, t.task_index FROM attempts a JOIN tasks t ON t.task_id = a.task_id "
                    f"WHERE a.worker_id IN ({marks}) AND a.logs_complete=0",
                    chunk,
                ):
                    open_attempts.setdefault(a["worker_id"], []).append(a)
                for worker_id, worker in workers.items():
                    plans[worker_id] = self._plan(worker, open_attempts.get(worker_id, ()), controller_address)
        return plans

    def _plan(
        self, worker: sqlite3.Row, attempts: Sequence[sqlite3.Row], controller_address: str
    ) -> HeartbeatPlan:
        worker_id = worker["worker_id"]
        to_run, expected = [], []
        for a in attempts:
            if a["state"] in ACTIVE_ATTEMPT_STATES and not a["sent"]:
                request = self.request_for(a["job_id"])
                hosts = self._gang_hosts(a["job_id"]) if request.resources.device.HasField("tpu") else []
                to_run.append(run_request(request, a, worker_id, controller_address, hosts, worker_metadata(worker)))
            if a["state"] in ACTIVE_ATTEMPT_STATES or a["delivered"] or a["sent"]:
                expected.append(
                    pb.ExpectedTask(task_id=a["task_id"], attempt_id=a["attempt_id"], log_offset=a["log_offset"])
                )
        return HeartbeatPlan(worker_id, worker["address"], to_run, expected, worker["callback_token"])

    def record_sent(self, plans: Sequence[HeartbeatPlan]) -> None:
        """Before the heartbeats go out: their attempts are sent, and no later plan sends them again."""
        sent = [(run.task_id, run.attempt_id) for plan in plans for run in plan.to_run]
        if not sent:
            return
        senders = [plan.worker_id for plan in plans if plan.to_run]
        with self._write("dispatch", senders[0] if len(senders) == 1 else f"{len(senders)} workers") as db:
            db.executemany("UPDATE attempts SET sent=1 WHERE task_id=? AND attempt_id=?", sent)

    def _gang_hosts(self, job_id: str) -> list[str]:
        # Gang members are placed in one transaction, so every task's worker is the current one;
        # some members may already have finished, which must not shrink the host list.
        hosts = []
        for row in self._conn.execute(
            "SELECT w.metadata FROM tasks t JOIN workers w ON w.worker_id = t.worker_id "
            "WHERE t.job_id=? ORDER BY t.task_index",
            (job_id,),
        ):
            meta = pb.WorkerMetadata.FromString(row["metadata"])
            hosts.append(meta.ip_address or meta.hostname)
        return hosts

    def apply_heartbeat(
        self, plan: HeartbeatPlan, response: pb.HeartbeatResponse, now_ms: int
    ) -> tuple[list[tuple[str, int]], Effects]:
        """Reconcile what the worker reported with what the controller expected.

        Returns the attempts the worker runs that the controller does not expect (to be killed)
        and the effects of the changes.
        """
        result = self.apply_heartbeats([(plan, response)], now_ms)[0]
        if isinstance(result, Exception):
            raise result
        return result

    def apply_heartbeats(
        self, answers: Sequence[tuple[HeartbeatPlan, pb.HeartbeatResponse]], now_ms: int
    ) -> list[tuple[list[tuple[str, int]], Effects] | Exception]:
        """`apply_heartbeat` for many answers in one write transaction. Each answer is its own
        event: one that fails is rolled back alone and its exception takes its place in the result."""
        results: list[tuple[list[tuple[str, int]], Effects] | Exception] = []
        with self._write("heartbeat", "") as db:
            idle = self._note_idle_heartbeats(db, answers, now_ms)
            for plan, response in answers:
                if plan.worker_id in idle:
                    results.append(([], Effects()))
                    continue
                try:
                    with self._event_within("heartbeat", plan.worker_id):
                        results.append(self._apply_heartbeat(db, plan, response, now_ms))
                except Exception as exc:  # noqa: BLE001 - one bad answer must not undo the others
                    results.append(exc)
        return results

    def _note_idle_heartbeats(
        self, db: sqlite3.Connection, answers: Sequence[tuple[HeartbeatPlan, pb.HeartbeatResponse]], now_ms: int
    ) -> set[str]:
        """Stamp the heartbeat of healthy workers that have nothing to run, report or deliver, in one
        statement per chunk: on a big cluster most answers are these, and each would otherwise be a
        read and a write of its own. Returns the workers stamped; the others need the full path."""
        idle = [
            plan.worker_id
            for plan, response in answers
            if not plan.to_run and not plan.expected and not response.running_tasks and not response.completed_tasks
        ]
        stamped: set[str] = set()
        for chunk in chunks(idle):
            stamped.update(
                row[0]
                for row in db.execute(
                    f"UPDATE workers SET last_heartbeat_ms=?, error='' WHERE state={pb.WORKER_STATE_HEALTHY}"
                    f" AND worker_id IN ({','.join('?' * len(chunk))}) RETURNING worker_id",
                    (now_ms, *chunk),
                )
            )
        return stamped

    def _apply_heartbeat(
        self, db: sqlite3.Connection, plan: HeartbeatPlan, response: pb.HeartbeatResponse, now_ms: int
    ) -> tuple[list[tuple[str, int]], Effects]:
        effects = Effects()
        statuses = {
            (s.task_id, s.attempt_id): s for s in (*response.running_tasks, *response.completed_tasks)
        }
        worker = db.execute("SELECT state FROM workers WHERE worker_id=?", (plan.worker_id,)).fetchone()
        if worker is None or worker["state"] not in (pb.WORKER_STATE_HEALTHY, pb.WORKER_STATE_UNHEALTHY):
            return [], effects
        self._set_state(
            "worker", plan.worker_id, worker["state"], pb.WORKER_STATE_HEALTHY, "heartbeat ok", now_ms,
            last_heartbeat_ms=now_ms, error="",
        )  # fmt: skip
        if plan.to_run:
            db.executemany(
                "UPDATE attempts SET delivered=1 WHERE task_id=? AND attempt_id=?",
                [(run.task_id, run.attempt_id) for run in plan.to_run],
            )
        expected = [(e.task_id, e.attempt_id) for e in plan.expected]
        if not expected and not statuses:
            return [], effects
        rows = self._rows([*expected, *statuses])
        tails = self._absorb_logs(expected, statuses, rows)
        snapshot = self._snapshot([*expected, *statuses], rows)
        reports = {key: reconcile.report_from_proto(status) for key, status in statuses.items()}
        decisions, rejected = reconcile.on_heartbeat(plan.worker_id, expected, reports, snapshot, tails)
        for (task_id, attempt_id), error in rejected:
            story = self._story(error.kind, error.entity_id)
            logger.error(
                "ignoring report of %s#%s from %s: %s; story: %s",
                task_id,
                attempt_id,
                plan.worker_id,
                error,
                story,
            )
        try:
            self._persist(decisions, now_ms, effects)
            # Log positions no attempt's end took along.
            db.executemany(
                "UPDATE attempts SET log_offset=?, logs_complete=? WHERE task_id=? AND attempt_id=?",
                [(*position, *key) for key, position in self._log_positions.items()],
            )
        finally:
            self._log_positions.clear()
        return decisions.unknown, effects

    def _absorb_logs(
        self,
        expected: list[AttemptKey],
        statuses: dict[AttemptKey, pb.WorkerTaskStatus],
        rows: tuple[dict[AttemptKey, sqlite3.Row], dict[str, sqlite3.Row]],
    ) -> dict[AttemptKey, list[str]]:
        """Store the log lines of expected attempts, and note their new log positions for the
        attempts' own updates to carry (`_log_positions`); returns the output tail of those that failed."""
        db = self._conn
        attempts, tasks = rows
        tails = {}
        for key in expected:
            status = statuses.get(key)
            attempt = attempts.get(key)
            if status is None or attempt is None or key[0] not in tasks:
                continue
            if status.logs:
                job_id = tasks[key[0]]["job_id"]
                db.executemany(
                    "INSERT INTO task_logs(job_id, task_id, attempt_id, ts_ms, source, data) VALUES (?,?,?,?,?,?)",
                    [(job_id, *key, line.timestamp_ms, line.source, line.data) for line in status.logs],
                )
            log_offset = attempt["log_offset"] + len(status.logs)
            logs_complete = int(status.state not in ACTIVE_ATTEMPT_STATES and log_offset >= status.total_log_lines)
            if (log_offset, logs_complete) != (attempt["log_offset"], attempt["logs_complete"]):
                self._log_positions[key] = (log_offset, logs_complete)
            if status.state == pb.TASK_STATE_FAILED:
                tails[key] = [
                    r["data"]
                    for r in db.execute(
                        "SELECT data FROM task_logs WHERE task_id=? AND attempt_id=? AND source != 'build' "
                        "ORDER BY id DESC LIMIT ?",
                        (*key, FAILURE_LOG_LINES),
                    )
                ][::-1]
        return tails

    def record_heartbeat_failure(
        self,
        worker_id: str,
        error: str,
        now_ms: int,
        worker_timeout_ms: int,
        sent: Sequence[AttemptKey] = (),
    ) -> Effects:
        """A heartbeat RPC failed: the attempts it was `sent` to start are retried as new attempts
        (an attempt id is delivered at most once); the worker is unhealthy, and failed once it is
        past its timeout."""
        effects = Effects()
        with self._write("heartbeat_failed", worker_id) as db:
            if sent:
                snapshot = self._snapshot(sent)
                attempts = [snapshot.attempts[key] for key in sent if key in snapshot.attempts]
                self._persist(reconcile.on_delivery_unconfirmed(worker_id, attempts, snapshot), now_ms, effects)
                effects.wake_scheduler = True
            worker = db.execute("SELECT * FROM workers WHERE worker_id=?", (worker_id,)).fetchone()
            if worker is None or worker["state"] not in (pb.WORKER_STATE_HEALTHY, pb.WORKER_STATE_UNHEALTHY):
                return effects
            silent_ms = now_ms - worker["last_heartbeat_ms"]
            if silent_ms >= worker_timeout_ms:
                reason = f"no successful heartbeat for {silent_ms / 1000:.0f}s (last error: {error})"
                self._fail_worker(worker, reason, now_ms, effects)
            else:
                self._set_state(
                    "worker",
                    worker_id,
                    worker["state"],
                    pb.WORKER_STATE_UNHEALTHY,
                    error,
                    now_ms,
                    error=error,
                )
        return effects

    def _fail_worker(
        self,
        worker: sqlite3.Row,
        reason: str,
        now_ms: int,
        effects: Effects,
        final_state: int = pb.WORKER_STATE_FAILED,
    ) -> None:
        worker_id = worker["worker_id"]
        self._set_state("worker", worker_id, worker["state"], final_state, reason, now_ms, error=reason)
        self._worker_offers.pop(worker_id, None)
        open_attempts = [
            attempt_record(row)
            for row in self._conn.execute(
                "SELECT * FROM attempts WHERE worker_id=? AND logs_complete=0", (worker_id,)
            ).fetchall()
        ]
        snapshot = self._snapshot([a.key for a in open_attempts])
        self._persist(reconcile.on_worker_lost(worker_id, reason, open_attempts, snapshot), now_ms, effects)
        effects.wake_scheduler = True

    def fail_silent_workers(self, now_ms: int, worker_timeout_ms: int) -> Effects:
        effects = Effects()
        with self._write("worker_timeouts", "") as db:
            for worker in db.execute(
                f"SELECT * FROM workers WHERE state IN ({LIVE_WORKER_SQL}) AND last_heartbeat_ms < ?",
                (now_ms - worker_timeout_ms,),
            ).fetchall():
                silent = (now_ms - worker["last_heartbeat_ms"]) / 1000
                detail = f" (last error: {worker['error']})" if worker["error"] else ""
                self._fail_worker(
                    worker, f"no successful heartbeat for {silent:.0f}s{detail}", now_ms, effects
                )
        return effects

    def fail_workers(
        self, worker_ids: list[str], reason: str, now_ms: int, final_state: int = pb.WORKER_STATE_FAILED
    ) -> Effects:
        """Workers known to be gone: fail them now rather than at their timeout. A slice ended on
        purpose leaves its workers TERMINATED instead of FAILED; their tasks fail over the same way."""
        effects = Effects()
        with self._write("workers_lost", ",".join(worker_ids)) as db:
            for worker_id in worker_ids:
                worker = db.execute("SELECT * FROM workers WHERE worker_id=?", (worker_id,)).fetchone()
                if worker is not None and worker["state"] in (
                    pb.WORKER_STATE_HEALTHY,
                    pb.WORKER_STATE_UNHEALTHY,
                ):
                    self._fail_worker(worker, reason, now_ms, effects, final_state)
        return effects
