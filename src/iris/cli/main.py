"""The `iris` command's entry point.

Small on purpose: the CLI's modules take a while to import, and Ctrl-C in that time must end the
command as any other interruption does (quietly, exit 130), not with a traceback of an import.
"""

from __future__ import annotations

import signal
import sys


def main() -> None:
    try:
        from iris.cli.app import exit_interrupted, iris, quiet_on_closed_pipe
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        sys.exit(128 + signal.SIGINT)
    try:
        iris(prog_name="iris", obj={})
    except BrokenPipeError:
        quiet_on_closed_pipe()
    except KeyboardInterrupt as exc:
        exit_interrupted(exc)


if __name__ == "__main__":
    sys.exit(main())
