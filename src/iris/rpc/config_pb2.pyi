from iris.rpc import time_pb2 as _time_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AcceleratorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACCELERATOR_TYPE_UNSPECIFIED: _ClassVar[AcceleratorType]
    ACCELERATOR_TYPE_CPU: _ClassVar[AcceleratorType]
    ACCELERATOR_TYPE_GPU: _ClassVar[AcceleratorType]
    ACCELERATOR_TYPE_TPU: _ClassVar[AcceleratorType]
ACCELERATOR_TYPE_UNSPECIFIED: AcceleratorType
ACCELERATOR_TYPE_CPU: AcceleratorType
ACCELERATOR_TYPE_GPU: AcceleratorType
ACCELERATOR_TYPE_TPU: AcceleratorType

class GcpPlatformConfig(_message.Message):
    __slots__ = ("project_id",)
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    def __init__(self, project_id: _Optional[str] = ...) -> None: ...

class ManualPlatformConfig(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LocalPlatformConfig(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CoreweavePlatformConfig(_message.Message):
    __slots__ = ("region", "namespace", "kubeconfig_path", "object_storage_endpoint", "pod_ready_timeout", "deployment_ready_timeout", "api_timeout", "mount_failure_grace")
    REGION_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KUBECONFIG_PATH_FIELD_NUMBER: _ClassVar[int]
    OBJECT_STORAGE_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    POD_READY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_READY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    API_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MOUNT_FAILURE_GRACE_FIELD_NUMBER: _ClassVar[int]
    region: str
    namespace: str
    kubeconfig_path: str
    object_storage_endpoint: str
    pod_ready_timeout: _time_pb2.Duration
    deployment_ready_timeout: _time_pb2.Duration
    api_timeout: _time_pb2.Duration
    mount_failure_grace: _time_pb2.Duration
    def __init__(self, region: _Optional[str] = ..., namespace: _Optional[str] = ..., kubeconfig_path: _Optional[str] = ..., object_storage_endpoint: _Optional[str] = ..., pod_ready_timeout: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., deployment_ready_timeout: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., api_timeout: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., mount_failure_grace: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ...) -> None: ...

class PlatformConfig(_message.Message):
    __slots__ = ("label_prefix", "gcp", "manual", "local", "coreweave")
    LABEL_PREFIX_FIELD_NUMBER: _ClassVar[int]
    GCP_FIELD_NUMBER: _ClassVar[int]
    MANUAL_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    COREWEAVE_FIELD_NUMBER: _ClassVar[int]
    label_prefix: str
    gcp: GcpPlatformConfig
    manual: ManualPlatformConfig
    local: LocalPlatformConfig
    coreweave: CoreweavePlatformConfig
    def __init__(self, label_prefix: _Optional[str] = ..., gcp: _Optional[_Union[GcpPlatformConfig, _Mapping]] = ..., manual: _Optional[_Union[ManualPlatformConfig, _Mapping]] = ..., local: _Optional[_Union[LocalPlatformConfig, _Mapping]] = ..., coreweave: _Optional[_Union[CoreweavePlatformConfig, _Mapping]] = ...) -> None: ...

class SshConfig(_message.Message):
    __slots__ = ("user", "key_file", "port", "connect_timeout")
    USER_FIELD_NUMBER: _ClassVar[int]
    KEY_FILE_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    CONNECT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    user: str
    key_file: str
    port: int
    connect_timeout: _time_pb2.Duration
    def __init__(self, user: _Optional[str] = ..., key_file: _Optional[str] = ..., port: _Optional[int] = ..., connect_timeout: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ...) -> None: ...

class TimeoutConfig(_message.Message):
    __slots__ = ("boot_timeout", "init_timeout", "ssh_poll_interval", "heartbeat_interval", "worker_timeout", "kill_grace_period")
    BOOT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    INIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SSH_POLL_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    WORKER_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    KILL_GRACE_PERIOD_FIELD_NUMBER: _ClassVar[int]
    boot_timeout: _time_pb2.Duration
    init_timeout: _time_pb2.Duration
    ssh_poll_interval: _time_pb2.Duration
    heartbeat_interval: _time_pb2.Duration
    worker_timeout: _time_pb2.Duration
    kill_grace_period: _time_pb2.Duration
    def __init__(self, boot_timeout: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., init_timeout: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., ssh_poll_interval: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., heartbeat_interval: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., worker_timeout: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., kill_grace_period: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ...) -> None: ...

class AutoscalerConfig(_message.Message):
    __slots__ = ("evaluation_interval", "scale_up_delay", "scale_down_delay", "startup_grace_period", "quota_backoff", "failure_backoff_max")
    EVALUATION_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    SCALE_UP_DELAY_FIELD_NUMBER: _ClassVar[int]
    SCALE_DOWN_DELAY_FIELD_NUMBER: _ClassVar[int]
    STARTUP_GRACE_PERIOD_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    FAILURE_BACKOFF_MAX_FIELD_NUMBER: _ClassVar[int]
    evaluation_interval: _time_pb2.Duration
    scale_up_delay: _time_pb2.Duration
    scale_down_delay: _time_pb2.Duration
    startup_grace_period: _time_pb2.Duration
    quota_backoff: _time_pb2.Duration
    failure_backoff_max: _time_pb2.Duration
    def __init__(self, evaluation_interval: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., scale_up_delay: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., scale_down_delay: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., startup_grace_period: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., quota_backoff: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ..., failure_backoff_max: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ...) -> None: ...

class BootstrapConfig(_message.Message):
    __slots__ = ("docker_image", "task_image", "worker_port", "env_vars", "cache_dir", "runtime", "controller_address", "python_env", "worker_token")
    class EnvVarsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DOCKER_IMAGE_FIELD_NUMBER: _ClassVar[int]
    TASK_IMAGE_FIELD_NUMBER: _ClassVar[int]
    WORKER_PORT_FIELD_NUMBER: _ClassVar[int]
    ENV_VARS_FIELD_NUMBER: _ClassVar[int]
    CACHE_DIR_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PYTHON_ENV_FIELD_NUMBER: _ClassVar[int]
    WORKER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    docker_image: str
    task_image: str
    worker_port: int
    env_vars: _containers.ScalarMap[str, str]
    cache_dir: str
    runtime: str
    controller_address: str
    python_env: str
    worker_token: str
    def __init__(self, docker_image: _Optional[str] = ..., task_image: _Optional[str] = ..., worker_port: _Optional[int] = ..., env_vars: _Optional[_Mapping[str, str]] = ..., cache_dir: _Optional[str] = ..., runtime: _Optional[str] = ..., controller_address: _Optional[str] = ..., python_env: _Optional[str] = ..., worker_token: _Optional[str] = ...) -> None: ...

class DefaultsConfig(_message.Message):
    __slots__ = ("timeouts", "ssh", "autoscaler", "bootstrap")
    TIMEOUTS_FIELD_NUMBER: _ClassVar[int]
    SSH_FIELD_NUMBER: _ClassVar[int]
    AUTOSCALER_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_FIELD_NUMBER: _ClassVar[int]
    timeouts: TimeoutConfig
    ssh: SshConfig
    autoscaler: AutoscalerConfig
    bootstrap: BootstrapConfig
    def __init__(self, timeouts: _Optional[_Union[TimeoutConfig, _Mapping]] = ..., ssh: _Optional[_Union[SshConfig, _Mapping]] = ..., autoscaler: _Optional[_Union[AutoscalerConfig, _Mapping]] = ..., bootstrap: _Optional[_Union[BootstrapConfig, _Mapping]] = ...) -> None: ...

class StorageConfig(_message.Message):
    __slots__ = ("bundle_prefix", "log_prefix")
    BUNDLE_PREFIX_FIELD_NUMBER: _ClassVar[int]
    LOG_PREFIX_FIELD_NUMBER: _ClassVar[int]
    bundle_prefix: str
    log_prefix: str
    def __init__(self, bundle_prefix: _Optional[str] = ..., log_prefix: _Optional[str] = ...) -> None: ...

class GcpControllerConfig(_message.Message):
    __slots__ = ("zone", "machine_type", "boot_disk_size_gb", "port", "image")
    ZONE_FIELD_NUMBER: _ClassVar[int]
    MACHINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    BOOT_DISK_SIZE_GB_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    zone: str
    machine_type: str
    boot_disk_size_gb: int
    port: int
    image: str
    def __init__(self, zone: _Optional[str] = ..., machine_type: _Optional[str] = ..., boot_disk_size_gb: _Optional[int] = ..., port: _Optional[int] = ..., image: _Optional[str] = ...) -> None: ...

class ManualControllerConfig(_message.Message):
    __slots__ = ("host", "port", "image")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    image: str
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ..., image: _Optional[str] = ...) -> None: ...

class LocalControllerConfig(_message.Message):
    __slots__ = ("port", "state_dir")
    PORT_FIELD_NUMBER: _ClassVar[int]
    STATE_DIR_FIELD_NUMBER: _ClassVar[int]
    port: int
    state_dir: str
    def __init__(self, port: _Optional[int] = ..., state_dir: _Optional[str] = ...) -> None: ...

class CoreweaveControllerConfig(_message.Message):
    __slots__ = ("port", "service_name", "scale_group", "image", "state_dir")
    PORT_FIELD_NUMBER: _ClassVar[int]
    SERVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    SCALE_GROUP_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_DIR_FIELD_NUMBER: _ClassVar[int]
    port: int
    service_name: str
    scale_group: str
    image: str
    state_dir: str
    def __init__(self, port: _Optional[int] = ..., service_name: _Optional[str] = ..., scale_group: _Optional[str] = ..., image: _Optional[str] = ..., state_dir: _Optional[str] = ...) -> None: ...

class ControllerVmConfig(_message.Message):
    __slots__ = ("gcp", "manual", "local", "coreweave")
    GCP_FIELD_NUMBER: _ClassVar[int]
    MANUAL_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    COREWEAVE_FIELD_NUMBER: _ClassVar[int]
    gcp: GcpControllerConfig
    manual: ManualControllerConfig
    local: LocalControllerConfig
    coreweave: CoreweaveControllerConfig
    def __init__(self, gcp: _Optional[_Union[GcpControllerConfig, _Mapping]] = ..., manual: _Optional[_Union[ManualControllerConfig, _Mapping]] = ..., local: _Optional[_Union[LocalControllerConfig, _Mapping]] = ..., coreweave: _Optional[_Union[CoreweaveControllerConfig, _Mapping]] = ...) -> None: ...

class GcpVmConfig(_message.Message):
    __slots__ = ("zone", "machine_type", "boot_disk_size_gb")
    ZONE_FIELD_NUMBER: _ClassVar[int]
    MACHINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    BOOT_DISK_SIZE_GB_FIELD_NUMBER: _ClassVar[int]
    zone: str
    machine_type: str
    boot_disk_size_gb: int
    def __init__(self, zone: _Optional[str] = ..., machine_type: _Optional[str] = ..., boot_disk_size_gb: _Optional[int] = ...) -> None: ...

class ManualVmConfig(_message.Message):
    __slots__ = ("host", "ssh_user", "ssh_key_file")
    HOST_FIELD_NUMBER: _ClassVar[int]
    SSH_USER_FIELD_NUMBER: _ClassVar[int]
    SSH_KEY_FILE_FIELD_NUMBER: _ClassVar[int]
    host: str
    ssh_user: str
    ssh_key_file: str
    def __init__(self, host: _Optional[str] = ..., ssh_user: _Optional[str] = ..., ssh_key_file: _Optional[str] = ...) -> None: ...

class VmConfig(_message.Message):
    __slots__ = ("name", "labels", "metadata", "gcp", "manual")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    GCP_FIELD_NUMBER: _ClassVar[int]
    MANUAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    labels: _containers.ScalarMap[str, str]
    metadata: _containers.ScalarMap[str, str]
    gcp: GcpVmConfig
    manual: ManualVmConfig
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., gcp: _Optional[_Union[GcpVmConfig, _Mapping]] = ..., manual: _Optional[_Union[ManualVmConfig, _Mapping]] = ...) -> None: ...

