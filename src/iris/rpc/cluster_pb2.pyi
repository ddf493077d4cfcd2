from iris.rpc import time_pb2 as _time_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_PENDING: _ClassVar[JobState]
    JOB_STATE_BUILDING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_KILLED: _ClassVar[JobState]
    JOB_STATE_WORKER_FAILED: _ClassVar[JobState]
    JOB_STATE_UNSCHEDULABLE: _ClassVar[JobState]

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_PENDING: _ClassVar[TaskState]
    TASK_STATE_ASSIGNED: _ClassVar[TaskState]
    TASK_STATE_BUILDING: _ClassVar[TaskState]
    TASK_STATE_RUNNING: _ClassVar[TaskState]
    TASK_STATE_SUCCEEDED: _ClassVar[TaskState]
    TASK_STATE_FAILED: _ClassVar[TaskState]
    TASK_STATE_KILLED: _ClassVar[TaskState]
    TASK_STATE_WORKER_FAILED: _ClassVar[TaskState]
    TASK_STATE_UNSCHEDULABLE: _ClassVar[TaskState]

class WorkerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKER_STATE_UNSPECIFIED: _ClassVar[WorkerState]
    WORKER_STATE_HEALTHY: _ClassVar[WorkerState]
    WORKER_STATE_UNHEALTHY: _ClassVar[WorkerState]
    WORKER_STATE_FAILED: _ClassVar[WorkerState]
    WORKER_STATE_STOPPED: _ClassVar[WorkerState]
    WORKER_STATE_TERMINATED: _ClassVar[WorkerState]

class ConstraintOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSTRAINT_OP_UNSPECIFIED: _ClassVar[ConstraintOp]
    CONSTRAINT_OP_EQ: _ClassVar[ConstraintOp]
    CONSTRAINT_OP_NE: _ClassVar[ConstraintOp]
    CONSTRAINT_OP_EXISTS: _ClassVar[ConstraintOp]
    CONSTRAINT_OP_NOT_EXISTS: _ClassVar[ConstraintOp]
    CONSTRAINT_OP_GT: _ClassVar[ConstraintOp]
    CONSTRAINT_OP_GE: _ClassVar[ConstraintOp]
    CONSTRAINT_OP_LT: _ClassVar[ConstraintOp]
    CONSTRAINT_OP_LE: _ClassVar[ConstraintOp]
    CONSTRAINT_OP_IN: _ClassVar[ConstraintOp]

class ExistingJobPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXISTING_JOB_POLICY_UNSPECIFIED: _ClassVar[ExistingJobPolicy]
    EXISTING_JOB_POLICY_ERROR: _ClassVar[ExistingJobPolicy]
    EXISTING_JOB_POLICY_KEEP: _ClassVar[ExistingJobPolicy]
    EXISTING_JOB_POLICY_RECREATE: _ClassVar[ExistingJobPolicy]

class JobOrder(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_ORDER_NEWEST: _ClassVar[JobOrder]
    JOB_ORDER_OLDEST: _ClassVar[JobOrder]
    JOB_ORDER_NAME: _ClassVar[JobOrder]
    JOB_ORDER_NAME_DESC: _ClassVar[JobOrder]
    JOB_ORDER_STATE: _ClassVar[JobOrder]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_PENDING: JobState
JOB_STATE_BUILDING: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_KILLED: JobState
JOB_STATE_WORKER_FAILED: JobState
JOB_STATE_UNSCHEDULABLE: JobState
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_PENDING: TaskState
TASK_STATE_ASSIGNED: TaskState
TASK_STATE_BUILDING: TaskState
TASK_STATE_RUNNING: TaskState
TASK_STATE_SUCCEEDED: TaskState
TASK_STATE_FAILED: TaskState
TASK_STATE_KILLED: TaskState
TASK_STATE_WORKER_FAILED: TaskState
TASK_STATE_UNSCHEDULABLE: TaskState
WORKER_STATE_UNSPECIFIED: WorkerState
WORKER_STATE_HEALTHY: WorkerState
WORKER_STATE_UNHEALTHY: WorkerState
WORKER_STATE_FAILED: WorkerState
WORKER_STATE_STOPPED: WorkerState
WORKER_STATE_TERMINATED: WorkerState
CONSTRAINT_OP_UNSPECIFIED: ConstraintOp
CONSTRAINT_OP_EQ: ConstraintOp
CONSTRAINT_OP_NE: ConstraintOp
CONSTRAINT_OP_EXISTS: ConstraintOp
CONSTRAINT_OP_NOT_EXISTS: ConstraintOp
CONSTRAINT_OP_GT: ConstraintOp
CONSTRAINT_OP_GE: ConstraintOp
CONSTRAINT_OP_LT: ConstraintOp
CONSTRAINT_OP_LE: ConstraintOp
CONSTRAINT_OP_IN: ConstraintOp
EXISTING_JOB_POLICY_UNSPECIFIED: ExistingJobPolicy
EXISTING_JOB_POLICY_ERROR: ExistingJobPolicy
EXISTING_JOB_POLICY_KEEP: ExistingJobPolicy
EXISTING_JOB_POLICY_RECREATE: ExistingJobPolicy
JOB_ORDER_NEWEST: JobOrder
JOB_ORDER_OLDEST: JobOrder
JOB_ORDER_NAME: JobOrder
JOB_ORDER_NAME_DESC: JobOrder
JOB_ORDER_STATE: JobOrder

class CommandEntrypoint(_message.Message):
    __slots__ = ("argv",)
    ARGV_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, argv: _Optional[_Iterable[str]] = ...) -> None: ...

