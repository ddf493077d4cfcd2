"""Choose the Platform a cluster config describes. Adding a provider is one file plus a line here."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from iris.cluster.platform.base import Platform, PlatformError, PlatformProvider
from iris.rpc import config_pb2

# Each provider's module by its name in the config's platform oneofs. A provider's module is
# imported when a config names it: the cloud clients behind the others (Kubernetes, Google APIs,
# httpx) are not what a local cluster should pay for at start.
_PROVIDER_MODULES = {
    "gcp": "iris.cluster.platform.gcp",
    "manual": "iris.cluster.platform.manual",
    "local": "iris.cluster.platform.local",
    "coreweave": "iris.cluster.platform.coreweave",
}


class _Providers(Mapping[str, PlatformProvider]):
    def __getitem__(self, name: str) -> PlatformProvider:
        return importlib.import_module(_PROVIDER_MODULES[name]).PROVIDER

    def __iter__(self) -> Iterator[str]:
        return iter(_PROVIDER_MODULES)

    def __len__(self) -> int:
        return len(_PROVIDER_MODULES)


PROVIDERS: Mapping[str, PlatformProvider] = _Providers()


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
