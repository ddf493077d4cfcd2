"""The `iris` command's entry point.

Small on purpose: the CLI's modules take a while to import, and Ctrl-C in that time must end the
command as any other interruption does (quietly, exit 130), not with a traceback of an import.

`iris run --local` and `iris submit --local` start their cluster here, before the commands are
imported: see `iris.cluster.local_cluster_process`.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iris.cluster.local_cluster_process import ClusterProcess

LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"

# Options of the `iris` group that may come before the command and take no value.
_GROUP_FLAGS = {"-v", "--verbose", "--traceback"}


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format=LOG_FORMAT)


def local_cluster_wanted(args: Sequence[str]) -> tuple[bool, bool]:
    """Whether the command line asks for a throwaway local cluster (`iris [-v] run|submit ...
    --local ...`, options before any `--`), and whether it asks for verbose logs.

    A guess made before click parses the line: a line it accepts is never missed, and a line it
    turns down (a usage error) only costs the cluster's start, stopped again on the way out. Help,
    `--no-wait` and a named cluster are refused by the commands, so they start nothing."""
    position = 0
    verbose = False
    while position < len(args) and args[position] in _GROUP_FLAGS:
        verbose = verbose or args[position] in ("-v", "--verbose")
        position += 1
    if position == len(args) or args[position] not in ("run", "submit"):
        return False, verbose
    options = list(args[position + 1 :])
    if "--" in options:
        options = options[: options.index("--")]
    refused = ("-h", "--help", "--no-wait", "--config", "--controller-url")
    if any(option.split("=", 1)[0] in refused for option in options):
        return False, verbose
    return "--local" in options, verbose


def _fork_local_cluster(args: Sequence[str]) -> ClusterProcess | None:
    wanted, verbose = local_cluster_wanted(args)
    if not wanted:
        return None
    # What the cluster's process and this one both import, imported once before the fork.
    import click  # noqa: F401

    import iris.cluster.types  # noqa: F401
    import iris.rpc.cluster_connect  # noqa: F401
    from iris.cluster.local_cluster_process import fork_cluster

    return fork_cluster(verbose, configure_logging)


def main() -> None:
    cluster = None
    try:
        try:
            cluster = _fork_local_cluster(sys.argv[1:])
            from iris.cli.app import exit_interrupted, iris, quiet_on_closed_pipe
        except KeyboardInterrupt:
            sys.stderr.write("\n")
            sys.exit(128 + signal.SIGINT)
        try:
            iris(prog_name="iris", obj={"local_cluster": cluster} if cluster is not None else {})
        except BrokenPipeError:
            quiet_on_closed_pipe()
        except KeyboardInterrupt as exc:
            exit_interrupted(exc)
    finally:
        # Normally stopped by the command already; this covers a command that never took it.
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
