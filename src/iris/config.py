"""Cluster configuration: YAML -> IrisClusterConfig, defaults, validation.

The YAML is walked alongside the protobuf descriptor, so every message in config.proto is
accepted with the same rules and every error names the file and the dotted key path that caused
it. Daemons and the CLI call `load_and_validate`.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from iris.cluster.limits import limits_from_config
from iris.rpc import config_pb2, time_pb2
from iris.time import Duration

if TYPE_CHECKING:
    import yaml

DEFAULT_CLUSTER_NAME = "iris"
DEFAULT_LABEL_PREFIX = "iris"
DEFAULT_CONTROLLER_PORT = 10000
DEFAULT_WORKER_PORT = 10001
DEFAULT_STATE_ROOT = "~/.iris"
DEFAULT_CACHE_DIR = "/var/cache/iris"

DEFAULT_BOOT_TIMEOUT = Duration.from_seconds(300)
DEFAULT_INIT_TIMEOUT = Duration.from_seconds(600)
DEFAULT_SSH_POLL_INTERVAL = Duration.from_seconds(5)
DEFAULT_HEARTBEAT_INTERVAL = Duration.from_seconds(5)
DEFAULT_WORKER_TIMEOUT = Duration.from_seconds(60)
DEFAULT_KILL_GRACE_PERIOD = Duration.from_seconds(10)

DEFAULT_SSH_USER = "root"
DEFAULT_SSH_PORT = 22
DEFAULT_SSH_CONNECT_TIMEOUT = Duration.from_seconds(30)

DEFAULT_EVALUATION_INTERVAL = Duration.from_seconds(10)
DEFAULT_SCALE_UP_DELAY = Duration.from_seconds(60)
DEFAULT_SCALE_DOWN_DELAY = Duration.from_seconds(300)
DEFAULT_STARTUP_GRACE_PERIOD = Duration.from_seconds(600)
DEFAULT_QUOTA_BACKOFF = Duration.from_seconds(300)
DEFAULT_FAILURE_BACKOFF_MAX = Duration.from_seconds(600)

DEFAULT_MIN_SLICES = 0
DEFAULT_MAX_SLICES = 1
DEFAULT_NUM_VMS = 1

DEFAULT_RUNTIME = "docker"
RUNTIMES = frozenset({"process", "docker", "containerd", "kubernetes"})
STORAGE_SCHEMES = ("file://", "s3://", "gs://")

# Integer fields holding byte counts, which YAML may also write as "128GB" or "512MiB".
SIZE_FIELDS = frozenset(
    {
        "iris.config.ScaleGroupResources.ram",
        "iris.config.ScaleGroupResources.disk",
    }
)

_DURATION_TYPE = time_pb2.Duration.DESCRIPTOR.full_name
# Waits that may be switched off with 0s (act at once); every other duration must be positive.
_ZERO_ALLOWED_DURATIONS = frozenset({"scale_up_delay", "scale_down_delay", "kill_grace_period"})

# Lower-cased unit suffixes; "G" and "Gi" (Kubernetes style) are accepted alongside "GB" and "GiB".
_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    **{
        f"{letter}{infix}{suffix}": base**power
        for power, letter in enumerate("kmgtp", start=1)
        for infix, base in (("", 1000), ("i", 1024))
        for suffix in ("", "b")
    },
}
_SIZE_TEXT = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
_DECIMAL_SIZE_NAMES = ("KB", "MB", "GB", "TB", "PB")
# Largest first, decimal before binary at each scale, for printing sizes without loss.
_EXACT_SIZE_UNITS = [
    (f"{letter.upper()}{infix}B", base**power)
    for power, letter in reversed(list(enumerate("kmgtp", start=1)))
    for infix, base in (("", 1000), ("i", 1024))
]

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")

_INT_RANGES: dict[int, tuple[int, int]] = {
    FieldDescriptor.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1),
}
_FLOAT_TYPES = frozenset({FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE})

# Where the suggestion search for an unknown key stops descending; deep enough to find
# slice_template.gcp.runtime_version from a scale group.
_SUGGESTION_DEPTH = 3


class ConfigError(ValueError):
    """A config problem, reported as `<source>: <key path>: <problem>`."""

    def __init__(self, source: str, key_path: str, problem: str) -> None:
        self.source = source
        self.key_path = key_path
        self.problem = problem
        location = f"{source}: {key_path}" if key_path else source
        super().__init__(f"{location}: {problem}")


# ---------------------------------------------------------------- sizes


def parse_size(value: str | int) -> int:
    """Bytes from an int or from text like "128GB" (10^9), "512MiB" (2^20), "2TB" or "1024"."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"invalid size {value!r}: expected a byte count or text like '128GB'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"invalid size {value}: sizes cannot be negative")
        return value
    match = _SIZE_TEXT.fullmatch(value.strip().lower())
    if not match or match.group(2) not in _SIZE_UNITS:
        raise ValueError(
            f"invalid size {value!r}: expected a byte count or a number with a unit, "
            "like '512MiB', '128GB' or '2TB' (KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB of 1024)"
        )
    size = Decimal(match.group(1)) * _SIZE_UNITS[match.group(2)]
    if size != size.to_integral_value():
        raise ValueError(f"invalid size {value!r}: not a whole number of bytes")
    return int(size)


