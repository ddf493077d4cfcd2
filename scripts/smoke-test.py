#!/usr/bin/env python3
"""Validate a cluster end to end from its config, on whatever platform the config names.

    uv run python scripts/smoke-test.py --config examples/local.yaml
    uv run python scripts/smoke-test.py --config cluster.yaml --no-build-images --prefix my-test

Steps: build and push the images the config names (unless --no-build-images), start the
controller with its autoscaler, run the validation jobs of `iris cluster debug validate` (a simple
job, concurrent jobs that make the autoscaler provision in parallel, a coscheduled multi-task job,
and an accelerator job that checks its TPU/GPU environment and computes), collect logs into
--log-dir when something failed, and delete everything the run created. `--prefix` becomes the
cluster's name and label prefix (and its own state directory), so runs do not see each other's
resources. `--pause-before-cleanup` keeps the cluster up after the jobs until Enter is pressed, for
a look at it (or further checks) before it is deleted. Exits 1 with one line per failed step.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import click
import yaml
from google.protobuf import json_format

from iris.cli.cluster_common import configured_images
from iris.cli.validation import StepResult, ValidationFailed, run_step, target_of, validate
from iris.client.client import IrisClient, IrisError
from iris.cluster.controller.lifecycle import (
    controller_connection,
    labelled_resources,
    local_state_dir,
    start_controller,
    stop_all,
)
from iris.cluster.platform.base import Platform, PlatformError, VmLogKind
from iris.cluster.platform.factory import create_platform
from iris.config import config_to_dict, load_and_validate
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2

DEFAULT_JOB_TIMEOUT_S = 600.0
LOG_TAIL_LINES = 2000
# What a step may raise that is the cluster's or the config's fault, not the smoke test's.
_STEP_ERRORS = (ValidationFailed, PlatformError, IrisError, click.ClickException, OSError, TimeoutError, ValueError)


def isolated_config(path: str, prefix: str) -> config_pb2.IrisClusterConfig:
    """The cluster config with `prefix` as its name and label prefix, and a state directory (on
    CoreWeave, a namespace) of its own."""
    config = load_and_validate(path)
    config.name = prefix
    config.platform.label_prefix = prefix
    if config.controller.HasField("local"):
        config.controller.local.state_dir = str(Path(config.controller.local.state_dir) / prefix)
    if config.platform.HasField("coreweave"):
        config.platform.coreweave.namespace = prefix
    return config


class SmokeTest:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.log_dir = Path(args.log_dir or Path(tempfile.gettempdir()) / f"iris-smoke-{args.prefix}")
        self.config = isolated_config(args.config, args.prefix)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # The controller of a local cluster reads its config from a file: this run's, with the prefix.
        self.config_path = self.log_dir / "cluster.yaml"
        self.config_path.write_text(yaml.safe_dump(config_to_dict(self.config), sort_keys=False))
        self.platform: Platform = create_platform(self.config, local_state_dir(self.config), str(self.config_path))
        self.results: list[StepResult] = []
        self.started = False

    def record(self, result: StepResult) -> StepResult:
        self.results.append(result)
        mark = "PASS" if result.passed else "FAIL"
        print(f"{mark}  {result.name} ({result.seconds:.1f}s): {result.detail}", flush=True)
        return result

    def step(self, name: str, action: Callable[[], str]) -> bool:
        def guarded() -> str:
            try:
                return action()
            except _STEP_ERRORS as exc:
                message = exc.message if isinstance(exc, click.ClickException) else str(exc)
                raise ValidationFailed(" ".join(message.split()) or type(exc).__name__) from None
            except Exception as exc:  # noqa: BLE001 - a bug in one step must not skip cleanup
                raise ValidationFailed(f"{type(exc).__name__}: {exc}") from None

        return self.record(run_step(name, guarded)).passed

    # ------------------------------------------------------------ steps

    def build_images(self) -> str:
        images = configured_images(self.config)
        if not images:
            return "skipped: the config names no images (the daemons run from a Python environment)"
        if self.args.no_build_images:
            return f"skipped (--no-build-images): using {', '.join(images.values())}"
        from iris.cli.build import build_and_push

        for kind, image in images.items():
            build_and_push(kind, image)
        return f"built and pushed {', '.join(images.values())}"

    def start_cluster(self) -> str:
        info = start_controller(self.platform, self.config)
        self.started = True
        if info.already_running:
            raise ValidationFailed(
                f"a cluster with prefix '{self.args.prefix}' already runs at {info.url}; pick another --prefix"
            )
        return f"controller {info.handle.worker_id} at {info.url}"

    def run_jobs(self) -> None:
        target = target_of(self.config, self.args.scale_group)
        with controller_connection(self.platform, self.config) as url, IrisClient.remote(url) as client:
            validate(client, target, self.args.job_timeout, self.args.prefix, self.record)

    def collect_logs(self) -> str:
        """The controller's log, every worker's bootstrap and daemon log, the autoscaler's view and
        the failed jobs' output, one file each under --log-dir."""
        written = []

        def save(name: str, read: Callable[[list[str]], None]) -> None:
            lines: list[str] = []
            try:
                read(lines)
            except _STEP_ERRORS as exc:
                lines.append(f"(could not read: {exc})")
            (self.log_dir / name).write_text("\n".join(lines) + "\n")
            written.append(name)

        def vm_log(vm_id: str, kind: VmLogKind) -> Callable[[list[str]], None]:
            return lambda lines: self.platform.vm_log(vm_id, kind, LOG_TAIL_LINES, lines.append)

        for vm in labelled_resources(self.platform, self.config)[0]:
            save(f"controller-{vm.worker_id}.log", vm_log(vm.worker_id, VmLogKind.DAEMON))
        try:
            with controller_connection(self.platform, self.config) as url, IrisClient.remote(url) as client:
                status = client.call("get_autoscaler_status", pb.GetAutoscalerStatusRequest())
                save("autoscaler.json", lambda lines: lines.append(json_format.MessageToJson(status)))
                for worker in client.list_workers():
                    save(f"worker-{worker.worker_id}.log", vm_log(worker.worker_id, VmLogKind.DAEMON))
                    save(f"bootstrap-{worker.worker_id}.log", vm_log(worker.worker_id, VmLogKind.BOOTSTRAP))
                for job in client.list_jobs():
                    if job.state != pb.JOB_STATE_SUCCEEDED:
                        entries = client.job(job.job_id).logs()
                        name = job.job_id.strip("/").replace("/", "_")
                        save(f"job-{name}.log", lambda lines, e=entries: lines.extend(x.data for x in e))
        except _STEP_ERRORS as exc:
            (self.log_dir / "controller-unreachable.txt").write_text(f"{exc}\n")
            written.append("controller-unreachable.txt")
        return f"{len(written)} file(s) in {self.log_dir}"

    def cleanup(self) -> str:
        stopped, slices = stop_all(self.platform, self.config)
        vms, left = labelled_resources(self.platform, self.config)
        if vms or left:
            names = [vm.worker_id for vm in vms] + [handle.slice_id for handle in left]
            raise ValidationFailed(f"still there after cleanup: {', '.join(names)}")
        return f"stopped the controller{'' if stopped else ' (was not running)'} and {len(slices)} slice(s); nothing left"

    # ------------------------------------------------------------ the run

    def run(self) -> int:
        began = time.monotonic()
        print(f"smoke test '{self.args.prefix}' of {self.args.config} ({self.config.platform.WhichOneof('platform')} platform)")
        try:
            if self.step("build images", self.build_images) and self.step("start cluster", self.start_cluster):
                self.run_jobs()
        except KeyboardInterrupt:
            self.record(StepResult("interrupted", False, "Ctrl-C", 0.0))
        except _STEP_ERRORS as exc:
            self.record(StepResult("jobs", False, " ".join(str(exc).split()), 0.0))
        except Exception:  # noqa: BLE001 - a bug here must still reach cleanup and the summary
            self.record(StepResult("smoke test", False, traceback.format_exc().strip().splitlines()[-1], 0.0))
        failed = any(not r.passed for r in self.results)
        if failed and self.started:
            self.step("collect logs", self.collect_logs)
        if self.args.pause_before_cleanup and self.started:
            # Whoever drives the run (a person, a test) looks at the live cluster; a newline or
            # the end of stdin goes on to the cleanup.
            print(f"cluster '{self.args.prefix}' is up (config: {self.config_path}); press Enter to clean up", flush=True)
            sys.stdin.readline()
        if failed and self.args.no_cleanup_on_failure:
            print(f"left the cluster running (--no-cleanup-on-failure); config: {self.config_path}")
        else:
            self.step("cleanup", self.cleanup)
        self.platform.shutdown()
        failures = [r for r in self.results if not r.passed]
        seconds = time.monotonic() - began
        if not failures:
            print(f"smoke test passed: {len(self.results)} steps in {seconds:.0f}s")
            return 0
        print(f"smoke test FAILED ({len(failures)} of {len(self.results)} steps, {seconds:.0f}s); logs in {self.log_dir}:")
        for result in failures:
            print(f"  {result.name}: {result.detail}")
        return 1


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="The cluster config YAML.")
    parser.add_argument("--no-build-images", action="store_true", help="Use the images as they are in the registry.")
    parser.add_argument("--no-cleanup-on-failure", action="store_true", help="Keep the cluster when a step failed.")
    parser.add_argument("--job-timeout", type=float, default=DEFAULT_JOB_TIMEOUT_S, help="Seconds each job step may take.")
    parser.add_argument("--log-dir", default=None, help="Where logs go on failure (default: a directory in the temp dir).")
    parser.add_argument("--prefix", default=f"smoke-{int(time.time())}", help="Name and label prefix of this run's resources.")
    parser.add_argument(
        "--pause-before-cleanup", action="store_true", help="After the jobs, wait for Enter before cleaning up (to inspect the cluster)."
    )
    parser.add_argument("--scale-group", default=None, help="The group the jobs run on (default: most hosts per slice).")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        smoke = SmokeTest(args)
    except (OSError, ValueError, PlatformError) as exc:
        print(f"smoke test cannot start: {exc}", file=sys.stderr)
        return 2
    return smoke.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
