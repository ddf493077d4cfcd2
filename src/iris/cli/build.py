"""`iris build`: build Iris's images and push them to a registry.

    iris build worker-image --tag iris-worker:latest
    iris build controller-image --dockerfile Dockerfile.controller.coreweave
    iris build task-image --offline --base-image my-python:3.11
    iris build push iris-worker:latest --registry ghcr --image-name iris-worker
    iris build push iris-worker:latest --registry gcp --project my-project --region us-central1

Builds run from an Iris checkout: the build context gets Iris and its dependencies exactly as
uv.lock pins them, installed for the image's platform on this machine (from uv's cache, or the
package index when the cache lacks something), so the image build itself only needs the internet
for the steps a Dockerfile marks as such. `--offline` turns those off. Images are built and pushed
by the Docker engine at DOCKER_HOST (or its default socket).
"""

from __future__ import annotations

import os
import platform as host_platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

DEFAULT_GHCR_ORG = "marin-community"
DEFAULT_GCP_REGION = "us-central1"
DEFAULT_GCP_REPOSITORY = "iris"
DEFAULT_PYTHON_VERSION = "3.11"
# Extras of the daemon images: containerd and kubernetes for the worker's runtimes (kubernetes also for
# the CoreWeave platform), gcs and s3 for bundle storage.
DAEMON_EXTRAS = ("containerd", "gcs", "kubernetes", "s3")


@dataclass(frozen=True)
class ImageKind:
    dockerfile: str
    default_tag: str
    extras: tuple[str, ...]


IMAGE_KINDS = {
    "worker": ImageKind("Dockerfile.worker", "iris-worker:latest", DAEMON_EXTRAS),
    "controller": ImageKind("Dockerfile.controller", "iris-controller:latest", DAEMON_EXTRAS),
    # The CoreWeave controller (in-cluster Kubernetes access, no gcloud): `controller-image
    # --dockerfile Dockerfile.controller.coreweave` builds it under this tag.
    "controller-coreweave": ImageKind(
        "Dockerfile.controller.coreweave", "iris-controller-coreweave:latest", DAEMON_EXTRAS
    ),
    "task": ImageKind("Dockerfile.task", "iris-task:latest", ()),
}

_INTERNET_ARG = re.compile(r"^\s*ARG\s+(INSTALL_[A-Z0-9_]+)", re.MULTILINE)