def format_size(num_bytes: int) -> str:
    """A human-readable size in decimal units, e.g. 2000000000 -> "2.0GB"."""
    if num_bytes < 0:
        return f"-{format_size(-num_bytes)}"
    for power in range(len(_DECIMAL_SIZE_NAMES), 0, -1):
        if num_bytes >= 1000**power:
            return f"{num_bytes / 1000**power:.1f}{_DECIMAL_SIZE_NAMES[power - 1]}"
    return f"{num_bytes}B"


def _format_size_exactly(num_bytes: int) -> str | int:
    """The largest unit that represents `num_bytes` without loss, so printed configs re-load."""
    for suffix, unit in _EXACT_SIZE_UNITS:
        if num_bytes and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return num_bytes


# ---------------------------------------------------------------- loading


@functools.cache
def _strict_loader() -> type[yaml.SafeLoader]:
    """A SafeLoader that refuses duplicate keys, which PyYAML otherwise resolves silently to the
    last. Built on first use: PyYAML is imported by what reads a config file, not by every
    command that imports this module."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                # Keys pulled in by a `<<:` merge may be overridden; only literal repeats are mistakes.
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def load_config(path: str | Path) -> config_pb2.IrisClusterConfig:
    """Parse a YAML file into an IrisClusterConfig (no defaults applied, not validated)."""
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(source, "", f"cannot read config file: {e.strerror or e}") from e
    import yaml

    try:
        data = yaml.load(text, Loader=_strict_loader())
    except yaml.YAMLError as e:
        raise ConfigError(source, "", _describe_yaml_error(e)) from e
    return load_config_from_dict({} if data is None else data, source=source)


def _describe_yaml_error(error: yaml.YAMLError) -> str:
    import yaml

    if not isinstance(error, yaml.MarkedYAMLError):
        return f"invalid YAML: {error}"
    mark = error.problem_mark or error.context_mark
    location = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    context = f" ({error.context})" if error.context else ""
    return f"invalid YAML{location}: {error.problem}{context}"


def load_config_from_dict(data: dict[str, Any], source: str = "<config>") -> config_pb2.IrisClusterConfig:
    """Build an IrisClusterConfig from already-parsed YAML (no defaults applied, not validated)."""
    if not isinstance(data, dict):
        raise ConfigError(source, "", f"expected a mapping at the top level, got {_describe(data)}")
    config = config_pb2.IrisClusterConfig()
    _ConfigReader(source).merge_message(config, data, "")
    for name, group in config.scale_groups.items():
        if not group.name:
            group.name = name
    return config


class _ConfigReader:
    """Copies YAML values into proto messages, guided by each message's descriptor."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, path: str, problem: str) -> ConfigError:
        return ConfigError(self.source, path, problem)

    def merge_message(self, message: Message, data: Any, path: str) -> None:
        descriptor = message.DESCRIPTOR
        if data is None:
            # `local:` with nothing after it chooses that (empty) section, as `local: {}` does.
            message.SetInParent()
            return
        if not isinstance(data, dict):
            raise self.error(path, f"expected a mapping of {descriptor.name} fields, got {_describe(data)}")
        message.SetInParent()
        chosen_by_oneof: dict[str, list[str]] = {}
        for key, value in data.items():
            key_path = _join(path, str(key))
            field = descriptor.fields_by_name.get(key) if isinstance(key, str) else None
            if field is None:
                raise self.error(key_path, _unknown_key_problem(str(key), descriptor))
            if field.containing_oneof is not None:
                chosen_by_oneof.setdefault(field.containing_oneof.name, []).append(key)
            self.merge_field(message, field, value, key_path)
        for oneof_name, keys in chosen_by_oneof.items():
            if len(keys) > 1:
                chosen = " and ".join(f"'{k}'" for k in keys)
                raise self.error(
                    path,
                    f"sets both {chosen}, but they are alternatives (oneof '{oneof_name}'); keep only one",
                )

    def merge_field(self, message: Message, field: FieldDescriptor, value: Any, path: str) -> None:
        if _is_map(field):
            self.merge_map(getattr(message, field.name), field, value, path)
        elif field.is_repeated:
            self.merge_list(getattr(message, field.name), field, value, path)
        elif field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
            self.merge_submessage(getattr(message, field.name), value, path)
        else:
            setattr(message, field.name, self.convert_scalar(field, value, path))

    def merge_map(self, container: Any, field: FieldDescriptor, value: Any, path: str) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise self.error(path, f"expected a mapping, got {_describe(value)}")
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        for raw_key, item in value.items():
            item_path = _join(path, str(raw_key))
            key = self.convert_scalar(key_field, raw_key, item_path)
            if value_field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
                self.merge_submessage(container[key], item, item_path)
            else:
                container[key] = self.convert_scalar(value_field, item, item_path)

    def merge_list(self, container: Any, field: FieldDescriptor, value: Any, path: str) -> None:
        if value is None:
            return
        if not isinstance(value, list):
            raise self.error(path, f"expected a list, got {_describe(value)}")
        for index, item in enumerate(value):
            item_path = f"{path}[{index}]"
            if field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
                self.merge_submessage(container.add(), item, item_path)
            else:
                container.append(self.convert_scalar(field, item, item_path))

    def merge_submessage(self, message: Message, value: Any, path: str) -> None:
        if message.DESCRIPTOR.full_name == _DURATION_TYPE and not isinstance(value, dict):
            message.CopyFrom(self.convert_duration(value, path).to_proto())
        else:
            self.merge_message(message, value, path)

    def convert_duration(self, value: Any, path: str) -> Duration:
        if isinstance(value, str):
            text = self.expand_env(value, path)
            try:
                return Duration.parse(text)
            except ValueError as e:
                raise self.error(path, str(e)) from e
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise self.error(
                path,
                f"a bare number ({value}) is ambiguous as a duration; "
                f"write it with a unit like '{value}s', or as {{milliseconds: N}}",
            )
        raise self.error(
            path, f"expected a duration like '30s' or {{milliseconds: N}}, got {_describe(value)}"
        )

    def convert_scalar(self, field: FieldDescriptor, value: Any, path: str) -> Any:
        if isinstance(value, str):
            value = self.expand_env(value, path)
        if field.full_name in SIZE_FIELDS:
            return self.convert_size(field, value, path)
        cpp_type = field.cpp_type
        if cpp_type == FieldDescriptor.CPPTYPE_STRING:
            return self.convert_string(field, value, path)
        if cpp_type == FieldDescriptor.CPPTYPE_BOOL:
            return self.convert_bool(value, path)
        if cpp_type == FieldDescriptor.CPPTYPE_ENUM:
            return self.convert_enum(field, value, path)
        if cpp_type in _FLOAT_TYPES:
            return self.convert_float(value, path)
        return self.convert_int(field, value, path)

    def convert_size(self, field: FieldDescriptor, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise self.error(path, f"expected a size like '128GB' or a byte count, got {_describe(value)}")
        try:
            return self.check_int_range(field, parse_size(value), path)
        except ValueError as e:
            raise self.error(path, str(e)) from e

    def convert_string(self, field: FieldDescriptor, value: Any, path: str) -> str | bytes:
        # YAML reads `yes`/`on` as booleans and `1.10` as the float 1.1; stringifying those would
        # silently change the user's text, so they must be quoted instead.
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise self.error(
                path, f"expected a string, got {_describe(value)}; quote the value if it is text"
            )
        text = str(value)
        return text.encode() if field.type == FieldDescriptor.TYPE_BYTES else text

    def convert_bool(self, value: Any, path: str) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise self.error(path, f"expected true or false, got {_describe(value)}")

    def convert_float(self, value: Any, path: str) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise self.error(path, f"expected a number, got {_describe(value)}")

    def convert_int(self, field: FieldDescriptor, value: Any, path: str) -> int:
        # Strings holding an integer are accepted so `${PORT:-10000}` works for numeric fields.
        if isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+\s*", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(path, f"expected an integer, got {_describe(value)}")
        return self.check_int_range(field, value, path)

    def check_int_range(self, field: FieldDescriptor, value: int, path: str) -> int:
        low, high = _INT_RANGES[field.cpp_type]
        if not low <= value <= high:
            raise self.error(path, f"{value} is out of range for this field ({low} to {high})")
        return value

    def convert_enum(self, field: FieldDescriptor, value: Any, path: str) -> int:
        enum = field.enum_type
        prefix = _enum_prefix(enum.name)
        short_names = [v.name.removeprefix(prefix).lower() for v in enum.values]
        if isinstance(value, str):
            wanted = value.strip().upper()
            for candidate in (wanted, prefix + wanted):
                if candidate in enum.values_by_name:
                    return enum.values_by_name[candidate].number
        choices = ", ".join(short_names)
        problem = (
            f"expected one of {choices} (or a full name like {enum.values[-1].name}), got {_describe(value)}"
        )
        if isinstance(value, str):
            close = difflib.get_close_matches(
                value.strip().lower().removeprefix(prefix.lower()), short_names, n=1
            )
            if close:
                problem += f"; did you mean '{close[0]}'?"
        raise self.error(path, problem)

    def expand_env(self, text: str, path: str) -> str:
        def substitute(match: re.Match[str]) -> str:
            name, has_default, default = match.group(1), match.group(2), match.group(3)
            current = os.environ.get(name)
            # Like the shell's ${VAR:-default}: an empty variable also falls back to the default.
            if has_default is not None and not current:
                return default
            if current is None:
                raise self.error(
                    path,
                    f"environment variable {name} is not set "
                    f"(set it, or write ${{{name}:-default}} to give a fallback)",
                )
            return current

        return _ENV_REFERENCE.sub(substitute, text)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _is_map(field: FieldDescriptor) -> bool:
    return (
        field.is_repeated
        and field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE
        and field.message_type.GetOptions().map_entry
    )


def _enum_prefix(enum_name: str) -> str:
    """AcceleratorType -> "ACCELERATOR_TYPE_", the prefix proto style puts on every value."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum_name).upper() + "_"


def _describe(value: Any) -> str:
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _unknown_key_problem(key: str, descriptor: Descriptor) -> str:
    names = [f.name for f in descriptor.fields]
    problem = f"unknown key '{key}' in {descriptor.name}"
    close = difflib.get_close_matches(key, names, n=1)
    nested = next(_nested_field_paths(key, descriptor, "", _SUGGESTION_DEPTH), None)
    if close:
        problem += f"; did you mean '{close[0]}'?"
    elif nested:
        problem += f"; did you mean '{nested}'?"
    else:
        problem += f"; valid keys are: {', '.join(sorted(names))}"
    return problem


def _nested_field_paths(key: str, descriptor: Descriptor, prefix: str, depth: int) -> Iterator[str]:
    """Dotted paths below `descriptor` ending in a field named `key`, shallowest first.

    This is what points a key from an older, flatter config layout to its new home.
    """
    frontier = [(descriptor, prefix)]
    for _ in range(depth):
        next_frontier = []
        for message, message_path in frontier:
            for field in message.fields:
                if message_path and field.name == key:
                    yield f"{message_path}.{field.name}"
                if (
                    field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE
                    and not _is_map(field)
                    and field.message_type.full_name != _DURATION_TYPE
                ):
                    next_frontier.append((field.message_type, _join(message_path, field.name)))
        frontier = next_frontier


# ---------------------------------------------------------------- defaults


def default_state_dir(cluster_name: str) -> str:
    return _absolute_path(f"{DEFAULT_STATE_ROOT}/{cluster_name}")


def _absolute_path(path: str) -> str:
    # The state dir also becomes a file:// URL, which cannot be relative.
    return os.path.abspath(os.path.expanduser(path))


def state_dir_of(config: config_pb2.IrisClusterConfig) -> str:
    """Where the cluster keeps its local state: the local controller's state_dir, else the
    default for the cluster's name. Works on a config before or after `apply_defaults`."""
    if config.controller.HasField("local") and config.controller.local.state_dir:
        return _absolute_path(config.controller.local.state_dir)
    return default_state_dir(config.name or DEFAULT_CLUSTER_NAME)


def apply_defaults(config: config_pb2.IrisClusterConfig) -> config_pb2.IrisClusterConfig:
    """A copy of `config` with every unset field that has a default filled in.

    The provider's own defaults go first, so where it differs from a shared default (a longer
    startup grace on slow-provisioning clouds, the process runtime locally) its value stands.
    """
    from iris.cluster.platform.factory import provider_for

    resolved = config_pb2.IrisClusterConfig()
    resolved.CopyFrom(config)
    if not resolved.name:
        resolved.name = DEFAULT_CLUSTER_NAME
    if not resolved.platform.label_prefix:
        resolved.platform.label_prefix = DEFAULT_LABEL_PREFIX
    provider = provider_for(resolved.platform.WhichOneof("platform"))
    if provider is not None:
        provider.apply_defaults(resolved)

    _default_durations(
        resolved.defaults.timeouts,
        boot_timeout=DEFAULT_BOOT_TIMEOUT,
        init_timeout=DEFAULT_INIT_TIMEOUT,
        ssh_poll_interval=DEFAULT_SSH_POLL_INTERVAL,
        heartbeat_interval=DEFAULT_HEARTBEAT_INTERVAL,
        worker_timeout=DEFAULT_WORKER_TIMEOUT,
        kill_grace_period=DEFAULT_KILL_GRACE_PERIOD,
    )

    ssh = resolved.defaults.ssh
    ssh.user = ssh.user or DEFAULT_SSH_USER
    ssh.port = ssh.port or DEFAULT_SSH_PORT
    _default_durations(ssh, connect_timeout=DEFAULT_SSH_CONNECT_TIMEOUT)

    _default_durations(
        resolved.defaults.autoscaler,
        evaluation_interval=DEFAULT_EVALUATION_INTERVAL,
        scale_up_delay=DEFAULT_SCALE_UP_DELAY,
        scale_down_delay=DEFAULT_SCALE_DOWN_DELAY,
        startup_grace_period=DEFAULT_STARTUP_GRACE_PERIOD,
        quota_backoff=DEFAULT_QUOTA_BACKOFF,
        failure_backoff_max=DEFAULT_FAILURE_BACKOFF_MAX,
    )

    if resolved.controller.HasField("local"):
        # Port 0 is meaningful for a local controller (pick a free port), so it is not defaulted.
        resolved.controller.local.state_dir = state_dir_of(resolved)

    bootstrap = resolved.defaults.bootstrap
    bootstrap.worker_port = bootstrap.worker_port or DEFAULT_WORKER_PORT
    bootstrap.runtime = bootstrap.runtime or DEFAULT_RUNTIME
    bootstrap.cache_dir = bootstrap.cache_dir or DEFAULT_CACHE_DIR

    storage = resolved.storage
    if storage.bundle_prefix and not storage.log_prefix:
        storage.log_prefix = default_log_prefix(storage.bundle_prefix)

    for name, group in resolved.scale_groups.items():
        group.name = group.name or name
        if not group.HasField("min_slices"):
            group.min_slices = DEFAULT_MIN_SLICES
        if not group.HasField("max_slices"):
            group.max_slices = DEFAULT_MAX_SLICES
        group.slice_template.num_vms = group.slice_template.num_vms or DEFAULT_NUM_VMS
    return resolved


def default_log_prefix(bundle_prefix: str) -> str:
    """Logs live beside the bundles: gs://b/iris/bundles -> gs://b/iris/logs."""
    scheme, _, location = bundle_prefix.rstrip("/").partition("://")
    parent = location.rsplit("/", 1)[0] if "/" in location.strip("/") else location
    return f"{scheme}://{parent}/logs"


def _default_durations(message: Message, **defaults: Duration) -> None:
    for field_name, default in defaults.items():
        if not message.HasField(field_name):
            getattr(message, field_name).CopyFrom(default.to_proto())


# ---------------------------------------------------------------- validation


def validate_config(config: config_pb2.IrisClusterConfig, source: str = "<config>") -> None:
    """Raise ConfigError for the first problem found; expects `apply_defaults` to have run."""
    from iris.cluster.platform.factory import PROVIDERS, provider_for

    platform = config.platform.WhichOneof("platform")
    provider = provider_for(platform)
    if provider is None:
        raise ConfigError(
            source, "platform", f"no platform chosen; set exactly one of {', '.join(PROVIDERS)}"
        )

    for name, group in config.scale_groups.items():
        _validate_scale_group(source, f"scale_groups.{name}", name, group, provider.name)
    kind = config.controller.WhichOneof("controller")
    # A local controller may drive any platform: that is how a cluster is debugged from a laptop.
    if kind not in (None, "local", provider.name):
        raise ConfigError(
            source, "controller", f"is a '{kind}' controller but the cluster platform is '{provider.name}'"
        )
    for key_path, problem in provider.config_problems(config):
        raise ConfigError(source, key_path, problem)
    _validate_storage(source, config.storage, provider.name)
    try:
        limits_from_config(config.limits)
    except ValueError as exc:
        raise ConfigError(source, "", str(exc)) from None
    _validate_auth(source, config.auth)

    runtime = config.defaults.bootstrap.runtime
    if runtime and runtime not in RUNTIMES:
        raise ConfigError(
            source,
            "defaults.bootstrap.runtime",
            f"'{runtime}' is not a runtime; choose one of {', '.join(sorted(RUNTIMES))}",
        )

    for path, duration in _iter_durations(config, ""):
        zero_allowed = path.rsplit(".", 1)[-1] in _ZERO_ALLOWED_DURATIONS
        if duration.milliseconds < 0 or (duration.milliseconds == 0 and not zero_allowed):
            raise ConfigError(source, path, f"must be a positive duration, got {duration}")


def _validate_auth(source: str, auth: config_pb2.AuthConfig) -> None:
    # Imported here: the auth package reads configs, and config must not import it at load time.
    from iris.cluster.auth.tokens import (
        AuthMode,
        check_user_name,
        parse_mode,
        parse_role,
        static_token_digest,
    )

    try:
        mode = parse_mode(auth.mode)
    except ValueError as exc:
        raise ConfigError(source, "auth.mode", str(exc)) from None
    seen: set[bytes] = set()
    for index, entry in enumerate(auth.static_tokens):
        path = f"auth.static_tokens[{index}]"
        # A problem with a token is described, never quoted: config errors end up in logs.
        if bool(entry.token) == bool(entry.token_sha256):
            raise ConfigError(source, path, "give exactly one of token and token_sha256")
        if entry.token and len(entry.token) < 16:
            raise ConfigError(source, f"{path}.token", "must be at least 16 characters (use a random string)")
        try:
            check_user_name(entry.user)
            parse_role(entry.role)
            digest = static_token_digest(entry)
        except ValueError as exc:
            raise ConfigError(source, path, str(exc)) from None
        if digest in seen:
            raise ConfigError(source, path, "has the same token as an earlier entry")
        seen.add(digest)
    if mode is not AuthMode.NONE and not auth.static_tokens:
        raise ConfigError(
            source,
            "auth.static_tokens",
            f"auth.mode {mode.value} needs at least one token (an admin's) to log in with",
        )


def _validate_scale_group(
    source: str, path: str, name: str, group: config_pb2.ScaleGroupConfig, platform: str
) -> None:
    if group.name != name:
        raise ConfigError(
            source,
            f"{path}.name",
            f"'{group.name}' differs from the group's key '{name}'; omit name or make them equal",
        )
    for field_name in ("min_slices", "max_slices"):
        if getattr(group, field_name) < 0:
            raise ConfigError(
                source, f"{path}.{field_name}", f"must be >= 0, got {getattr(group, field_name)}"
            )
    if group.min_slices > group.max_slices:
        raise ConfigError(
            source,
            f"{path}.min_slices",
            f"min_slices ({group.min_slices}) is greater than max_slices ({group.max_slices})",
        )
    for field, value in group.resources.ListFields():
        if value < 0:
            raise ConfigError(source, f"{path}.resources.{field.name}", f"must be >= 0, got {value}")

    template = group.slice_template
    template_path = f"{path}.slice_template"
    if template.num_vms < 1:
        raise ConfigError(source, f"{template_path}.num_vms", f"must be at least 1, got {template.num_vms}")
    kind = template.WhichOneof("platform")
    if kind is None:
        raise ConfigError(
            source,
            template_path,
            f"no platform section; add a '{platform}:' block matching the cluster platform",
        )
    if kind != platform:
        raise ConfigError(
            source, template_path, f"is a '{kind}' slice but the cluster platform is '{platform}'"
        )


def _validate_storage(source: str, storage: config_pb2.StorageConfig, platform: str) -> None:
    allowed = ", ".join(STORAGE_SCHEMES)
    # A provider whose workers share this machine's filesystem defaults the prefix to a local path.
    if not storage.bundle_prefix:
        raise ConfigError(
            source,
            "storage.bundle_prefix",
            f"required for the '{platform}' platform, since workers on other machines fetch job bundles "
            f"from it; use one of {allowed}",
        )
    for field_name in ("bundle_prefix", "log_prefix"):
        prefix = getattr(storage, field_name)
        if prefix and not prefix.startswith(STORAGE_SCHEMES):
            raise ConfigError(
                source, f"storage.{field_name}", f"'{prefix}' has an unsupported scheme; allowed: {allowed}"
            )


def _iter_durations(message: Message, path: str) -> Iterator[tuple[str, Duration]]:
    for field, value in message.ListFields():
        if field.cpp_type != FieldDescriptor.CPPTYPE_MESSAGE:
            continue
        field_path = _join(path, field.name)
        if _is_map(field):
            if field.message_type.fields_by_name["value"].cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
                for key, item in value.items():
                    yield from _iter_durations(item, f"{field_path}.{key}")
        elif field.is_repeated:
            for index, item in enumerate(value):
                yield from _iter_durations(item, f"{field_path}[{index}]")
        elif field.message_type.full_name == _DURATION_TYPE:
            yield field_path, Duration.from_proto(value)
        else:
            yield from _iter_durations(value, field_path)


def load_and_validate(path: str | Path) -> config_pb2.IrisClusterConfig:
    """Load a config file, fill in defaults and validate it: the entry point for daemons and the CLI."""
    config = apply_defaults(load_config(path))
    validate_config(config, source=str(path))
    return config


# ---------------------------------------------------------------- display


def config_to_dict(config: Message) -> dict[str, Any]:
    """The config as plain data in the YAML vocabulary ("30s", "4GB", "gpu"); it loads back unchanged."""
    result: dict[str, Any] = {}
    # Declaration order reads top-down like the YAML; ListFields sorts by field number.
    for field, value in sorted(config.ListFields(), key=lambda item: item[0].index):
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            result[field.name] = {key: _value_to_plain(value_field, item) for key, item in value.items()}
        elif field.is_repeated:
            result[field.name] = [_value_to_plain(field, item) for item in value]
        else:
            result[field.name] = _value_to_plain(field, value)
    return result


def _value_to_plain(field: FieldDescriptor, value: Any) -> Any:
    if field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
        if field.message_type.full_name == _DURATION_TYPE:
            return str(Duration.from_proto(value))
        return config_to_dict(value)
    if field.cpp_type == FieldDescriptor.CPPTYPE_ENUM:
        return (
            field.enum_type.values_by_number[value]
            .name.removeprefix(_enum_prefix(field.enum_type.name))
            .lower()
        )
    if field.full_name in SIZE_FIELDS:
        return _format_size_exactly(value)
    return value