class CallableEntrypoint(_message.Message):
    __slots__ = ("pickled",)
    PICKLED_FIELD_NUMBER: _ClassVar[int]
    pickled: bytes
    def __init__(self, pickled: _Optional[bytes] = ...) -> None: ...

class Entrypoint(_message.Message):
    __slots__ = ("command", "callable")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CALLABLE_FIELD_NUMBER: _ClassVar[int]
    command: CommandEntrypoint
    callable: CallableEntrypoint
    def __init__(self, command: _Optional[_Union[CommandEntrypoint, _Mapping]] = ..., callable: _Optional[_Union[CallableEntrypoint, _Mapping]] = ...) -> None: ...

class GpuDevice(_message.Message):
    __slots__ = ("variant", "count")
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    variant: str
    count: int
    def __init__(self, variant: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class TpuDevice(_message.Message):
    __slots__ = ("variant", "count")
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    variant: str
    count: int
    def __init__(self, variant: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class DeviceConfig(_message.Message):
    __slots__ = ("gpu", "tpu")
    GPU_FIELD_NUMBER: _ClassVar[int]
    TPU_FIELD_NUMBER: _ClassVar[int]
    gpu: GpuDevice
    tpu: TpuDevice
    def __init__(self, gpu: _Optional[_Union[GpuDevice, _Mapping]] = ..., tpu: _Optional[_Union[TpuDevice, _Mapping]] = ...) -> None: ...

class ResourceSpec(_message.Message):
    __slots__ = ("cpu_millicores", "memory_bytes", "disk_bytes", "device")
    CPU_MILLICORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    cpu_millicores: int
    memory_bytes: int
    disk_bytes: int
    device: DeviceConfig
    def __init__(self, cpu_millicores: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., disk_bytes: _Optional[int] = ..., device: _Optional[_Union[DeviceConfig, _Mapping]] = ...) -> None: ...

class EnvironmentConfig(_message.Message):
    __slots__ = ("env_vars", "pip_packages", "setup_commands")
    class EnvVarsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENV_VARS_FIELD_NUMBER: _ClassVar[int]
    PIP_PACKAGES_FIELD_NUMBER: _ClassVar[int]
    SETUP_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    env_vars: _containers.ScalarMap[str, str]
    pip_packages: _containers.RepeatedScalarFieldContainer[str]
    setup_commands: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, env_vars: _Optional[_Mapping[str, str]] = ..., pip_packages: _Optional[_Iterable[str]] = ..., setup_commands: _Optional[_Iterable[str]] = ...) -> None: ...

class AttributeValue(_message.Message):
    __slots__ = ("string_value", "int_value", "float_value")
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    string_value: str
    int_value: int
    float_value: float
    def __init__(self, string_value: _Optional[str] = ..., int_value: _Optional[int] = ..., float_value: _Optional[float] = ...) -> None: ...

class Constraint(_message.Message):
    __slots__ = ("key", "op", "value", "values")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    key: str
    op: ConstraintOp
    value: AttributeValue
    values: _containers.RepeatedCompositeFieldContainer[AttributeValue]
    def __init__(self, key: _Optional[str] = ..., op: _Optional[_Union[ConstraintOp, str]] = ..., value: _Optional[_Union[AttributeValue, _Mapping]] = ..., values: _Optional[_Iterable[_Union[AttributeValue, _Mapping]]] = ...) -> None: ...

class CoschedulingConfig(_message.Message):
    __slots__ = ("group_by",)
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    group_by: str
    def __init__(self, group_by: _Optional[str] = ...) -> None: ...

class LaunchJobRequest(_message.Message):
    __slots__ = ("name", "entrypoint", "resources", "environment", "bundle_blob", "bundle_sha256", "replicas", "max_retries_failure", "max_retries_preemption", "max_task_failures", "timeout", "scheduling_timeout", "constraints", "coscheduling", "ports", "priority", "parent_job_id", "bundle_uri", "existing_job_policy", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_BLOB_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_SHA256_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FAILURE_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_PREEMPTION_FIELD_NUMBER: _ClassVar[int]
    MAX_TASK_FAILURES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    COSCHEDULING_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_URI_FIELD_NUMBER: _ClassVar[int]
    EXISTING_JOB_POLICY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    entrypoint: Entrypoint
    resources: ResourceSpec
    environment: EnvironmentConfig
    bundle_blob: bytes
    bundle_sha256: str
    replicas: int
    max_retries_failure: int
    max_retries_preemption: int
    max_task_failures: int
    timeout: _time_pb2.Duration
    scheduling_timeout: _time_pb2.Duration
    constraints: _containers.RepeatedCompositeFieldContainer[Constraint]
    coscheduling: CoschedulingConfig
    ports: _containers.RepeatedScalarFieldContainer[str]
    priority: int
    parent_job_id: str
    bundle_uri: str
    existing_job_policy: ExistingJobPolicy
    request_id: str
    def __init__(self, name: _Optional[str] = ..., entrypoint: _Optional[_Union[Entrypoint, _Mapping]] = ..., resources: _Optional[_Union[ResourceSpec, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentConfig, _Mapping]] = ..., bundle_blob: _Optional[bytes] = ..., bundle_sha256: _Optional[str] = ..., replicas: _Optional[int] = ..., max_retries_failure: _Optional[int] = ..., max_retries_preemption: _Optional[int] = ..., max_task_failures: _Optional[int] = ..., timeout: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., scheduling_timeout: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., constraints: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., coscheduling: _Optional[_Union[CoschedulingConfig, _Mapping]] = ..., ports: _Optional[_Iterable[str]] = ..., priority: _Optional[int] = ..., parent_job_id: _Optional[str] = ..., bundle_uri: _Optional[str] = ..., existing_job_policy: _Optional[_Union[ExistingJobPolicy, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ("job_id", "kill_running")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KILL_RUNNING_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    kill_running: bool
    def __init__(self, job_id: _Optional[str] = ..., kill_running: _Optional[bool] = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = ("deleted_job_ids",)
    DELETED_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    deleted_job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, deleted_job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class LaunchJobResponse(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class StateTransition(_message.Message):
    __slots__ = ("from_state", "to_state", "reason", "at")
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    from_state: str
    to_state: str
    reason: str
    at: _time_pb2.Timestamp
    def __init__(self, from_state: _Optional[str] = ..., to_state: _Optional[str] = ..., reason: _Optional[str] = ..., at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TaskAttempt(_message.Message):
    __slots__ = ("attempt_id", "worker_id", "state", "exit_code", "error", "started_at", "finished_at")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    attempt_id: int
    worker_id: str
    state: TaskState
    exit_code: int
    error: str
    started_at: _time_pb2.Timestamp
    finished_at: _time_pb2.Timestamp
    def __init__(self, attempt_id: _Optional[int] = ..., worker_id: _Optional[str] = ..., state: _Optional[_Union[TaskState, str]] = ..., exit_code: _Optional[int] = ..., error: _Optional[str] = ..., started_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TaskStatus(_message.Message):
    __slots__ = ("task_id", "job_id", "task_index", "state", "worker_id", "worker_address", "current_attempt_id", "exit_code", "error", "started_at", "finished_at", "pending_reason", "attempts", "ports", "failure_count", "preemption_count", "result", "history")
    class PortsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    PENDING_REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PREEMPTION_COUNT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    job_id: str
    task_index: int
    state: TaskState
    worker_id: str
    worker_address: str
    current_attempt_id: int
    exit_code: int
    error: str
    started_at: _time_pb2.Timestamp
    finished_at: _time_pb2.Timestamp
    pending_reason: str
    attempts: _containers.RepeatedCompositeFieldContainer[TaskAttempt]
    ports: _containers.ScalarMap[str, int]
    failure_count: int
    preemption_count: int
    result: bytes
    history: _containers.RepeatedCompositeFieldContainer[StateTransition]
    def __init__(self, task_id: _Optional[str] = ..., job_id: _Optional[str] = ..., task_index: _Optional[int] = ..., state: _Optional[_Union[TaskState, str]] = ..., worker_id: _Optional[str] = ..., worker_address: _Optional[str] = ..., current_attempt_id: _Optional[int] = ..., exit_code: _Optional[int] = ..., error: _Optional[str] = ..., started_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., pending_reason: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[TaskAttempt, _Mapping]]] = ..., ports: _Optional[_Mapping[str, int]] = ..., failure_count: _Optional[int] = ..., preemption_count: _Optional[int] = ..., result: _Optional[bytes] = ..., history: _Optional[_Iterable[_Union[StateTransition, _Mapping]]] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job_id", "name", "state", "error", "exit_code", "submitted_at", "started_at", "finished_at", "pending_reason", "num_tasks", "task_state_counts", "tasks", "resources", "parent_job_id", "failure_count", "preemption_count", "history", "num_children")
    class TaskStateCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    PENDING_REASON_FIELD_NUMBER: _ClassVar[int]
    NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
    TASK_STATE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FAILURE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PREEMPTION_COUNT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    NUM_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    state: JobState
    error: str
    exit_code: int
    submitted_at: _time_pb2.Timestamp
    started_at: _time_pb2.Timestamp
    finished_at: _time_pb2.Timestamp
    pending_reason: str
    num_tasks: int
    task_state_counts: _containers.ScalarMap[str, int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    resources: ResourceSpec
    parent_job_id: str
    failure_count: int
    preemption_count: int
    history: _containers.RepeatedCompositeFieldContainer[StateTransition]
    num_children: int
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., error: _Optional[str] = ..., exit_code: _Optional[int] = ..., submitted_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., pending_reason: _Optional[str] = ..., num_tasks: _Optional[int] = ..., task_state_counts: _Optional[_Mapping[str, int]] = ..., tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ..., resources: _Optional[_Union[ResourceSpec, _Mapping]] = ..., parent_job_id: _Optional[str] = ..., failure_count: _Optional[int] = ..., preemption_count: _Optional[int] = ..., history: _Optional[_Iterable[_Union[StateTransition, _Mapping]]] = ..., num_children: _Optional[int] = ...) -> None: ...

class GetJobStatusRequest(_message.Message):
    __slots__ = ("job_id", "include_tasks", "wait_ms", "known_state", "until_finished")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TASKS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    KNOWN_STATE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FINISHED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    include_tasks: bool
    wait_ms: int
    known_state: JobState
    until_finished: bool
    def __init__(self, job_id: _Optional[str] = ..., include_tasks: _Optional[bool] = ..., wait_ms: _Optional[int] = ..., known_state: _Optional[_Union[JobState, str]] = ..., until_finished: _Optional[bool] = ...) -> None: ...

class GetJobStatusResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ...) -> None: ...

class GetJobSpecRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("states", "name_prefix", "page_size", "page_token", "name_contains", "roots_only", "parent_job_id", "order")
    STATES_FIELD_NUMBER: _ClassVar[int]
    NAME_PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NAME_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    ROOTS_ONLY_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[JobState]
    name_prefix: str
    page_size: int
    page_token: str
    name_contains: str
    roots_only: bool
    parent_job_id: str
    order: JobOrder
    def __init__(self, states: _Optional[_Iterable[_Union[JobState, str]]] = ..., name_prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., name_contains: _Optional[str] = ..., roots_only: _Optional[bool] = ..., parent_job_id: _Optional[str] = ..., order: _Optional[_Union[JobOrder, str]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token", "total_count")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    next_page_token: str
    total_count: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total_count: _Optional[int] = ...) -> None: ...

class TerminateJobRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class TerminateJobResponse(_message.Message):
    __slots__ = ("terminated_job_ids",)
    TERMINATED_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    terminated_job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, terminated_job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GetTaskStatusRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class GetTaskStatusResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: TaskStatus
    def __init__(self, task: _Optional[_Union[TaskStatus, _Mapping]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("timestamp_ms", "source", "data")
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    timestamp_ms: int
    source: str
    data: str
    def __init__(self, timestamp_ms: _Optional[int] = ..., source: _Optional[str] = ..., data: _Optional[str] = ...) -> None: ...

class TaskLogLine(_message.Message):
    __slots__ = ("task_id", "attempt_id", "line", "cursor")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt_id: int
    line: LogLine
    cursor: int
    def __init__(self, task_id: _Optional[str] = ..., attempt_id: _Optional[int] = ..., line: _Optional[_Union[LogLine, _Mapping]] = ..., cursor: _Optional[int] = ...) -> None: ...

class GetTaskLogsRequest(_message.Message):
    __slots__ = ("id", "cursor", "max_lines", "tail_lines", "since")
    ID_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    MAX_LINES_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    id: str
    cursor: int
    max_lines: int
    tail_lines: int
    since: _time_pb2.Duration
    def __init__(self, id: _Optional[str] = ..., cursor: _Optional[int] = ..., max_lines: _Optional[int] = ..., tail_lines: _Optional[int] = ..., since: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ...) -> None: ...

class GetTaskLogsResponse(_message.Message):
    __slots__ = ("lines", "next_cursor", "finished")
    LINES_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[TaskLogLine]
    next_cursor: int
    finished: bool
    def __init__(self, lines: _Optional[_Iterable[_Union[TaskLogLine, _Mapping]]] = ..., next_cursor: _Optional[int] = ..., finished: _Optional[bool] = ...) -> None: ...

class WorkerMetadata(_message.Message):
    __slots__ = ("hostname", "ip_address", "cpu_millicores", "memory_bytes", "disk_bytes", "device", "attributes", "runtime", "iris_version")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttributeValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttributeValue, _Mapping]] = ...) -> None: ...
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    IP_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLICORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    IRIS_VERSION_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    ip_address: str
    cpu_millicores: int
    memory_bytes: int
    disk_bytes: int
    device: DeviceConfig
    attributes: _containers.MessageMap[str, AttributeValue]
    runtime: str
    iris_version: str
    def __init__(self, hostname: _Optional[str] = ..., ip_address: _Optional[str] = ..., cpu_millicores: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., disk_bytes: _Optional[int] = ..., device: _Optional[_Union[DeviceConfig, _Mapping]] = ..., attributes: _Optional[_Mapping[str, AttributeValue]] = ..., runtime: _Optional[str] = ..., iris_version: _Optional[str] = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("worker_id", "address", "metadata", "state", "registered_at", "last_heartbeat", "running_task_ids", "committed", "error")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    address: str
    metadata: WorkerMetadata
    state: WorkerState
    registered_at: _time_pb2.Timestamp
    last_heartbeat: _time_pb2.Timestamp
    running_task_ids: _containers.RepeatedScalarFieldContainer[str]
    committed: ResourceSpec
    error: str
    def __init__(self, worker_id: _Optional[str] = ..., address: _Optional[str] = ..., metadata: _Optional[_Union[WorkerMetadata, _Mapping]] = ..., state: _Optional[_Union[WorkerState, str]] = ..., registered_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., last_heartbeat: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., running_task_ids: _Optional[_Iterable[str]] = ..., committed: _Optional[_Union[ResourceSpec, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("worker_id", "address", "metadata", "callback_token")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_TOKEN_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    address: str
    metadata: WorkerMetadata
    callback_token: str
    def __init__(self, worker_id: _Optional[str] = ..., address: _Optional[str] = ..., metadata: _Optional[_Union[WorkerMetadata, _Mapping]] = ..., callback_token: _Optional[str] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("worker_id", "heartbeat_interval")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    heartbeat_interval: _time_pb2.Duration
    def __init__(self, worker_id: _Optional[str] = ..., heartbeat_interval: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers",)
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ...) -> None: ...

class NotifyWorkerEventRequest(_message.Message):
    __slots__ = ("worker_id",)
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ...) -> None: ...

class NotifyWorkerEventResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ("endpoint_id", "name", "address", "job_id", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    endpoint_id: str
    name: str
    address: str
    job_id: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, endpoint_id: _Optional[str] = ..., name: _Optional[str] = ..., address: _Optional[str] = ..., job_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RegisterEndpointRequest(_message.Message):
    __slots__ = ("name", "address", "job_id", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    job_id: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., job_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RegisterEndpointResponse(_message.Message):
    __slots__ = ("endpoint_id",)
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    endpoint_id: str
    def __init__(self, endpoint_id: _Optional[str] = ...) -> None: ...

class UnregisterEndpointRequest(_message.Message):
    __slots__ = ("endpoint_id",)
    ENDPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    endpoint_id: str
    def __init__(self, endpoint_id: _Optional[str] = ...) -> None: ...

class UnregisterEndpointResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListEndpointsRequest(_message.Message):
    __slots__ = ("prefix",)
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    def __init__(self, prefix: _Optional[str] = ...) -> None: ...

class ListEndpointsResponse(_message.Message):
    __slots__ = ("endpoints",)
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    endpoints: _containers.RepeatedCompositeFieldContainer[Endpoint]
    def __init__(self, endpoints: _Optional[_Iterable[_Union[Endpoint, _Mapping]]] = ...) -> None: ...

class SliceInfo(_message.Message):
    __slots__ = ("slice_id", "scale_group", "zone", "state", "created_at", "updated_at", "error", "worker_ids", "labels", "idle", "history")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SLICE_ID_FIELD_NUMBER: _ClassVar[int]
    SCALE_GROUP_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WORKER_IDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IDLE_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    slice_id: str
    scale_group: str
    zone: str
    state: str
    created_at: _time_pb2.Timestamp
    updated_at: _time_pb2.Timestamp
    error: str
    worker_ids: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.ScalarMap[str, str]
    idle: bool
    history: _containers.RepeatedCompositeFieldContainer[StateTransition]
    def __init__(self, slice_id: _Optional[str] = ..., scale_group: _Optional[str] = ..., zone: _Optional[str] = ..., state: _Optional[str] = ..., created_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., error: _Optional[str] = ..., worker_ids: _Optional[_Iterable[str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., idle: _Optional[bool] = ..., history: _Optional[_Iterable[_Union[StateTransition, _Mapping]]] = ...) -> None: ...

class ScaleGroupStatus(_message.Message):
    __slots__ = ("name", "state", "min_slices", "max_slices", "priority", "slices", "demand", "unmet_reason", "blocked_zones", "backoff_until", "consecutive_failures", "detail")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MIN_SLICES_FIELD_NUMBER: _ClassVar[int]
    MAX_SLICES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SLICES_FIELD_NUMBER: _ClassVar[int]
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    UNMET_REASON_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_ZONES_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_UNTIL_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: str
    min_slices: int
    max_slices: int
    priority: int
    slices: _containers.RepeatedCompositeFieldContainer[SliceInfo]
    demand: int
    unmet_reason: str
    blocked_zones: _containers.RepeatedScalarFieldContainer[str]
    backoff_until: _time_pb2.Timestamp
    consecutive_failures: int
    detail: str
    def __init__(self, name: _Optional[str] = ..., state: _Optional[str] = ..., min_slices: _Optional[int] = ..., max_slices: _Optional[int] = ..., priority: _Optional[int] = ..., slices: _Optional[_Iterable[_Union[SliceInfo, _Mapping]]] = ..., demand: _Optional[int] = ..., unmet_reason: _Optional[str] = ..., blocked_zones: _Optional[_Iterable[str]] = ..., backoff_until: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., consecutive_failures: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class AutoscalerAction(_message.Message):
    __slots__ = ("at", "scale_group", "action", "slice_id", "zone", "reason")
    AT_FIELD_NUMBER: _ClassVar[int]
    SCALE_GROUP_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SLICE_ID_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    at: _time_pb2.Timestamp
    scale_group: str
    action: str
    slice_id: str
    zone: str
    reason: str
    def __init__(self, at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., scale_group: _Optional[str] = ..., action: _Optional[str] = ..., slice_id: _Optional[str] = ..., zone: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class GetAutoscalerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAutoscalerStatusResponse(_message.Message):
    __slots__ = ("enabled", "groups", "recent_actions", "unroutable")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    RECENT_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    UNROUTABLE_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    groups: _containers.RepeatedCompositeFieldContainer[ScaleGroupStatus]
    recent_actions: _containers.RepeatedCompositeFieldContainer[AutoscalerAction]
    unroutable: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, enabled: _Optional[bool] = ..., groups: _Optional[_Iterable[_Union[ScaleGroupStatus, _Mapping]]] = ..., recent_actions: _Optional[_Iterable[_Union[AutoscalerAction, _Mapping]]] = ..., unroutable: _Optional[_Iterable[str]] = ...) -> None: ...

class ListSlicesRequest(_message.Message):
    __slots__ = ("scale_group", "include_deleted")
    SCALE_GROUP_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DELETED_FIELD_NUMBER: _ClassVar[int]
    scale_group: str
    include_deleted: bool
    def __init__(self, scale_group: _Optional[str] = ..., include_deleted: _Optional[bool] = ...) -> None: ...

class ListSlicesResponse(_message.Message):
    __slots__ = ("slices",)
    SLICES_FIELD_NUMBER: _ClassVar[int]
    slices: _containers.RepeatedCompositeFieldContainer[SliceInfo]
    def __init__(self, slices: _Optional[_Iterable[_Union[SliceInfo, _Mapping]]] = ...) -> None: ...

class GetSliceRequest(_message.Message):
    __slots__ = ("slice_id",)
    SLICE_ID_FIELD_NUMBER: _ClassVar[int]
    slice_id: str
    def __init__(self, slice_id: _Optional[str] = ...) -> None: ...

class CreateSliceRequest(_message.Message):
    __slots__ = ("scale_group",)
    SCALE_GROUP_FIELD_NUMBER: _ClassVar[int]
    scale_group: str
    def __init__(self, scale_group: _Optional[str] = ...) -> None: ...

class CreateSliceResponse(_message.Message):
    __slots__ = ("slice",)
    SLICE_FIELD_NUMBER: _ClassVar[int]
    slice: SliceInfo
    def __init__(self, slice: _Optional[_Union[SliceInfo, _Mapping]] = ...) -> None: ...

class TerminateSliceRequest(_message.Message):
    __slots__ = ("slice_id", "all")
    SLICE_ID_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    slice_id: str
    all: bool
    def __init__(self, slice_id: _Optional[str] = ..., all: _Optional[bool] = ...) -> None: ...

class TerminateSliceResponse(_message.Message):
    __slots__ = ("terminated_slice_ids",)
    TERMINATED_SLICE_IDS_FIELD_NUMBER: _ClassVar[int]
    terminated_slice_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, terminated_slice_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GetWorkerLogsRequest(_message.Message):
    __slots__ = ("worker_id", "tail_lines")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    tail_lines: int
    def __init__(self, worker_id: _Optional[str] = ..., tail_lines: _Optional[int] = ...) -> None: ...

class GetWorkerLogsResponse(_message.Message):
    __slots__ = ("logs",)
    LOGS_FIELD_NUMBER: _ClassVar[int]
    logs: str
    def __init__(self, logs: _Optional[str] = ...) -> None: ...

class JobStateSample(_message.Message):
    __slots__ = ("at_ms", "counts")
    class CountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    counts: _containers.ScalarMap[str, int]
    def __init__(self, at_ms: _Optional[int] = ..., counts: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ScaleGroupSample(_message.Message):
    __slots__ = ("at_ms", "scale_group", "ready_slices", "booting_slices", "demand", "max_slices")
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    SCALE_GROUP_FIELD_NUMBER: _ClassVar[int]
    READY_SLICES_FIELD_NUMBER: _ClassVar[int]
    BOOTING_SLICES_FIELD_NUMBER: _ClassVar[int]
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    MAX_SLICES_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    scale_group: str
    ready_slices: int
    booting_slices: int
    demand: int
    max_slices: int
    def __init__(self, at_ms: _Optional[int] = ..., scale_group: _Optional[str] = ..., ready_slices: _Optional[int] = ..., booting_slices: _Optional[int] = ..., demand: _Optional[int] = ..., max_slices: _Optional[int] = ...) -> None: ...

class TaskUsageSample(_message.Message):
    __slots__ = ("at_ms", "attempt_id", "cpu_percent", "memory_bytes")
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    attempt_id: int
    cpu_percent: float
    memory_bytes: int
    def __init__(self, at_ms: _Optional[int] = ..., attempt_id: _Optional[int] = ..., cpu_percent: _Optional[float] = ..., memory_bytes: _Optional[int] = ...) -> None: ...

class GetTimeSeriesRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class GetTimeSeriesResponse(_message.Message):
    __slots__ = ("interval_ms", "job_states", "scale_groups", "task_usage")
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    JOB_STATES_FIELD_NUMBER: _ClassVar[int]
    SCALE_GROUPS_FIELD_NUMBER: _ClassVar[int]
    TASK_USAGE_FIELD_NUMBER: _ClassVar[int]
    interval_ms: int
    job_states: _containers.RepeatedCompositeFieldContainer[JobStateSample]
    scale_groups: _containers.RepeatedCompositeFieldContainer[ScaleGroupSample]
    task_usage: _containers.RepeatedCompositeFieldContainer[TaskUsageSample]
    def __init__(self, interval_ms: _Optional[int] = ..., job_states: _Optional[_Iterable[_Union[JobStateSample, _Mapping]]] = ..., scale_groups: _Optional[_Iterable[_Union[ScaleGroupSample, _Mapping]]] = ..., task_usage: _Optional[_Iterable[_Union[TaskUsageSample, _Mapping]]] = ...) -> None: ...

class LoginRequest(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class SessionToken(_message.Message):
    __slots__ = ("token", "user", "role", "expires_at_ms")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    token: str
    user: str
    role: str
    expires_at_ms: int
    def __init__(self, token: _Optional[str] = ..., user: _Optional[str] = ..., role: _Optional[str] = ..., expires_at_ms: _Optional[int] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("user", "role", "ttl")
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    user: str
    role: str
    ttl: _time_pb2.Duration
    def __init__(self, user: _Optional[str] = ..., role: _Optional[str] = ..., ttl: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ...) -> None: ...

class RunTaskRequest(_message.Message):
    __slots__ = ("task_id", "job_id", "attempt_id", "task_index", "num_tasks", "entrypoint", "resources", "environment", "bundle_uri", "bundle_sha256", "ports", "timeout", "env")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_URI_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_SHA256_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    job_id: str
    attempt_id: int
    task_index: int
    num_tasks: int
    entrypoint: Entrypoint
    resources: ResourceSpec
    environment: EnvironmentConfig
    bundle_uri: str
    bundle_sha256: str
    ports: _containers.RepeatedScalarFieldContainer[str]
    timeout: _time_pb2.Duration
    env: _containers.ScalarMap[str, str]
    def __init__(self, task_id: _Optional[str] = ..., job_id: _Optional[str] = ..., attempt_id: _Optional[int] = ..., task_index: _Optional[int] = ..., num_tasks: _Optional[int] = ..., entrypoint: _Optional[_Union[Entrypoint, _Mapping]] = ..., resources: _Optional[_Union[ResourceSpec, _Mapping]] = ..., environment: _Optional[_Union[EnvironmentConfig, _Mapping]] = ..., bundle_uri: _Optional[str] = ..., bundle_sha256: _Optional[str] = ..., ports: _Optional[_Iterable[str]] = ..., timeout: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ...) -> None: ...

class TaskKey(_message.Message):
    __slots__ = ("task_id", "attempt_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt_id: int
    def __init__(self, task_id: _Optional[str] = ..., attempt_id: _Optional[int] = ...) -> None: ...

class ExpectedTask(_message.Message):
    __slots__ = ("task_id", "attempt_id", "log_offset")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt_id: int
    log_offset: int
    def __init__(self, task_id: _Optional[str] = ..., attempt_id: _Optional[int] = ..., log_offset: _Optional[int] = ...) -> None: ...

class ResourceUsage(_message.Message):
    __slots__ = ("memory_bytes", "cpu_percent", "process_count")
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    PROCESS_COUNT_FIELD_NUMBER: _ClassVar[int]
    memory_bytes: int
    cpu_percent: float
    process_count: int
    def __init__(self, memory_bytes: _Optional[int] = ..., cpu_percent: _Optional[float] = ..., process_count: _Optional[int] = ...) -> None: ...

class WorkerTaskStatus(_message.Message):
    __slots__ = ("task_id", "attempt_id", "state", "exit_code", "error", "started_at", "finished_at", "logs", "total_log_lines", "result", "ports", "usage", "job_id")
    class PortsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LOG_LINES_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt_id: int
    state: TaskState
    exit_code: int
    error: str
    started_at: _time_pb2.Timestamp
    finished_at: _time_pb2.Timestamp
    logs: _containers.RepeatedCompositeFieldContainer[LogLine]
    total_log_lines: int
    result: bytes
    ports: _containers.ScalarMap[str, int]
    usage: ResourceUsage
    job_id: str
    def __init__(self, task_id: _Optional[str] = ..., attempt_id: _Optional[int] = ..., state: _Optional[_Union[TaskState, str]] = ..., exit_code: _Optional[int] = ..., error: _Optional[str] = ..., started_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ..., logs: _Optional[_Iterable[_Union[LogLine, _Mapping]]] = ..., total_log_lines: _Optional[int] = ..., result: _Optional[bytes] = ..., ports: _Optional[_Mapping[str, int]] = ..., usage: _Optional[_Union[ResourceUsage, _Mapping]] = ..., job_id: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("tasks_to_run", "tasks_to_kill", "expected_tasks", "worker_id")
    TASKS_TO_RUN_FIELD_NUMBER: _ClassVar[int]
    TASKS_TO_KILL_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_TASKS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    tasks_to_run: _containers.RepeatedCompositeFieldContainer[RunTaskRequest]
    tasks_to_kill: _containers.RepeatedCompositeFieldContainer[TaskKey]
    expected_tasks: _containers.RepeatedCompositeFieldContainer[ExpectedTask]
    worker_id: str
    def __init__(self, tasks_to_run: _Optional[_Iterable[_Union[RunTaskRequest, _Mapping]]] = ..., tasks_to_kill: _Optional[_Iterable[_Union[TaskKey, _Mapping]]] = ..., expected_tasks: _Optional[_Iterable[_Union[ExpectedTask, _Mapping]]] = ..., worker_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("running_tasks", "completed_tasks", "worker_id")
    RUNNING_TASKS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_TASKS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    running_tasks: _containers.RepeatedCompositeFieldContainer[WorkerTaskStatus]
    completed_tasks: _containers.RepeatedCompositeFieldContainer[WorkerTaskStatus]
    worker_id: str
    def __init__(self, running_tasks: _Optional[_Iterable[_Union[WorkerTaskStatus, _Mapping]]] = ..., completed_tasks: _Optional[_Iterable[_Union[WorkerTaskStatus, _Mapping]]] = ..., worker_id: _Optional[str] = ...) -> None: ...

class WorkerGetTaskStatusRequest(_message.Message):
    __slots__ = ("task_id", "attempt_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt_id: int
    def __init__(self, task_id: _Optional[str] = ..., attempt_id: _Optional[int] = ...) -> None: ...

class WorkerListTasksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerListTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[WorkerTaskStatus]
    def __init__(self, tasks: _Optional[_Iterable[_Union[WorkerTaskStatus, _Mapping]]] = ...) -> None: ...

class FetchTaskLogsRequest(_message.Message):
    __slots__ = ("task_id", "attempt_id", "start_line", "max_lines")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    START_LINE_FIELD_NUMBER: _ClassVar[int]
    MAX_LINES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt_id: int
    start_line: int
    max_lines: int
    def __init__(self, task_id: _Optional[str] = ..., attempt_id: _Optional[int] = ..., start_line: _Optional[int] = ..., max_lines: _Optional[int] = ...) -> None: ...

class FetchTaskLogsResponse(_message.Message):
    __slots__ = ("lines", "next_line")
    LINES_FIELD_NUMBER: _ClassVar[int]
    NEXT_LINE_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[LogLine]
    next_line: int
    def __init__(self, lines: _Optional[_Iterable[_Union[LogLine, _Mapping]]] = ..., next_line: _Optional[int] = ...) -> None: ...

class HealthCheckRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthCheckResponse(_message.Message):
    __slots__ = ("healthy", "worker_id", "running_tasks", "runtime", "last_heartbeat")
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TASKS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    healthy: bool
    worker_id: str
    running_tasks: int
    runtime: str
    last_heartbeat: _time_pb2.Timestamp
    def __init__(self, healthy: _Optional[bool] = ..., worker_id: _Optional[str] = ..., running_tasks: _Optional[int] = ..., runtime: _Optional[str] = ..., last_heartbeat: _Optional[_Union[_time_pb2.Timestamp, _Mapping]] = ...) -> None: ...