class BuildError(click.ClickException):
    """A build or push that failed, reported as one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


# -- names -------------------------------------------------------------------------------------


def default_tag(kind: ImageKind, dockerfile: str | None) -> str:
    """The tag an untagged build gets: that of the kind whose Dockerfile `dockerfile` is, so each
    image keeps the name `iris build push --registry ...` turns into the one configs use."""
    if dockerfile:
        named = next((k for k in IMAGE_KINDS.values() if k.dockerfile == Path(dockerfile).name), None)
        if named is not None:
            return named.default_tag
    return kind.default_tag


def split_image(image: str) -> tuple[str, str]:
    """("registry/path/name", "tag") of an image reference; the tag defaults to latest."""
    name, _, tag = image.rpartition(":")
    # A colon before the last slash belongs to a registry port, not a tag.
    if not name or "/" in tag:
        return image, "latest"
    return name, tag


def remote_image_name(
    image: str,
    registry: str,
    image_name: str | None = None,
    org: str = DEFAULT_GHCR_ORG,
    project: str | None = None,
    region: str = DEFAULT_GCP_REGION,
    repository: str = DEFAULT_GCP_REPOSITORY,
) -> str:
    """Where `iris build push` puts a local image.

    ghcr -> ghcr.io/<org>/<name>:<tag>; gcp -> <region>-docker.pkg.dev/<project>/<repository>/<name>:<tag>;
    any other value is a registry host[:port] -> <host>/<org>/<name>:<tag> (org optional there).
    """
    local_name, tag = split_image(image)
    name = image_name or local_name.rsplit("/", 1)[-1]
    if registry == "ghcr":
        if not org:
            raise click.UsageError("--org must not be empty for --registry ghcr")
        return f"ghcr.io/{org}/{name}:{tag}"
    if registry == "gcp":
        if not project:
            raise click.UsageError(
                "--registry gcp needs the GCP project: pass --project or set CLOUDSDK_CORE_PROJECT"
            )
        if not region:
            raise click.UsageError("--region must not be empty for --registry gcp")
        return f"{region}-docker.pkg.dev/{project}/{repository}/{name}:{tag}"
    if not registry or "/" in registry:
        raise click.UsageError(f"--registry must be ghcr, gcp or a registry HOST[:PORT], not {registry!r}")
    return f"{registry}/{org}/{name}:{tag}" if org else f"{registry}/{name}:{tag}"


# -- engine ------------------------------------------------------------------------------------


def _docker_client() -> Any:
    try:
        import docker
        import docker.errors
    except ImportError:
        raise BuildError("iris build needs the `docker` package: pip install docker") from None
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as exc:
        raise BuildError(f"cannot reach the Docker engine (DOCKER_HOST={os.environ.get('DOCKER_HOST', 'default')}): {exc}") from None
    return client


def _engine_errors() -> tuple[type[BaseException], ...]:
    import docker.errors
    import requests.exceptions

    return (docker.errors.DockerException, requests.exceptions.RequestException)


# -- build -------------------------------------------------------------------------------------


def project_root() -> Path:
    """The Iris checkout this module runs from, or one at or above the working directory."""
    cwd = Path.cwd().resolve()
    candidates = [Path(__file__).resolve().parents[3], cwd, *cwd.parents]
    for candidate in candidates:
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and re.search(r'^name\s*=\s*"iris"', pyproject.read_text(), re.MULTILINE):
            return candidate
    raise BuildError("iris build runs from an Iris checkout (a directory with Iris's pyproject.toml)")


def _uv() -> list[str]:
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv:
        return [uv]
    if subprocess.run([sys.executable, "-m", "uv", "--version"], capture_output=True, check=False).returncode == 0:
        return [sys.executable, "-m", "uv"]
    raise BuildError("iris build needs uv to install Iris into the image's context: pip install uv")


def _python_platform(docker_platform: str) -> str:
    """uv's name for the platform the image runs on; the manylinux level is Debian bookworm's glibc."""
    arch = docker_platform.rsplit("/", 1)[-1] if docker_platform else host_platform.machine()
    machine = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}.get(arch)
    if machine is None:
        raise BuildError(f"cannot build for platform {docker_platform or arch!r}: use linux/amd64 or linux/arm64")
    return f"{machine}-manylinux_2_36"


def _run_uv(args: list[str], cwd: Path) -> None:
    result = subprocess.run([*_uv(), *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise BuildError(f"uv {args[0]} {args[1] if len(args) > 1 else ''} failed: {detail[-1] if detail else result.returncode}")


def prepare_context(
    context: Path, root: Path, dockerfile: Path, extras: Iterable[str], python_version: str, docker_platform: str
) -> int:
    """Fill `context` with the Dockerfile, deps/ and app/; returns how many packages deps/ holds."""
    shutil.copyfile(dockerfile, context / "Dockerfile")
    requirements = context / "requirements.txt"
    export = ["export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "--quiet", "-o", str(requirements)]
    for extra in extras:
        export += ["--extra", extra]
    _run_uv(export, root)
    target = ["--python-version", python_version, "--python-platform", _python_platform(docker_platform)]
    # The export is the whole locked closure, so nothing is resolved again (--no-deps).
    _run_uv(["pip", "install", "--quiet", "--no-deps", *target, "--target", str(context / "deps"), "-r", str(requirements)], root)
    _run_uv(["pip", "install", "--quiet", "--no-deps", *target, "--target", str(context / "app"), str(root)], root)
    for directory in ("deps", "app"):
        # Console scripts there point at this machine's interpreter; the image writes its own.
        shutil.rmtree(context / directory / "bin", ignore_errors=True)
    requirements.unlink()
    return sum(1 for line in (context / "deps").glob("*.dist-info"))


def internet_build_args(dockerfile: Path) -> dict[str, str]:
    """The INSTALL_* switches a Dockerfile declares for its internet steps, all turned off."""
    return {name: "0" for name in _INTERNET_ARG.findall(dockerfile.read_text())}


def _parse_build_args(pairs: tuple[str, ...]) -> dict[str, str]:
    args = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--build-arg")
        args[key] = value
    return args


def _progress(chunks: Iterator[dict[str, Any]]) -> str | None:
    """Print the engine's build output; returns the image id it reports."""
    image_id = None
    for chunk in chunks:
        if "error" in chunk:
            raise BuildError(f"build failed: {chunk['error']}")
        if "aux" in chunk and isinstance(chunk["aux"], dict):
            image_id = chunk["aux"].get("ID", image_id)
        text = chunk.get("stream", "")
        for line in text.splitlines():
            if line.strip():
                click.echo(f"  {line}")
    return image_id


