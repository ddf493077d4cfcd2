"""Heartbeat rounds: the controller's RPCs to its workers, driven from per-turn batches.

A round to a worker is planned (what it carries), sent, answered and reconciled in the store.
Rounds to thousands of workers start together (the periodic tick), so each step is batched per
turn of the event loop: the rounds that start in a turn are planned in one store transaction,
each planned request is written to its worker's connection at once, and the answers that arrive
in a turn are reconciled in one write transaction, at most ROUND_STEPS_PER_TURN of either in a
turn. Between the steps a round is plain
data passed to callbacks: no task, coroutine or future per worker. With a coroutine per worker's
round (its task, two turn-batch futures, a semaphore, the client's own futures) the controller
spent ~145-160 ms of CPU per 1,000-worker round in the scale benchmark; driven this way, 110-130.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris import chaos
from iris.cluster.controller.core import ControllerCore, HeartbeatOutcome, HeartbeatRound
from iris.cluster.controller.samples import ClusterSamples
from iris.cluster.controller.settings import ControllerSettings
from iris.cluster.controller.store import ControllerStore
from iris.cluster.controller.worker_rpc import WorkerHeartbeatClient
from iris.cluster.task_env import TOKEN
from iris.rpc import cluster_pb2 as pb
from iris.time import now_ms

logger = logging.getLogger(__name__)

# The most rounds planned, or answers reconciled, in one turn of the event loop, so that the loop
# polls its sockets between the steps of a round. With no limit, LaunchJob got ~12 per second
# while 10,000-worker rounds ran back to back, and ~2 while one ran every 5 s; with 32, ~90 and
# ~530, and the round took a third of the time: the workers answer the first requests while the
# later ones are still being planned.
ROUND_STEPS_PER_TURN = 32

Item = TypeVar("Item")
Result = TypeVar("Result")


class TurnBatch(Generic[Item, Result]):
    """Items added during one turn of the event loop, handled together early in the next one,
    at most `most_per_turn` of them per turn.

    `run` gets the items in the order they were added and returns one result, or the exception
    for that item, per item; `then` gets each item with its result. Should `run` raise, every
    item of the batch gets that exception. Items beyond `most_per_turn` wait for the next turn,
    so that the loop polls its sockets in between: a round's thousand answers handled in one
    callback kept every other request (a LaunchJob, a status poll) waiting for all of them."""

    def __init__(
        self,
        run: Callable[[list[Item]], Sequence[Result | Exception]],
        then: Callable[[Item, Result | Exception], None],
        most_per_turn: int,
    ):
        self._run = run
        self._then = then
        self._most = most_per_turn
        self._items: list[Item] = []

    def add(self, item: Item) -> None:
        if not self._items:
            asyncio.get_running_loop().call_soon(self._flush)
        self._items.append(item)

    def _flush(self) -> None:
        items, self._items = self._items[: self._most], self._items[self._most :]
        if self._items:
            asyncio.get_running_loop().call_soon(self._flush)
        try:
            results = self._run(items)
        except Exception as exc:  # noqa: BLE001 - handed to every item's continuation, which reports it
            results = [exc] * len(items)
        for item, result in zip(items, results, strict=True):
            self._then(item, result)


class HeartbeatRounds:
    """Rounds to workers, back to back per worker while the core wants another, at most
    `max_heartbeats_in_flight` RPCs at a time. `task_token`, when auth is on, gives the token each
    task to start carries (its job owner's)."""

    def __init__(
        self,
        core: ControllerCore,
        store: ControllerStore,
        settings: ControllerSettings,
        samples: ClusterSamples,
        task_token: Callable[[str], str] | None = None,
    ):
        self._core = core
        self._store = store
        self._settings = settings
        self._samples = samples
        self._task_token = task_token
        self._client = WorkerHeartbeatClient()
        self._starts: TurnBatch[str, HeartbeatRound | None] = TurnBatch(
            self._plan, self._planned, ROUND_STEPS_PER_TURN
        )
        self._answers: TurnBatch[tuple[HeartbeatRound, pb.HeartbeatResponse], HeartbeatOutcome] = TurnBatch(
            core.rounds_answered, self._reconciled, ROUND_STEPS_PER_TURN
        )
        # Per worker: who waits for its next round to end, and who waits for the round in flight.
        self._waiters: dict[str, list[asyncio.Future[bool]]] = {}
        self._waiting: dict[str, list[asyncio.Future[bool]]] = {}
        self._in_flight = 0
        self._queued: deque[HeartbeatRound] = deque()
        self._stopping = False

    def start(self, worker_id: str) -> None:
        """The core's `start_round`: the worker's rounds begin."""
        if self._stopping:
            self._core.rounds_ended(worker_id)
            return
        self._next_round(worker_id)

    def next_round_ended(self, worker_id: str) -> asyncio.Future[bool]:
        """Resolves once the worker's next round ends (a round already in flight does not count):
        whether it was answered. Ask for the round itself with the core's `request_heartbeat`."""
        future = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(worker_id, []).append(future)
        return future

    def stop(self) -> None:
        """Ends every round as it is, recording nothing more: the controller is stopping."""
        self._stopping = True
        self._client.close()
        for worker_id in {*self._waiting, *self._waiters}:
            self._end(worker_id)

    # ------------------------------------------------------------ one round, step by step

    def _next_round(self, worker_id: str) -> None:
        self._starts.add(worker_id)

    def _plan(self, worker_ids: list[str]) -> list[HeartbeatRound | None]:
        if self._stopping:
            return [None] * len(worker_ids)
        # Who asked before this round is planned is answered by it: the plan takes back their
        # requests for another round (`begin_rounds`). Later askers also asked for another round,
        # and wait for that one.
        for worker_id in worker_ids:
            self._waiting[worker_id] = self._waiters.pop(worker_id, [])
        rounds = self._core.begin_rounds(worker_ids)
        return [rounds[worker_id] for worker_id in worker_ids]

    def _planned(self, worker_id: str, heartbeat: HeartbeatRound | None | Exception) -> None:
        if isinstance(heartbeat, Exception):
            self._failed_unexpectedly(worker_id, heartbeat)
        elif heartbeat is None:
            self._round_over(worker_id, None)
        elif self._in_flight < self._settings.max_heartbeats_in_flight:
            self._send(heartbeat)
        else:
            self._queued.append(heartbeat)

    def _send(self, heartbeat: HeartbeatRound) -> None:
        self._in_flight += 1
        headers = {}
        if heartbeat.plan.callback_token:
            headers["authorization"] = f"Bearer {heartbeat.plan.callback_token}"
        try:
            if heartbeat.request.tasks_to_run:
                chaos.maybe_fail(chaos.CONTROLLER_DISPATCH, _unreachable)
            chaos.maybe_fail(chaos.CONTROLLER_HEARTBEAT, _unreachable)
            self._client.send(
                heartbeat.address,
                self._with_task_tokens(heartbeat.request),
                headers,
                self._settings.heartbeat_rpc_timeout_s,
                lambda result: self._answered(heartbeat, result),
            )
        except Exception as exc:  # noqa: BLE001 - the round fails with it, as a failed RPC does
            # In a later callback: failing here would start the next queued send from inside
            # this one, and a run of failures would nest as deep as the queue is long.
            asyncio.get_running_loop().call_soon(self._answered, heartbeat, exc)

    def _answered(self, heartbeat: HeartbeatRound, result: pb.HeartbeatResponse | Exception) -> None:
        self._in_flight -= 1
        while (
            self._queued and self._in_flight < self._settings.max_heartbeats_in_flight and not self._stopping
        ):
            self._send(self._queued.popleft())
        worker_id = heartbeat.plan.worker_id
        if self._stopping:
            self._end(worker_id)
            return
        if isinstance(result, pb.HeartbeatResponse):
            try:
                # The worker acted on the request; only its answer is lost.
                chaos.maybe_fail(chaos.CONTROLLER_HEARTBEAT_ANSWER, _timed_out)
            except ConnectError as exc:
                result = exc
            else:
                self._answers.add((heartbeat, result))
                return
        logger.warning("heartbeat to worker %s at %s failed: %s", worker_id, heartbeat.address, result)
        try:
            self._core.round_failed(heartbeat, _describe_error(result))
        except Exception as exc:  # noqa: BLE001 - logged; the worker's rounds end
            self._failed_unexpectedly(worker_id, exc)
            return
        self._round_over(worker_id, None)

    def _reconciled(
        self, answer: tuple[HeartbeatRound, pb.HeartbeatResponse], outcome: HeartbeatOutcome | Exception
    ) -> None:
        heartbeat, response = answer
        worker_id = heartbeat.plan.worker_id
        if isinstance(outcome, Exception):
            self._failed_unexpectedly(worker_id, outcome)
            return
        self._samples.record_usage(now_ms(), response)
        self._round_over(worker_id, outcome)

    def _round_over(self, worker_id: str, outcome: HeartbeatOutcome | None) -> None:
        _settle(self._waiting.pop(worker_id, []), outcome is not None)
        if self._core.another_round(worker_id, outcome) and not self._stopping:
            self._next_round(worker_id)
        else:
            self._end(worker_id)

    def _failed_unexpectedly(self, worker_id: str, exc: Exception) -> None:
        logger.error("heartbeat to %s failed unexpectedly", worker_id, exc_info=exc)
        self._end(worker_id)

    def _end(self, worker_id: str) -> None:
        self._core.rounds_ended(worker_id)
        _settle(self._waiting.pop(worker_id, []) + self._waiters.pop(worker_id, []), False)

    def _with_task_tokens(self, request: pb.HeartbeatRequest) -> pb.HeartbeatRequest:
        """The request as sent: each task to start carries its owner's token. Added here, on the
        way out, so that no stored plan or request ever holds one."""
        if self._task_token is None or not request.tasks_to_run:
            return request
        sent = pb.HeartbeatRequest()
        sent.CopyFrom(request)
        for run in sent.tasks_to_run:
            owner = self._store.job_owner(run.job_id)
            if owner:
                run.env[TOKEN] = self._task_token(owner)
        return sent


def _settle(waiting: list[asyncio.Future[bool]], answered: bool) -> None:
    for future in waiting:
        if not future.done():
            future.set_result(answered)


def _unreachable(message: str) -> ConnectError:
    return ConnectError(Code.UNAVAILABLE, message)


def _timed_out(message: str) -> ConnectError:
    return ConnectError(Code.DEADLINE_EXCEEDED, message)


def _describe_error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.split("\n", 1)[0][:300]
