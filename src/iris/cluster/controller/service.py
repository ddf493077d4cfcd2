"""ControllerService: the RPC surface of the controller, a thin layer over Controller and its store.

Every handler turns a bad request into a ConnectError with a message the user can act on; an
unexpected exception becomes INTERNAL with its one-line reason, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.bundle_format import check_bundle_blob
from iris.cluster.auth.policy import refusal_for_job
from iris.cluster.auth.server import caller
from iris.cluster.auth.tokens import Identity, InvalidTokenError, TokenVerifier, check_user_name, parse_role
from iris.cluster.controller import render
from iris.cluster.controller.autoscaler import Autoscaler
from iris.cluster.controller.controller import Controller
from iris.cluster.controller.existing_jobs import JobNameTakenError
from iris.cluster.controller.launch import AcceptedBundles, validate_launch_request
from iris.cluster.controller.store import JobExistsError, NotFoundError
from iris.cluster.controller.store_reads import JOB_ORDER_KEYS, JobFilters, job_order_key, job_order_key_types
from iris.cluster.limits import (
    DEFAULT_INPUT_LIMITS,
    InputLimits,
    check_launch_limits,
    check_request_limits,
    check_worker_id,
    parse_job_page_token,
    position_page_token,
)
from iris.cluster.platform.base import Platform, PlatformError, ResourceNotFoundError
from iris.cluster.types import normalize_job_id
from iris.rpc import cluster_pb2 as pb
from iris.rpc import time_pb2
from iris.storage import StorageError
from iris.time import now_ms

logger = logging.getLogger(__name__)

MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 100
DEFAULT_LOG_LINES = 1000

R = TypeVar("R")


def _rpc(handler: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    @functools.wraps(handler)
    async def wrapper(self, request, ctx):
        try:
            # Sizes first, so that no error below echoes, and no lookup works on, an oversized string.
            check_request_limits(request, self._limits)
            return await handler(self, request, ctx)
        except ConnectError:
            raise
        except NotFoundError as exc:
            raise ConnectError(Code.NOT_FOUND, str(exc)) from None
        except (JobExistsError, JobNameTakenError) as exc:
            raise ConnectError(Code.ALREADY_EXISTS, str(exc)) from None
        except StorageError as exc:
            raise ConnectError(Code.UNAVAILABLE, str(exc)) from None
        except sqlite3.OperationalError as exc:
            # The state database was busy or could not be written: the same call may well succeed again.
            raise ConnectError(Code.UNAVAILABLE, f"the controller could not update its state: {exc}") from None
        except ResourceNotFoundError as exc:
            raise ConnectError(Code.NOT_FOUND, str(exc)) from None
        except PlatformError as exc:
            raise ConnectError(Code.UNAVAILABLE, str(exc)) from None
        except ValueError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, str(exc)) from None
        except Exception as exc:
            logger.exception("%s failed", handler.__name__)
            raise ConnectError(Code.INTERNAL, f"{type(exc).__name__}: {exc}") from None

    return wrapper


def _job_id(text: str) -> str:
    if not text:
        raise ValueError("job_id is required")
    return normalize_job_id(text)


class ControllerServiceImpl:
    def __init__(
        self,
        controller: Controller,
        platform: Platform | None = None,
        limits: InputLimits = DEFAULT_INPUT_LIMITS,
        tokens: TokenVerifier | None = None,
    ):
        self._controller = controller
        self._tokens = tokens
        self._limits = limits
        self._store = controller.store
        self._platform = platform
        self._accepted_bundles = AcceptedBundles()

    def _autoscaler(self) -> Autoscaler:
        if self._controller.autoscaler is None:
            raise ConnectError(
                Code.FAILED_PRECONDITION,
                "this controller has no autoscaler: its cluster config defines no scale_groups",
            )
        return self._controller.autoscaler

    def _check_job_access(self, action: str, job_id: str) -> None:
        """Refuses a caller who does not own the job's tree; a no-op when auth is off."""
        identity = caller()
        if identity is None:
            return
        refusal = refusal_for_job(identity, action, job_id, self._store.job_owner(job_id))
        if refusal:
            raise ConnectError(Code.PERMISSION_DENIED, refusal)

    @_rpc
    async def launch_job(self, request: pb.LaunchJobRequest, ctx) -> pb.LaunchJobResponse:
        # Limits first: no later check may echo, or work in proportion to, an oversized field.
        check_launch_limits(request, self._limits)
        validate_launch_request(request, self._limits.max_bundle_bytes)
        if request.parent_job_id:
            self._check_job_access("add a child job to", normalize_job_id(request.parent_job_id))
        if request.bundle_blob and request.bundle_sha256 not in self._accepted_bundles:
            # Refused here, before it is stored, rather than on every worker that would unpack it.
            limits = self._limits
            await asyncio.to_thread(
                check_bundle_blob, request.bundle_blob, limits.max_bundle_entries, limits.max_bundle_unpacked_bytes
            )
            self._accepted_bundles.add(request.bundle_sha256)
        identity = caller()
        job_id = await self._controller.launch_job(request, identity.user if identity else "")
        return pb.LaunchJobResponse(job_id=job_id)

    @_rpc
    async def get_job_status(self, request: pb.GetJobStatusRequest, ctx) -> pb.GetJobStatusResponse:
        job_id = _job_id(request.job_id)
        if request.wait_ms < 0:
            raise ValueError(f"wait_ms must not be negative, got {request.wait_ms}")
        if request.wait_ms == 0:
            return pb.GetJobStatusResponse(job=self._store.committed_job_status(job_id, request.include_tasks))
        job = await self._controller.job_status_after_change(
            job_id, request.known_state, request.wait_ms, request.include_tasks, request.until_finished
        )
        return pb.GetJobStatusResponse(job=job)

    @_rpc
    async def list_jobs(self, request: pb.ListJobsRequest, ctx) -> pb.ListJobsResponse:
        page_size = request.page_size or DEFAULT_PAGE_SIZE
        if not 0 < page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be between 1 and {MAX_PAGE_SIZE}, got {page_size}")
        if request.order not in JOB_ORDER_KEYS:
            raise ValueError(f"unknown job order {request.order}")
        position = parse_job_page_token(request.page_token, request.order, job_order_key_types(request.order))
        offset = position.offset
        prefix = request.name_prefix
        if prefix and not prefix.startswith("/"):
            prefix = "/" + prefix
        filters = JobFilters(
            name_contains=request.name_contains,
            roots_only=request.roots_only,
            parent_job_id=normalize_job_id(request.parent_job_id) if request.parent_job_id else "",
            order=request.order,
        )
        jobs, total = self._store.list_jobs(request.states, prefix, page_size, offset, filters, position.after)
        # The next page continues after this page's last row: it costs the same however deep it
        # is, and jobs submitted meanwhile do not shift it.
        next_token = (
            position_page_token(request.order, offset + page_size, job_order_key(request.order, jobs[-1]))
            if len(jobs) == page_size and offset + page_size < total
            else ""
        )
        return pb.ListJobsResponse(jobs=jobs, next_page_token=next_token, total_count=total)

    @_rpc
    async def terminate_job(self, request: pb.TerminateJobRequest, ctx) -> pb.TerminateJobResponse:
        job_id = _job_id(request.job_id)
        self._check_job_access("kill", job_id)
        terminated = self._controller.terminate_job(job_id, request.reason or "terminated by user")
        return pb.TerminateJobResponse(terminated_job_ids=terminated)

    @_rpc
    async def delete_job(self, request: pb.DeleteJobRequest, ctx) -> pb.DeleteJobResponse:
        job_id = _job_id(request.job_id)
        self._check_job_access("delete", job_id)
        deleted = self._controller.delete_job(job_id, request.kill_running)
        return pb.DeleteJobResponse(deleted_job_ids=deleted)

    @_rpc
    async def get_task_status(self, request: pb.GetTaskStatusRequest, ctx) -> pb.GetTaskStatusResponse:
        if not request.task_id:
            raise ValueError("task_id is required")
        return pb.GetTaskStatusResponse(task=self._store.task_status(request.task_id))

    @_rpc
    async def list_tasks(self, request: pb.ListTasksRequest, ctx) -> pb.ListTasksResponse:
        return pb.ListTasksResponse(tasks=self._store.list_tasks(_job_id(request.job_id)))

    @_rpc
    async def get_task_logs(self, request: pb.GetTaskLogsRequest, ctx) -> pb.GetTaskLogsResponse:
        if not request.id:
            raise ValueError("id is required: a job id or a task id")
        entity = request.id if request.id.startswith("/") else "/" + request.id
        max_lines = request.max_lines or DEFAULT_LOG_LINES
        if not 0 < max_lines <= 10 * DEFAULT_LOG_LINES:
            raise ValueError(f"max_lines must be between 1 and {10 * DEFAULT_LOG_LINES}")
        if request.HasField("tail_lines") and request.tail_lines < 0:
            raise ValueError("tail_lines must not be negative")
        tail_lines = request.tail_lines if request.HasField("tail_lines") else None
        since_ms = now_ms() - request.since.milliseconds if request.HasField("since") else None
        lines, cursor, finished = self._store.read_logs(entity, request.cursor, max_lines, tail_lines, since_ms)
        return pb.GetTaskLogsResponse(lines=lines, next_cursor=cursor, finished=finished)

    @_rpc
    async def register(self, request: pb.RegisterRequest, ctx) -> pb.RegisterResponse:
        check_worker_id(request.worker_id)
        if not request.address:
            raise ValueError("address is required")
        self._controller.register_worker(request.worker_id, request.address, request.metadata, request.callback_token)
        interval = time_pb2.Duration(milliseconds=int(self._controller.settings.heartbeat_interval_s * 1000))
        return pb.RegisterResponse(worker_id=request.worker_id, heartbeat_interval=interval)

    @_rpc
    async def list_workers(self, request: pb.ListWorkersRequest, ctx) -> pb.ListWorkersResponse:
        return pb.ListWorkersResponse(workers=self._store.list_workers())

    @_rpc
    async def notify_worker_event(
        self, request: pb.NotifyWorkerEventRequest, ctx
    ) -> pb.NotifyWorkerEventResponse:
        self._controller.request_heartbeat(request.worker_id)
        return pb.NotifyWorkerEventResponse()

    @_rpc
    async def register_endpoint(self, request: pb.RegisterEndpointRequest, ctx) -> pb.RegisterEndpointResponse:
        if not request.name or not request.address:
            raise ValueError("name and address are required")
        job_id = _job_id(request.job_id)
        # Endpoints live in their job's namespace so two jobs never collide on a name.
        name = request.name if request.name.startswith(job_id + "/") else f"{job_id}/{request.name.lstrip('/')}"
        endpoint_id = f"ep-{secrets.token_hex(6)}"
        self._store.register_endpoint(endpoint_id, name, request.address, job_id, dict(request.metadata), now_ms())
        return pb.RegisterEndpointResponse(endpoint_id=endpoint_id)

    @_rpc
    async def unregister_endpoint(
        self, request: pb.UnregisterEndpointRequest, ctx
    ) -> pb.UnregisterEndpointResponse:
        self._store.unregister_endpoint(request.endpoint_id)
        return pb.UnregisterEndpointResponse()

    @_rpc
    async def list_endpoints(self, request: pb.ListEndpointsRequest, ctx) -> pb.ListEndpointsResponse:
        prefix = request.prefix
        if prefix and not prefix.startswith("/"):
            prefix = "/" + prefix
        return pb.ListEndpointsResponse(endpoints=self._store.list_endpoints(prefix))

    @_rpc
    async def get_autoscaler_status(
        self, request: pb.GetAutoscalerStatusRequest, ctx
    ) -> pb.GetAutoscalerStatusResponse:
        if self._controller.autoscaler is None:
            return pb.GetAutoscalerStatusResponse(enabled=False)
        return await asyncio.to_thread(self._controller.autoscaler.status)

    @_rpc
    async def list_slices(self, request: pb.ListSlicesRequest, ctx) -> pb.ListSlicesResponse:
        rows = self._store.slices(include_deleted=request.include_deleted)
        return pb.ListSlicesResponse(
            slices=[render.slice_info(r) for r in rows if not request.scale_group or r["scale_group"] == request.scale_group]
        )

    @_rpc
    async def get_slice(self, request: pb.GetSliceRequest, ctx) -> pb.SliceInfo:
        for row in self._store.slices(include_deleted=True):
            if row["slice_id"] == request.slice_id:
                return render.slice_info(row, self._store.slice_history(request.slice_id))
        raise NotFoundError(f"slice {request.slice_id} not found")

    @_rpc
    async def create_slice(self, request: pb.CreateSliceRequest, ctx) -> pb.CreateSliceResponse:
        autoscaler = self._autoscaler()
        slice_id = await asyncio.to_thread(autoscaler.create_slice, request.scale_group)
        row = next(r for r in self._store.slices() if r["slice_id"] == slice_id)
        return pb.CreateSliceResponse(slice=render.slice_info(row))

    @_rpc
    async def terminate_slice(self, request: pb.TerminateSliceRequest, ctx) -> pb.TerminateSliceResponse:
        autoscaler = self._autoscaler()
        if request.all:
            ended = await asyncio.to_thread(autoscaler.terminate_all)
        else:
            if not request.slice_id:
                raise ValueError("give a slice_id, or all=true")
            await asyncio.to_thread(autoscaler.terminate_slice, request.slice_id)
            ended = [request.slice_id]
        return pb.TerminateSliceResponse(terminated_slice_ids=ended)

    @_rpc
    async def get_worker_logs(self, request: pb.GetWorkerLogsRequest, ctx) -> pb.GetWorkerLogsResponse:
        if self._platform is None:
            raise ConnectError(Code.FAILED_PRECONDITION, "this controller manages no platform, so it has no worker logs")
        tail = request.tail_lines or 200
        logs = await asyncio.to_thread(self._platform.worker_logs, request.worker_id, tail)
        return pb.GetWorkerLogsResponse(logs=logs)

    @_rpc
    async def get_time_series(self, request: pb.GetTimeSeriesRequest, ctx) -> pb.GetTimeSeriesResponse:
        return self._controller.samples.series(request.task_id)

    @_rpc
    async def get_job_spec(self, request: pb.GetJobSpecRequest, ctx) -> pb.LaunchJobRequest:
        spec = self._store.job_request(_job_id(request.job_id))
        spec.ClearField("bundle_blob")
        if spec.entrypoint.HasField("callable"):
            spec.entrypoint.callable.ClearField("pickled")
        return spec

    def _session(self, identity: Identity, ttl_s: int | None = None) -> pb.SessionToken:
        assert self._tokens is not None
        token, expires_at_s = self._tokens.issue(identity, int(time.time()), ttl_s)
        return pb.SessionToken(
            token=token, user=identity.user, role=identity.role.value, expires_at_ms=expires_at_s * 1000
        )

    def _require_auth(self, what: str) -> TokenVerifier:
        if self._tokens is None:
            raise ConnectError(
                Code.FAILED_PRECONDITION, f"{what} needs auth, which this cluster has off (auth.mode is none)"
            )
        return self._tokens

    @_rpc
    async def login(self, request: pb.LoginRequest, ctx) -> pb.SessionToken:
        tokens = self._require_auth("logging in")
        try:
            identity = tokens.identify_for_login(request.token, int(time.time()))
        except InvalidTokenError as exc:
            raise ConnectError(Code.UNAUTHENTICATED, f"cannot log in: {exc}") from None
        return self._session(identity)

    @_rpc
    async def create_token(self, request: pb.CreateTokenRequest, ctx) -> pb.SessionToken:
        self._require_auth("creating tokens")
        check_user_name(request.user)
        ttl_ms = request.ttl.milliseconds
        if ttl_ms < 0:
            raise ValueError("ttl must be positive")
        return self._session(Identity(request.user, parse_role(request.role)), ttl_ms // 1000 or None)
