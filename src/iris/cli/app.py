"""The `iris` command group and its error handling; `iris.cli.main` is the entry point."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import NoReturn

import click

from iris.cli.connect import (
    add_option_everywhere,
    config_option,
    controller_url_option,
    global_connection_options,
)
from iris.cli.main import configure_logging

# Errors a user can act on: one clear line, no traceback (unless --traceback).
_USER_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, ValueError, OSError, TimeoutError, KeyError)


# Each subcommand by the module that defines it, imported only when a command line names it:
# `iris run` must not pay for the imports of the cluster, build and actor commands.
_SUBCOMMANDS = {
    "run": "iris.cli.job",
    "submit": "iris.cli.job",
    "job": "iris.cli.job",
    "cluster": "iris.cli.cluster",
    "build": "iris.cli.build",
    "actor": "iris.cli.actor",
    "rpc": "iris.cli.rpc",
    "login": "iris.cli.auth",
    "token": "iris.cli.auth",
}


class IrisGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_SUBCOMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _SUBCOMMANDS:
            command = getattr(importlib.import_module(_SUBCOMMANDS[cmd_name]), cmd_name)
            add_option_everywhere(command, traceback_option)
            if cmd_name == "cluster":
                add_option_everywhere(command, config_option)
                add_option_everywhere(command, controller_url_option)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            quiet_on_closed_pipe()
        except KeyboardInterrupt as exc:
            # Ctrl-C that no command turned into its own exit (e.g. while a command starts up).
            exit_interrupted(exc)
        except _USER_ERRORS as exc:
            if (ctx.obj or {}).get("show_traceback"):
                raise
            message = str(exc) or type(exc).__name__
            click.secho(f"error: {message}", err=True, fg="red")
            click.secho("(add --traceback to the command for details)", err=True, dim=True)
            ctx.exit(1)


def quiet_on_closed_pipe() -> None:
    """The reader went away (`iris job logs | head`): stop quietly, as `cat` would.

    Anything still buffered for stdout would raise again at exit, so stdout now points nowhere.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(128 + signal.SIGPIPE)


def exit_interrupted(exc: KeyboardInterrupt) -> NoReturn:
    """Exit as a shell expects of an interrupted command: quietly, with 128 + the signal."""
    sys.stderr.write("\n")
    sys.exit(128 + getattr(exc, "signum", signal.SIGINT))


def _remember_traceback(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.find_root().ensure_object(dict)["show_traceback"] = True
    return value


def traceback_option() -> click.Option:
    return click.Option(
        ["--traceback"],
        is_flag=True,
        expose_value=False,
        callback=_remember_traceback,
        help="Show full tracebacks on errors.",
    )


@click.group(cls=IrisGroup, context_settings={"help_option_names": ["-h", "--help"]})
@global_connection_options
@click.option("-v", "--verbose", is_flag=True, help="Log what Iris is doing.")
@click.version_option(package_name="iris", prog_name="iris")
def iris(verbose: bool) -> None:
    """Iris: run jobs on accelerator clusters.

    \b
    Quick start:
      iris run --local -- python -c "print('hello from iris')"
      iris cluster --config examples/local.yaml start
      iris job list --config examples/local.yaml
    """
    configure_logging(verbose)


add_option_everywhere(iris, traceback_option)