class GcpSliceConfig(_message.Message):
    __slots__ = ("zone", "runtime_version", "preemptible", "topology", "spot")
    ZONE_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIBLE_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    SPOT_FIELD_NUMBER: _ClassVar[int]
    zone: str
    runtime_version: str
    preemptible: bool
    topology: str
    spot: bool
    def __init__(self, zone: _Optional[str] = ..., runtime_version: _Optional[str] = ..., preemptible: _Optional[bool] = ..., topology: _Optional[str] = ..., spot: _Optional[bool] = ...) -> None: ...

class CoreweaveSliceConfig(_message.Message):
    __slots__ = ("region", "instance_type", "gpus_per_node", "gpu_class", "infiniband")
    REGION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    GPU_CLASS_FIELD_NUMBER: _ClassVar[int]
    INFINIBAND_FIELD_NUMBER: _ClassVar[int]
    region: str
    instance_type: str
    gpus_per_node: int
    gpu_class: str
    infiniband: bool
    def __init__(self, region: _Optional[str] = ..., instance_type: _Optional[str] = ..., gpus_per_node: _Optional[int] = ..., gpu_class: _Optional[str] = ..., infiniband: _Optional[bool] = ...) -> None: ...

class ManualSliceConfig(_message.Message):
    __slots__ = ("hosts", "ssh_user", "ssh_key_file")
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    SSH_USER_FIELD_NUMBER: _ClassVar[int]
    SSH_KEY_FILE_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedScalarFieldContainer[str]
    ssh_user: str
    ssh_key_file: str
    def __init__(self, hosts: _Optional[_Iterable[str]] = ..., ssh_user: _Optional[str] = ..., ssh_key_file: _Optional[str] = ...) -> None: ...

