"""The `provision` command line.

Importing this module must stay cheap (`provision --help` in well under a second): subcommands are
loaded lazily by name, and nothing here imports ansible_runner, paramiko, rich or yaml.
"""

from __future__ import annotations

import importlib
import sys

import click
from click.shell_completion import CompletionItem

from provisioner import route
from provisioner.exitcodes import EXIT_CODES_HELP, ExitCode

# name -> "module:attribute", imported on first use
SUBCOMMANDS = {
    "run": "provisioner.commands.run:run",
    "check": "provisioner.commands.check:check",
    "validate": "provisioner.commands.validate:validate",
    "preflight": "provisioner.commands.preflight:preflight",
    "stack": "provisioner.commands.stack:stack",
    "history": "provisioner.commands.history:history",
    "checks": "provisioner.commands.checks:checks",
}
HELP_LINES = {
    "check": "Read-only compliance check (exit 0 compliant, 5 drift).",
    "validate": "Run the validation role alone.",
    "preflight": "SSH probe of all hosts in parallel, no Ansible.",
    "stack": "Show or validate the stack manifest.",
    "history": "List earlier runs, diff two of them, or compare busbw across the fleet.",
    "checks": "List every check id: what it verifies and how to fix it.",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when they are run (or their help shown)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*SUBCOMMANDS, *self.commands])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        module = importlib.import_module(module_name)
        cmd = getattr(module, attr)
        if not isinstance(cmd, click.Command):
            raise TypeError(f"{target} is not a click command")
        self.commands[cmd_name] = cmd
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help without importing every subcommand; `run` is the default, not listed.
        rows = [(name, HELP_LINES.get(name, "")) for name in self.list_commands(ctx)
                if name != route.DEFAULT]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # The group holds only --version and --help: every other option goes to its subcommand
        # (`run` when none is named), wherever it was written (provisioner.route).
        if not ctx.resilient_parsing:
            args = route.route(self, ctx, args)
        return super().parse_args(ctx, args)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        # `provision --st<Tab>`: the full run's options complete before a subcommand too
        items = super().shell_complete(ctx, incomplete)
        if incomplete.startswith("-"):
            run = self.get_command(ctx, route.DEFAULT)
            if run is not None:
                sub = click.Context(run, parent=ctx, info_name=route.DEFAULT)
                items += [i for i in run.shell_complete(sub, incomplete)
                          if i.value not in {x.value for x in items}]
        return items


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from provisioner.session import versions  # noqa: PLC0415

    v = versions()
    click.echo(f"provision {v['provision']}")
    click.echo(f"ansible-core {v['ansible-core']}")
    click.echo(f"ansible-runner {v['ansible-runner']}")
    click.echo(f"Python {v['python']} ({sys.executable})")
    ctx.exit(0)


EPILOG = (
    "Without a subcommand, `provision --host HOST` (or -i INVENTORY) runs the full provisioning: "
    "preflight, driver, CUDA, cuDNN, NCCL, environment, PyTorch, validation.\n\n" + EXIT_CODES_HELP
)


@click.group(
    cls=LazyGroup,
    invoke_without_command=True,
    epilog=EPILOG,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version,
              help="Show provision, ansible-core, ansible-runner and Python versions.")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Provision GPU servers to a validated multi-GPU training stack, and check fleets nightly.

    The options of the full run: `provision run --help`."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())  # `provision` alone: the help, as a usage error
        ctx.exit(2)


def _terminate(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM (systemd stop, a scheduler's kill) ends like Ctrl-C: exit 130


def main(argv: list[str] | None = None) -> None:
    """Console entry point: maps exceptions to the documented exit codes."""
    import signal  # noqa: PLC0415

    from provisioner.runner import become_subreaper  # noqa: PLC0415

    # SIGTERM (systemd stop) and SIGHUP (a dropped SSH session to the controller) end like Ctrl-C
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    become_subreaper()  # a cancelled run's orphaned workers come back to us to be stopped
    try:
        rv = cli.main(args=argv, prog_name="provision", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("\ninterrupted", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except ImportError as exc:  # a dependency missing or broken at run time: a broken install
        click.echo(
            f"setup error: cannot import {exc.name or 'a dependency'} ({exc}); the installation is "
            "broken: reinstall provision into its environment (pip install --force-reinstall "
            "provision, or make venv in a checkout)",
            err=True,
        )
        sys.exit(int(ExitCode.SETUP))
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
