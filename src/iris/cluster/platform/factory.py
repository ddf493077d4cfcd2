"""Choose the Platform a cluster config describes. Adding a provider is one file plus a line here."""

from __future__ import annotations

from pathlib import Path

from iris.cluster.platform import coreweave, gcp, local, manual
from iris.cluster.platform.base import Platform, PlatformError, PlatformProvider
from iris.rpc import config_pb2

PROVIDERS: dict[str, PlatformProvider] = {
    provider.name: provider
    for provider in (gcp.PROVIDER, manual.PROVIDER, local.PROVIDER, coreweave.PROVIDER)
}


def provider_for(platform: str | None) -> PlatformProvider | None:
    """The provider for a platform oneof's case name; None when no platform is chosen."""
    return PROVIDERS.get(platform) if platform else None


def create_platform(
    config: config_pb2.IrisClusterConfig, state_dir: Path, config_path: str | None = None
) -> Platform:
    """The platform for the resolved `config`; `state_dir` is where a platform that keeps local
    records puts them."""
    provider = provider_for(config.platform.WhichOneof("platform"))
    if provider is None:
        raise PlatformError(
            "the cluster config names no platform: set one of "
            + ", ".join(f"platform.{name}" for name in PROVIDERS)
        )
    return provider.create(config, state_dir, config_path)