class LocalSliceConfig(_message.Message):
    __slots__ = ("attributes",)
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SliceConfig(_message.Message):
    __slots__ = ("name_prefix", "num_vms", "accelerator_type", "accelerator_variant", "labels", "gcp", "coreweave", "manual", "local")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_PREFIX_FIELD_NUMBER: _ClassVar[int]
    NUM_VMS_FIELD_NUMBER: _ClassVar[int]
    ACCELERATOR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ACCELERATOR_VARIANT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    GCP_FIELD_NUMBER: _ClassVar[int]
    COREWEAVE_FIELD_NUMBER: _ClassVar[int]
    MANUAL_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    name_prefix: str
    num_vms: int
    accelerator_type: AcceleratorType
    accelerator_variant: str
    labels: _containers.ScalarMap[str, str]
    gcp: GcpSliceConfig
    coreweave: CoreweaveSliceConfig
    manual: ManualSliceConfig
    local: LocalSliceConfig
    def __init__(self, name_prefix: _Optional[str] = ..., num_vms: _Optional[int] = ..., accelerator_type: _Optional[_Union[AcceleratorType, str]] = ..., accelerator_variant: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., gcp: _Optional[_Union[GcpSliceConfig, _Mapping]] = ..., coreweave: _Optional[_Union[CoreweaveSliceConfig, _Mapping]] = ..., manual: _Optional[_Union[ManualSliceConfig, _Mapping]] = ..., local: _Optional[_Union[LocalSliceConfig, _Mapping]] = ...) -> None: ...

