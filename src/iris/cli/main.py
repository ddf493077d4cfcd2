"""The `iris` command."""

from __future__ import annotations

import logging
import sys

import click

from iris.cli.actor import actor
from iris.cli.build import build
from iris.cli.cluster import cluster
from iris.cli.job import job, run, submit

# Errors a user can act on: one clear line, no traceback (unless --traceback).
_USER_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, ValueError, OSError, TimeoutError, KeyError)


class IrisGroup(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except _USER_ERRORS as exc:
            if ctx.params.get("show_traceback"):
                raise
            message = str(exc) or type(exc).__name__
            click.secho(f"error: {message}", err=True, fg="red")
            click.secho("(run with --traceback for details)", err=True, dim=True)
            ctx.exit(1)


@click.group(cls=IrisGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--traceback", "show_traceback", is_flag=True, help="Show full tracebacks on errors.")
@click.option("-v", "--verbose", is_flag=True, help="Log what Iris is doing.")
@click.version_option(package_name="iris", prog_name="iris")
def iris(show_traceback: bool, verbose: bool) -> None:
    """Iris: run jobs on accelerator clusters.

    \b
    Quick start:
      iris run --local -- python -c "print('hello from iris')"
      iris cluster --config examples/local.yaml start
      iris job list --config examples/local.yaml
    """
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


iris.add_command(run)
iris.add_command(submit)
iris.add_command(job)
iris.add_command(cluster)
iris.add_command(build)
iris.add_command(actor)


def main() -> None:
    iris(prog_name="iris")


if __name__ == "__main__":
    sys.exit(main())