def build_image(
    kind: ImageKind,
    tag: str | None,
    dockerfile: str | None,
    base_image: str | None,
    build_args: tuple[str, ...],
    offline: bool,
    python_version: str,
    docker_platform: str,
    network: str | None = None,
) -> str:
    root = project_root()
    path = Path(dockerfile) if dockerfile else root / kind.dockerfile
    if not path.is_file():
        raise BuildError(f"no Dockerfile at {path}")
    tag = tag or default_tag(kind, dockerfile)
    args = internet_build_args(path) if offline else {}
    args.update(_parse_build_args(build_args))
    if base_image:
        args["BASE_IMAGE"] = base_image
    client = _docker_client()
    with tempfile.TemporaryDirectory(prefix="iris-build-") as tmp:
        context = Path(tmp)
        platform_name = docker_platform or f"linux/{host_platform.machine()}"
        click.echo(f"Preparing the build context: Iris and its locked dependencies for {platform_name}, Python {python_version}")
        packages = prepare_context(context, root, path, kind.extras, python_version, docker_platform)
        shown = " ".join(f"{key}={value}" for key, value in sorted(args.items()))
        click.echo(f"Building {tag} from {path.name} ({packages} packages){': ' + shown if shown else ''}")
        try:
            chunks = client.api.build(
                path=str(context),
                tag=tag,
                buildargs=args,
                rm=True,
                forcerm=True,
                decode=True,
                platform=docker_platform or None,
                network_mode=network,
            )
            image_id = _progress(chunks)
        except _engine_errors() as exc:
            raise BuildError(f"build of {tag} failed: {getattr(exc, 'explanation', None) or exc}") from None
    click.secho(f"Built {tag}" + (f" ({image_id[:19]})" if image_id else ""), fg="green")
    return tag


def _build_options(kind_name: str):
    kind = IMAGE_KINDS[kind_name]

    def decorate(fn):
        options = [
            click.option("--tag", "-t", help=f"Image tag (default {kind.default_tag})."),
            click.option("--dockerfile", type=click.Path(dir_okay=False), help=f"Dockerfile (default {kind.dockerfile} in the checkout)."),
            click.option("--base-image", help="Base image with Python 3 (the Dockerfile's BASE_IMAGE)."),
            click.option("--build-arg", "build_args", multiple=True, help="KEY=VALUE build argument; repeatable."),
            click.option("--offline", is_flag=True, help="Turn off the Dockerfile's internet steps (its INSTALL_* args)."),
            click.option("--python-version", default=DEFAULT_PYTHON_VERSION, show_default=True, help="The base image's Python."),
            click.option("--platform", "docker_platform", default="", help="Target platform, e.g. linux/arm64 (default: this machine's)."),
            click.option("--network", default=None, help="Network for the build's RUN steps, e.g. host (default: the engine's)."),
            click.option("--push", "push_to", is_flag=True, help="Push the image once built (see --registry, --region)."),
            click.option(
                "--registry",
                default=None,
                help="With --push: ghcr, gcp or a registry HOST[:PORT] (default: gcp when --region is given, "
                "else the registry the tag names).",
            ),
            click.option("--region", default=None, help=f"With --push: the Artifact Registry region (implies --registry gcp; default {DEFAULT_GCP_REGION})."),
            click.option("--project", default=None, help="With --push --registry gcp: the GCP project (default $CLOUDSDK_CORE_PROJECT)."),
        ]
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


@click.group()
def build() -> None:
    """Build Iris's images and push them to a registry."""


def _build_then_push(kind_name: str, options: dict[str, Any]) -> None:
    push_to, registry = options.pop("push_to"), options.pop("registry")
    region, project = options.pop("region"), options.pop("project")
    if not push_to and (registry or region or project):
        raise click.UsageError("--registry, --region and --project say where to push: add --push")
    # A bad destination is a usage error before a build of minutes, not after it.
    tag = options["tag"] or default_tag(IMAGE_KINDS[kind_name], options["dockerfile"])
    destination = _push_destination(tag, registry, region, project) if push_to else None
    tag = build_image(IMAGE_KINDS[kind_name], **options)
    if destination is not None:
        push_image(tag, destination)


def _push_destination(tag: str, registry: str | None, region: str | None, project: str | None) -> str:
    """Where --push sends a built image: the tag itself when no registry is named."""
    if region and not registry:
        registry = "gcp"
    if not registry:
        return tag
    project = project or os.environ.get("CLOUDSDK_CORE_PROJECT") or os.environ.get("GOOGLE_CLOUD_PROJECT")
    org = DEFAULT_GHCR_ORG if registry == "ghcr" else ""
    return remote_image_name(tag, registry, None, org, project, region or DEFAULT_GCP_REGION)