class ScaleGroupResources(_message.Message):
    __slots__ = ("cpu", "ram", "disk", "gpu_count", "tpu_count")
    CPU_FIELD_NUMBER: _ClassVar[int]
    RAM_FIELD_NUMBER: _ClassVar[int]
    DISK_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    TPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    cpu: int
    ram: int
    disk: int
    gpu_count: int
    tpu_count: int
    def __init__(self, cpu: _Optional[int] = ..., ram: _Optional[int] = ..., disk: _Optional[int] = ..., gpu_count: _Optional[int] = ..., tpu_count: _Optional[int] = ...) -> None: ...

class ScaleGroupConfig(_message.Message):
    __slots__ = ("name", "min_slices", "max_slices", "priority", "zones", "slice_template", "resources")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MIN_SLICES_FIELD_NUMBER: _ClassVar[int]
    MAX_SLICES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ZONES_FIELD_NUMBER: _ClassVar[int]
    SLICE_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    name: str
    min_slices: int
    max_slices: int
    priority: int
    zones: _containers.RepeatedScalarFieldContainer[str]
    slice_template: SliceConfig
    resources: ScaleGroupResources
    def __init__(self, name: _Optional[str] = ..., min_slices: _Optional[int] = ..., max_slices: _Optional[int] = ..., priority: _Optional[int] = ..., zones: _Optional[_Iterable[str]] = ..., slice_template: _Optional[_Union[SliceConfig, _Mapping]] = ..., resources: _Optional[_Union[ScaleGroupResources, _Mapping]] = ...) -> None: ...

