"""Choose the Platform a cluster config describes. Adding a provider is one file plus a line here."""

from __future__ import annotations

from pathlib import Path

from iris.cluster.platform.base import Platform, PlatformError
from iris.config import DEFAULT_KILL_GRACE_PERIOD, DEFAULT_LABEL_PREFIX
from iris.rpc import config_pb2


def create_platform(
    config: config_pb2.IrisClusterConfig, state_dir: Path, config_path: str | None = None
) -> Platform:
    """The platform for `config`; `state_dir` is where a platform that keeps local records puts them."""
    label_prefix = config.platform.label_prefix or DEFAULT_LABEL_PREFIX
    which = config.platform.WhichOneof("platform")
    if which == "local":
        from iris.cluster.platform.local import LocalPlatform

        return LocalPlatform(
            state_dir / "platform",
            label_prefix,
            {name: group.resources for name, group in config.scale_groups.items()},
            config.defaults.timeouts.kill_grace_period.milliseconds / 1000 or DEFAULT_KILL_GRACE_PERIOD.seconds,
            config_path,
        )
    if which == "manual":
        from iris.cluster.platform.manual import ManualPlatform

        return ManualPlatform(config)
    if which == "gcp":
        from iris.cluster.platform.gcp import GcpPlatform

        return GcpPlatform(config)
    if which is None:
        raise PlatformError("the cluster config names no platform: set platform.local, gcp, manual or coreweave")
    raise PlatformError(
        f"the {which} platform is not available in this version of Iris; the local, manual and gcp platforms are"
    )
