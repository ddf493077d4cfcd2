"""Jobs of one shape share their demand's objects, which lets the scheduler place their tasks as one
run; what it decides must be what it decides for the same tasks with objects of their own."""

from __future__ import annotations

import random
from dataclasses import replace

from controller_support import GiB, T0, job_request

from iris.cluster.controller.scheduler import find_assignments
from iris.cluster.controller.scheduling_types import Resources, TaskDemand, WorkerCapacity
from iris.cluster.controller.store import ControllerStore
from iris.cluster.types import Constraint


def test_store_jobs_of_one_shape_share_their_demand_objects(tmp_path) -> None:
    store = ControllerStore(tmp_path / "controller.sqlite3")
    for name, cpu in (("/a", 500), ("/b", 500), ("/c", 700)):
        store.create_job(name, job_request(name, cpu=cpu), T0)
    a, b, c = store.pending_demands()
    assert a.resources is b.resources and a.constraints is b.constraints
    assert c.resources is not a.resources and c.resources == Resources(700, GiB)
    store.close()


def _own_objects(task: TaskDemand) -> TaskDemand:
    return replace(task, resources=replace(task.resources), constraints=tuple(replace(c) for c in task.constraints))


def _workers(free_cpu: int) -> list[WorkerCapacity]:
    return [
        WorkerCapacity(
            f"w{i}", Resources(16_000, 64 * GiB), Resources(free_cpu * (i + 1), 8 * GiB), {"zone": "ab"[i % 2]}
        )
        for i in range(4)
    ]


def test_scheduler_decides_the_same_for_shared_and_separate_shape_objects() -> None:
    """Runs of one shape across jobs, interleaved with other shapes, on workers from full to empty."""
    rng = random.Random(7)
    shapes = [
        (Resources(500, GiB), ()),
        (Resources(1000, 2 * GiB), ()),
        (Resources(300, GiB), (Constraint("zone", value="b"),)),
    ]
    shared = []
    for i in range(400):
        resources, constraints = shapes[0] if rng.random() < 0.6 else rng.choice(shapes)
        shared.append(TaskDemand(f"/job{i}/0", f"/job{i}", resources, None, constraints))
    separate = [_own_objects(task) for task in shared]
    assert shared[1].resources is not separate[1].resources
    for free_cpu in (0, 700, 2500, 16_000):
        assert find_assignments(shared, _workers(free_cpu)) == find_assignments(separate, _workers(free_cpu))