def build_and_push(kind_name: str, image: str) -> None:
    """Build an image kind under the full name a cluster config gives it and push it there."""
    push_image(build_image(IMAGE_KINDS[kind_name], image, None, None, (), False, DEFAULT_PYTHON_VERSION, ""), image)


@build.command("worker-image")
@_build_options("worker")
def worker_image(**options: Any) -> None:
    """Build the worker image (docker and containerd runtimes, docker CLI and crictl)."""
    _build_then_push("worker", options)


@build.command("controller-image")
@_build_options("controller")
def controller_image(**options: Any) -> None:
    """Build the controller image (gcloud); CoreWeave: --dockerfile Dockerfile.controller.coreweave."""
    _build_then_push("controller", options)


@build.command("task-image")
@_build_options("task")
def task_image(**options: Any) -> None:
    """Build the image task containers run in (Python, Iris, uv)."""
    _build_then_push("task", options)


# -- push --------------------------------------------------------------------------------------


def _push_progress(chunks: Iterator[dict[str, Any]]) -> str | None:
    """Print one line per layer state change; returns the pushed digest."""
    digest = None
    last: dict[str, str] = {}
    for chunk in chunks:
        if "error" in chunk:
            raise BuildError(str(chunk["error"]))
        aux = chunk.get("aux")
        if isinstance(aux, dict) and aux.get("Digest"):
            digest = aux["Digest"]
        status, layer = chunk.get("status", ""), chunk.get("id", "")
        if not status or status == "Pushing":
            # Byte counts arrive many times a second; the state changes are what a person reads.
            continue
        if last.get(layer) != status:
            last[layer] = status
            click.echo(f"  {layer + ': ' if layer else ''}{status}")
    return digest


@build.command("push")
@click.argument("image")
@click.option("--registry", required=True, help="ghcr, gcp, or a registry HOST[:PORT].")
@click.option("--image-name", help="Name in the registry (default: the local image's name).")
@click.option("--org", default=None, help=f"ghcr organization or path prefix (ghcr default {DEFAULT_GHCR_ORG}).")
@click.option("--project", default=None, help="GCP project (default $CLOUDSDK_CORE_PROJECT).")
@click.option("--region", default=DEFAULT_GCP_REGION, show_default=True, help="Artifact Registry region.")
@click.option("--repository", default=DEFAULT_GCP_REPOSITORY, show_default=True, help="Artifact Registry repository.")
@click.option("--dry-run", is_flag=True, help="Print where the image would go and stop.")
def push(
    image: str,
    registry: str,
    image_name: str | None,
    org: str | None,
    project: str | None,
    region: str,
    repository: str,
    dry_run: bool,
) -> None:
    """Tag IMAGE for a registry and push it there."""
    if org is None:
        org = DEFAULT_GHCR_ORG if registry == "ghcr" else ""
    project = project or os.environ.get("CLOUDSDK_CORE_PROJECT") or os.environ.get("GOOGLE_CLOUD_PROJECT")
    remote = remote_image_name(image, registry, image_name, org, project, region, repository)
    if dry_run:
        click.echo(remote)
        return
    push_image(image, remote, registry, region)


def push_image(image: str, remote: str, registry: str = "", region: str = DEFAULT_GCP_REGION) -> None:
    """Tag the local `image` as `remote` and push it; BuildError with the engine's reason on failure."""
    client = _docker_client()
    repository_name, tag = split_image(remote)
    try:
        client.api.inspect_image(image)
    except _engine_errors():
        raise BuildError(f"no local image {image}: build it first (iris build ...)") from None
    registry = registry or remote.split("/", 1)[0]
    click.echo(f"Pushing {image} to {remote}")
    try:
        client.api.tag(image, repository_name, tag)
        digest = _push_progress(client.api.push(repository_name, tag=tag, stream=True, decode=True))
    except BuildError as exc:
        raise BuildError(f"push to {remote} failed: {exc.message}{_login_hint(registry, region, exc.message)}") from None
    except _engine_errors() as exc:
        reason = str(getattr(exc, "explanation", None) or exc)
        raise BuildError(f"push to {remote} failed: {reason}{_login_hint(registry, region, reason)}") from None
    click.secho(f"Pushed {remote}" + (f" ({digest})" if digest else ""), fg="green")


def _login_hint(registry: str, region: str, reason: str) -> str:
    if not re.search(r"denied|unauthori[sz]ed|authentication", reason, re.IGNORECASE):
        return ""
    if registry == "gcp":
        return f" (log in with: gcloud auth configure-docker {region}-docker.pkg.dev)"
    if registry == "ghcr":
        return " (log in with: docker login ghcr.io)"
    return f" (log in with: docker login {registry})"
