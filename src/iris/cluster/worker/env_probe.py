"""What this host offers: cpu, memory, disk, devices and attributes the scheduler matches on."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import psutil

from iris.cluster.types import (
    ATTR_DEVICE_VARIANT,
    ATTR_PREEMPTIBLE,
    ATTR_REGION,
    ATTR_SCALE_GROUP,
    ATTR_TPU_NAME,
    ATTR_TPU_TOPOLOGY,
    ATTR_TPU_WORKER_ID,
    ATTR_ZONE,
    attribute_to_proto,
    parse_attribute,
    tpu_device,
    tpu_topology,
)
from iris.rpc import cluster_pb2 as pb

# Attributes read from the environment when present, so a worker on a TPU VM or in a Pod reports
# where it is without extra flags.
_ENV_ATTRIBUTES = {
    "TPU_NAME": ATTR_TPU_NAME,
    "TPU_WORKER_ID": ATTR_TPU_WORKER_ID,
    "TPU_TOPOLOGY": ATTR_TPU_TOPOLOGY,
    "IRIS_ZONE": ATTR_ZONE,
    "IRIS_REGION": ATTR_REGION,
    "IRIS_SCALE_GROUP": ATTR_SCALE_GROUP,
    "IRIS_PREEMPTIBLE": ATTR_PREEMPTIBLE,
}


def local_ip() -> str:
    """The address the host's name resolves to; loopback when it does not resolve."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def attribute_value(text: str) -> pb.AttributeValue:
    return attribute_to_proto(parse_attribute(text))


def probe(
    cache_dir: Path,
    runtime: str,
    cpu_override: float | None = None,
    memory_override: int | None = None,
    attributes: dict[str, str] | None = None,
    device: pb.DeviceConfig | None = None,
) -> pb.WorkerMetadata:
    cache_dir.mkdir(parents=True, exist_ok=True)
    cpus = cpu_override if cpu_override is not None else (len(os.sched_getaffinity(0)) or os.cpu_count() or 1)
    metadata = pb.WorkerMetadata(
        hostname=socket.gethostname(),
        ip_address=local_ip(),
        cpu_millicores=round(cpus * 1000),
        memory_bytes=memory_override if memory_override is not None else psutil.virtual_memory().total,
        disk_bytes=psutil.disk_usage(str(cache_dir)).free,
        runtime=runtime,
    )
    if device is None and os.environ.get("TPU_ACCELERATOR_TYPE"):
        # On a TPU VM the host says what it is part of.
        variant = os.environ["TPU_ACCELERATOR_TYPE"]
        device = tpu_device(variant, tpu_topology(variant).chips_per_host)
    if device is not None:
        metadata.device.CopyFrom(device)
        kind = device.WhichOneof("device")
        metadata.attributes[ATTR_DEVICE_VARIANT].CopyFrom(attribute_value(getattr(device, kind).variant))
    merged = {attr: os.environ[var] for var, attr in _ENV_ATTRIBUTES.items() if os.environ.get(var)}
    merged.update(attributes or {})
    for key, value in merged.items():
        metadata.attributes[key].CopyFrom(attribute_value(value))
    return metadata
