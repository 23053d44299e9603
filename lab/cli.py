"""`python -m lab ...` (`make lab-up` and friends): bring the lab up and down."""

from __future__ import annotations

import time
from pathlib import Path

import click

from lab import personality as personality_mod
from lab import repo_model as model
from lab.fleet import owner_alive
from lab.lab import Lab, unavailable_reason
from lab.profiles import profile_names
from lab.util import LabError
from provisioner.exitcodes import ExitCode

lab_dir_option = click.option(
    "--lab-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Lab directory (default $PROVISION_LAB_DIR or /var/tmp/provision-lab).",
)


def _need_lab() -> None:
    reason = unavailable_reason()
    if reason:
        click.echo(f"Error: the simulated lab cannot run here: {reason}.", err=True)
        raise SystemExit(int(ExitCode.SETUP))


@click.group()
def lab() -> None:
    """The simulated GPU lab: systemd-nspawn hosts with fake NVIDIA GPUs, a signed fake NVIDIA
    repository and a PyTorch wheelhouse on 127.0.0.1. Needs root, systemd-nspawn and overlayfs."""


personality_option = click.option(
    "--personality",
    type=click.Choice([*personality_mod.names(), "all"]),
    default=None,
    help="Host personality (default ubuntu2204, or $PROVISION_LAB_PERSONALITY): ubuntu2204 "
    "(Debian 12 presented as Ubuntu 22.04), debian11, debian12.",
)


@lab.command()
@personality_option
@lab_dir_option
def build(personality: str | None, lab_dir: Path | None) -> None:
    """Build (or reuse) the base image(s) and the wheelhouse."""
    _need_lab()
    the_lab = Lab(lab_dir)
    names = personality_mod.names() if personality == "all" else [personality]
    for name in names:
        started = time.monotonic()
        try:
            base = the_lab.ensure_base(log=True, personality=name)
        except LabError as exc:
            raise click.ClickException(str(exc)) from exc
        shown = base.personality
        click.echo(f"base {shown}: {base.lowerdir} ({time.monotonic() - started:.1f}s)")
    click.echo(f"wheelhouse: {the_lab.dir / 'wheelhouse'}")


@lab.command()
@click.option(
    "--level",
    type=click.Choice(["U", "P"]),
    multiple=True,
    default=("U",),
    show_default=True,
    help="Confidence levels to list (U unconfirmed, P partly confirmed).",
)
def facts(level: tuple[str, ...]) -> None:
    """List the repository models' facts at the given confidence (lab/repos/*.yml)."""
    for name in model.model_names():
        for fact in model.facts(model.load(name), tuple(level)):
            detail = f": {fact.detail}" if fact.detail else ""
            click.echo(f"[{fact.confidence}] {name}: {fact.subject} ({fact.what}){detail}")


def _parse_profiles(value: str) -> list[str]:
    names = [p.strip() for p in value.split(",") if p.strip()]
    unknown = [p for p in names if p not in profile_names()]
    if not names or unknown:
        raise click.BadParameter(
            f"unknown profile(s) {', '.join(unknown) or repr(value)}; "
            f"known: {', '.join(profile_names())}"
        )
    return names


@lab.command()
@click.option(
    "--hosts",
    "-n",
    type=click.IntRange(1, 16),
    default=1,
    show_default=True,
    help="Number of hosts (1-16).",
)
@click.option(
    "--profile",
    "-p",
    default="h100-sxm-8",
    show_default=True,
    help="GPU profile(s), comma-separated; host i gets the i-th (the last repeats). "
    f"Known: {', '.join(profile_names())}.",
)
@personality_option
@lab_dir_option
def up(hosts: int, profile: str, personality: str | None, lab_dir: Path | None) -> None:
    """Boot a fleet that stays up until `python -m lab down` (make lab-down)."""
    profiles = _parse_profiles(profile)
    if personality == "all":
        raise click.BadParameter("one personality per fleet", param_hint="--personality")
    _need_lab()
    the_lab = Lab(lab_dir)
    fleet_dir = the_lab.dir / "fleet"
    if (fleet_dir / "fleet.json").exists():
        raise click.ClickException(
            f"a lab fleet is already up in {fleet_dir}; run `python -m lab down` (make lab-down)"
        )
    try:
        t0 = time.monotonic()
        the_lab.ensure_base(log=True, personality=personality)
        repo = the_lab.start_detached_repo()
        t1 = time.monotonic()
        fleet = the_lab.create_fleet(
            hosts, profiles, path=fleet_dir, detached=True, personality=personality
        )
        t2 = time.monotonic()
    except LabError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"lab up: {len(fleet.hosts)} {fleet.personality} host(s) in {t2 - t1:.1f}s "
        f"(base+repo {t1 - t0:.1f}s)"
    )
    for h in fleet.hosts:
        click.echo(f"  {h.name:6} {h.address:15} {h.profile}")
    click.echo(f"repo:      {repo.repos_url}/{fleet.distro_arch}/")
    click.echo(f"wheels:    {repo.base_url}/wheels/")
    click.echo(f"inventory: {fleet.inventory_path}")
    click.echo(f"stack:     {fleet.stack_path}")
    click.echo("run:")
    click.echo(
        f"  provision -i {fleet.inventory_path} --stack {fleet.stack_path} "
        "--report-dir ./lab-report"
    )
    click.echo(
        f"  ssh -i {fleet.hosts[0].key} -o UserKnownHostsFile={fleet.known_hosts} "
        f"{fleet.hosts[0].user}@{fleet.hosts[0].address}"
    )


@lab.command()
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Also destroy fleets of test runs that are still alive (other people's runs too).",
)
@lab_dir_option
def down(everything: bool, lab_dir: Path | None) -> None:
    """Tear down the `lab up` fleet, its server, and fleets left behind by killed test runs."""
    _need_lab()
    the_lab = Lab(lab_dir)
    failed = []
    for fleet in the_lab.fleets():
        if fleet.owner_pid is not None and owner_alive(fleet) and not everything:
            click.echo(f"kept fleet {fleet.id} (owned by live process {fleet.owner_pid})")
            continue
        try:
            fleet.destroy()
            click.echo(f"destroyed fleet {fleet.id} ({len(fleet.hosts)} host(s)) in {fleet.dir}")
        except LabError as exc:
            failed.append(str(exc))
    if the_lab.stop_detached_repo():
        click.echo("stopped the repo server")
    if failed:
        raise click.ClickException("; ".join(failed))


@lab.command()
@lab_dir_option
def status(lab_dir: Path | None) -> None:
    """Show the base image, the repo server and every fleet with its hosts' state."""
    the_lab = Lab(lab_dir)
    click.echo(f"lab dir: {the_lab.dir}")
    bases = sorted(p.name for p in the_lab.dir.glob("base-*") if (p / "recipe.json").exists())
    bases += sorted(p.name for p in the_lab.dir.glob("present-*") if (p / "done").exists())
    click.echo(f"base:    {', '.join(bases) or 'not built'}")
    repo = the_lab.detached_repo()
    click.echo(f"server:  {repo.base_url if repo else 'not running'}")
    fleets = the_lab.fleets()
    if not fleets:
        click.echo("fleets:  none")
    for fleet in fleets:
        click.echo(f"fleet {fleet.id} ({fleet.personality}, {fleet.dir}):")
        states = fleet.state() if not unavailable_reason() else {}
        for h in fleet.hosts:
            click.echo(f"  {h.name:6} {h.address:15} {h.profile:12} {states.get(h.name, '?')}")
        click.echo(f"  inventory: {fleet.inventory_path}")