class LimitsConfig(_message.Message):
    __slots__ = ("max_replicas", "max_name_chars", "max_argv_items", "max_string_chars", "max_strings_total_chars", "max_env_vars", "max_list_items", "max_key_chars", "max_callable_bytes", "max_cpu_millicores", "max_memory_bytes", "max_disk_bytes", "max_retries", "max_timeout_ms", "min_priority", "max_priority", "max_bundle_bytes", "max_bundle_entries", "max_bundle_unpacked_bytes", "max_id_chars", "max_filter_chars")
    MAX_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_NAME_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_ARGV_ITEMS_FIELD_NUMBER: _ClassVar[int]
    MAX_STRING_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_STRINGS_TOTAL_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_ENV_VARS_FIELD_NUMBER: _ClassVar[int]
    MAX_LIST_ITEMS_FIELD_NUMBER: _ClassVar[int]
    MAX_KEY_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_CALLABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_CPU_MILLICORES_FIELD_NUMBER: _ClassVar[int]
    MAX_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MAX_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MAX_BUNDLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BUNDLE_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MAX_BUNDLE_UNPACKED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_ID_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_FILTER_CHARS_FIELD_NUMBER: _ClassVar[int]
    max_replicas: int
    max_name_chars: int
    max_argv_items: int
    max_string_chars: int
    max_strings_total_chars: int
    max_env_vars: int
    max_list_items: int
    max_key_chars: int
    max_callable_bytes: int
    max_cpu_millicores: int
    max_memory_bytes: int
    max_disk_bytes: int
    max_retries: int
    max_timeout_ms: int
    min_priority: int
    max_priority: int
    max_bundle_bytes: int
    max_bundle_entries: int
    max_bundle_unpacked_bytes: int
    max_id_chars: int
    max_filter_chars: int
    def __init__(self, max_replicas: _Optional[int] = ..., max_name_chars: _Optional[int] = ..., max_argv_items: _Optional[int] = ..., max_string_chars: _Optional[int] = ..., max_strings_total_chars: _Optional[int] = ..., max_env_vars: _Optional[int] = ..., max_list_items: _Optional[int] = ..., max_key_chars: _Optional[int] = ..., max_callable_bytes: _Optional[int] = ..., max_cpu_millicores: _Optional[int] = ..., max_memory_bytes: _Optional[int] = ..., max_disk_bytes: _Optional[int] = ..., max_retries: _Optional[int] = ..., max_timeout_ms: _Optional[int] = ..., min_priority: _Optional[int] = ..., max_priority: _Optional[int] = ..., max_bundle_bytes: _Optional[int] = ..., max_bundle_entries: _Optional[int] = ..., max_bundle_unpacked_bytes: _Optional[int] = ..., max_id_chars: _Optional[int] = ..., max_filter_chars: _Optional[int] = ...) -> None: ...

class StaticToken(_message.Message):
    __slots__ = ("token", "user", "role", "token_sha256")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_SHA256_FIELD_NUMBER: _ClassVar[int]
    token: str
    user: str
    role: str
    token_sha256: str
    def __init__(self, token: _Optional[str] = ..., user: _Optional[str] = ..., role: _Optional[str] = ..., token_sha256: _Optional[str] = ...) -> None: ...

class AuthConfig(_message.Message):
    __slots__ = ("mode", "static_tokens", "jwt_key_file", "session_ttl")
    MODE_FIELD_NUMBER: _ClassVar[int]
    STATIC_TOKENS_FIELD_NUMBER: _ClassVar[int]
    JWT_KEY_FILE_FIELD_NUMBER: _ClassVar[int]
    SESSION_TTL_FIELD_NUMBER: _ClassVar[int]
    mode: str
    static_tokens: _containers.RepeatedCompositeFieldContainer[StaticToken]
    jwt_key_file: str
    session_ttl: _time_pb2.Duration
    def __init__(self, mode: _Optional[str] = ..., static_tokens: _Optional[_Iterable[_Union[StaticToken, _Mapping]]] = ..., jwt_key_file: _Optional[str] = ..., session_ttl: _Optional[_Union[_time_pb2.Duration, _Mapping]] = ...) -> None: ...

class IrisClusterConfig(_message.Message):
    __slots__ = ("name", "platform", "defaults", "storage", "controller", "scale_groups", "limits", "auth")
    class ScaleGroupsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ScaleGroupConfig
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ScaleGroupConfig, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    SCALE_GROUPS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    AUTH_FIELD_NUMBER: _ClassVar[int]
    name: str
    platform: PlatformConfig
    defaults: DefaultsConfig
    storage: StorageConfig
    controller: ControllerVmConfig
    scale_groups: _containers.MessageMap[str, ScaleGroupConfig]
    limits: LimitsConfig
    auth: AuthConfig
    def __init__(self, name: _Optional[str] = ..., platform: _Optional[_Union[PlatformConfig, _Mapping]] = ..., defaults: _Optional[_Union[DefaultsConfig, _Mapping]] = ..., storage: _Optional[_Union[StorageConfig, _Mapping]] = ..., controller: _Optional[_Union[ControllerVmConfig, _Mapping]] = ..., scale_groups: _Optional[_Mapping[str, ScaleGroupConfig]] = ..., limits: _Optional[_Union[LimitsConfig, _Mapping]] = ..., auth: _Optional[_Union[AuthConfig, _Mapping]] = ...) -> None: ...
