"""The `vlbench` command line, one module per command family: `build` (list, params, sample-sources, build,
verify, seal), `score` (predict, merge, evaluate, export-task, perceptual, shortcuts, stress-test,
counterbias), `publish` (compare,
leaderboard, counterbias-compare, push), `serve` (serve, serve worker, serve team add, serve teams, serve reveal,
submit) and `suite` (suite, suite-compare, demo); the options several commands share are declared once in
`options` and the model flags in `models`; `app` holds the typer application and `main`. Heavy modules are
imported inside each command, so `vlbench --help` is instant."""

from pipelines.cli import build, publish, score, serve, suite  # noqa: F401 -- each registers its commands on `app`
from pipelines.cli.app import app, main

# The order `vlbench --help` lists the commands in: the life of a benchmark, from its sources to a report card.
ORDER = ("list", "params", "sample-sources", "build", "verify", "seal", "push", "predict", "merge", "evaluate",
         "export-task", "compare", "leaderboard", "submit", "perceptual", "suite", "suite-compare", "shortcuts",
         "stress-test", "counterbias", "counterbias-compare", "demo")
app.registered_commands.sort(key=lambda command: ORDER.index(command.name or command.callback.__name__))

__all__ = ["app", "main"]
