"""The challenge service's commands: `vlbench serve CONFIG` (the service), `vlbench serve team add NAME` (a team
or a host and its token) and `vlbench submit` (a file to a running service)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.core import TyperGroup

from pipelines.cli.app import app, echo_err
from pipelines.cli.options import overwrite_option


class _ServeGroup(TyperGroup):
    """`vlbench serve CONFIG` runs the service; `vlbench serve team ...` manages teams: a first argument that is not
    a subcommand is the CONFIG of `run`."""

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().resolve_command(ctx, args)


serve_app = typer.Typer(cls=_ServeGroup, no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                        help="Run a challenge: `vlbench serve CONFIG [--host H] [--port P] [--workers N]` serves the "
                             "submission API and scores submissions against sealed answers; `vlbench serve team add "
                             "NAME --config CONFIG` adds a team, `team revoke` / `team rotate` end its token "
                             "(docs: Host a challenge).")
team_app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                       help="The challenge's teams and hosts.")
serve_app.add_typer(team_app, name="team")
app.add_typer(serve_app, name="serve")

CONFIG = typer.Argument(..., metavar="CONFIG", help="The challenge's YAML configuration.")
CONFIG_OPTION = typer.Option(..., "--config", metavar="CONFIG", help="The challenge's YAML configuration.")


@serve_app.command("run", hidden=True)
def serve_run(
    config: Path = CONFIG,
    host: str = typer.Option("127.0.0.1", "--host", help="The address to listen on (loopback by default; put a "
                                                         "reverse proxy with TLS in front of it)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="The port to listen on."),
    workers: int = typer.Option(1, "--workers", min=0, max=64,
                                help="Scoring worker processes started here (0: workers run elsewhere)."),
):
    """Run the service: the web application and its scoring workers."""
    from pipelines.serve.run import serve

    serve(config, host, port, workers)


@serve_app.command("worker")
def serve_worker(
    config: Path = CONFIG,
    workers: int = typer.Option(1, "--workers", min=1, max=64, help="Scoring worker processes."),
):
    """Run scoring workers only (on another machine: the same PostgreSQL database and a shared storage folder)."""
    from pipelines.serve.run import work

    work(config, workers)


@team_app.command("add")
def team_add(
    name: str = typer.Argument(..., metavar="NAME", help="The team's name, as its pages show it."),
    config: Path = CONFIG_OPTION,
    host: bool = typer.Option(False, "--host", help="A host: sees every submission and its full metrics."),
):
    """Add a team (or a host) and print its token, once: only its hash is kept."""
    from pipelines.serve.config import load_config

    token = load_config(config).store().add_team(name, host=host)
    echo_err(f"{'host' if host else 'team'} {name!r} added; its token follows, shown this once (set it as "
             "VLBENCH_TOKEN for `vlbench submit`):")
    typer.echo(token)  # stdout, unmasked: the one place a token is ever shown


@team_app.command("revoke")
def team_revoke(
    name: str = typer.Argument(..., metavar="NAME", help="The team's (or host's) name."),
    config: Path = CONFIG_OPTION,
):
    """End a team's (or host's) token and every page session it opened, at once (a leaked token); its submissions
    stay. `rotate` gives it a new token."""
    from pipelines.serve.config import load_config

    load_config(config).store().revoke(name)
    echo_err(f"{name!r}: its token and every session it opened are ended; `vlbench serve team rotate` gives it a new "
             "one")


@team_app.command("rotate")
def team_rotate(
    name: str = typer.Argument(..., metavar="NAME", help="The team's (or host's) name."),
    config: Path = CONFIG_OPTION,
):
    """Replace a team's (or host's) token: the old one and its sessions end at once; the new one is printed, once."""
    from pipelines.serve.config import load_config

    token = load_config(config).store().revoke(name, rotate=True)
    echo_err(f"{name!r}: its old token and every session it opened are ended; its new token follows, shown this "
             "once:")
    typer.echo(token)  # stdout, unmasked: as `team add`, the one place a token is shown


@serve_app.command("teams")
def teams_list(config: Path = CONFIG_OPTION):
    """List the teams and hosts (never their tokens)."""
    from pipelines.serve.config import load_config

    for team in load_config(config).store().teams():
        typer.echo(f"{team.id}\t{'host' if team.host else 'team'}\t{team.name}")


@serve_app.command("reveal")
def reveal_command(
    config: Path = CONFIG,
    out: Path = typer.Option(..., "--out", metavar="DIR", help="The folder to publish: answer files, submissions, "
                                                                 "reveal.json."),
    before_end: bool = typer.Option(False, "--before-end", help="Reveal a phase that has not ended."),
    overwrite: bool = overwrite_option("Replace a DIR this command did not write."),
):
    """The end of a challenge: the sealed answers (salt included) and every scored submission, to publish."""
    from pipelines.serve.config import load_config
    from pipelines.serve.reveal import reveal

    record = reveal(load_config(config), out, before_end, overwrite)
    for name, phase in record["phases"].items():
        typer.echo(f"{name}: answers (commitment {phase['commitment']}) and {len(phase['submissions'])} scored "
                   "submission(s)")
    typer.echo(f"revealed into {out}: publish it; `vlbench verify PUBLIC --answers {out}/PHASE/answers.zip` checks "
               "each commitment")


@app.command("submit")
def submit_command(
    file: Path = typer.Argument(..., metavar="FILE", help="The predictions (any format `vlbench evaluate` reads)."),
    server: str = typer.Option(..., "--server", metavar="URL", help="The challenge service, e.g. "
                                                                     "https://challenge.example.org"),
    phase: str = typer.Option(..., "--phase", metavar="PHASE", help="The phase to submit to."),
    wait: float = typer.Option(0.0, "--wait", metavar="SECONDS", min=0.0,
                               help="Wait up to this long for the score (0: return once it is queued)."),
    timeout: float = typer.Option(600.0, "--timeout", metavar="SECONDS", min=1.0, max=86_400.0,
                                  help="The longest one request may take, the upload and the whole answer."),
):
    """Submit a prediction file to a challenge; the team's token is read from VLBENCH_TOKEN."""
    from core.errors import SubmissionError
    from core.sanitise import sanitise
    from pipelines.serve.client import record_lines, submit

    record = submit(server, phase, file, wait, seconds=timeout)
    for line in record_lines(record):
        typer.echo(line)
    if record["status"] == "refused":
        raise SubmissionError(f"submission {record['id']} refused: {sanitise(record.get('error'), (), 500)}")
