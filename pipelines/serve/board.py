"""A phase's public leaderboard: a static page of the leaderboard site (evaluator/publish/site.py: its templates,
autoescaped, its Content-Security-Policy, its sort script), `<storage>/site/<phase>/index.html` with the same rows
as `board.json`, written again by the worker after each score (and by the web process when it starts), and served
by the service at `/leaderboard/<phase>/`; the folder `<storage>/site/` can be published whole as it is.

Each team's row holds what the team itself is shown (pipelines/serve/worker.py): on a hidden phase the headline
scores rounded as configured with their intervals, on a public one the same headline computed from its metrics;
never a per-item or per-type score. Without the Ladder a row is the team's best submission by the phase's first
metric; under it, the team's latest released score (the Ladder releases only improvements). A host's submissions
(baselines, checks) are not ranked."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from pipelines.serve.config import SITE, Config, Phase
from pipelines.serve.views import as_text, headline_scores

LOCK = ".board.lock"


def _scores(task, phase: Phase, row) -> list[dict]:
    if phase.hidden or phase.ladder is not None:  # what the team was shown; the metrics stay the hosts'
        return json.loads(row["shown"])["scores"]
    return headline_scores(task, phase, json.loads(row["metrics"]))


def board_rows(store, phase: Phase, final: bool = False) -> list[dict]:
    """The leaderboard's rows, ranked: [{rank, team, scores, count, when}] (the same `rank` for equal scores).
    `final` (a phase with a private part, once ended): each team's best submission on the public part, ranked by its
    private part's scores (a team that chose no submission is judged by its best shown one, as on Kaggle)."""
    from evaluator.tasks import get_task

    task = get_task(phase.benchmark)
    key = (phase.metrics or tuple(h.key for h in task.headline))[0]
    higher = next(h.higher_is_better for h in task.headline if h.key == key)
    teams: dict[int, dict] = {}
    for row in store.submissions(phase=phase.name):  # newest first
        if row["status"] != "scored" or row["team_host"]:
            continue
        scores = _scores(task, phase, row)
        value = scores[0]["value"]
        entry = teams.setdefault(row["team"], {"team": row["team_name"], "count": 0, "scores": None, "when": None})
        entry["count"] += 1
        best = None if entry["scores"] is None else entry["scores"][0]["value"]
        newer_ladder = phase.ladder is not None and entry["scores"] is not None  # the latest release stays
        if not newer_ladder and (entry["scores"] is None or (value is not None and (
                best is None or (value > best if higher else value < best)))):
            entry.update(scores=scores, when=row["finished"], private=row["private_view"])
    if final:
        for entry in teams.values():
            entry["scores"] = json.loads(entry["private"])["scores"] if entry["private"] else \
                [{**s, "value": None, "interval": None} for s in entry["scores"]]  # scored before the part existed

    def order(entry):
        value = entry["scores"][0]["value"]
        return (value is None, 0.0 if value is None else (-value if higher else value), entry["team"])

    ranked, rank, last = [], 0, object()
    for n, entry in enumerate(sorted(teams.values(), key=order), start=1):
        value = entry["scores"][0]["value"]
        if value != last:
            rank, last = n, value
        ranked.append({"rank": rank, **{k: v for k, v in entry.items() if k != "private"}})
    return ranked


def is_final(phase: Phase) -> bool:
    """The phase's leaderboard is its final standing: it has a private part and has ended."""
    return bool(phase.private) and phase.ended_at(datetime.datetime.now(datetime.timezone.utc))


def write_board(config: Config, store, phase: Phase) -> Path:
    """Write the phase's leaderboard (index.html, board.json and the site's assets) from the records as they are
    now; writers take turns (a lock file), each reading the records after taking it, so the last page written
    holds every score recorded before it. Each file is replaced atomically: a reader sees the old page or the new."""
    import fcntl

    from core.jsonout import dumps
    from core.outdir import write_atomically
    from evaluator.publish.site import assets, page
    from evaluator.tasks import get_task

    site = config.storage / SITE
    folder = site / phase.name
    folder.mkdir(parents=True, exist_ok=True)
    with open(config.storage / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        final = is_final(phase)
        rows = board_rows(store, phase, final)
        task = get_task(phase.benchmark)
        keys = phase.metrics or tuple(h.key for h in task.headline)
        labels = {h.key: h.label for h in task.headline}
        updated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        shown = (f"Scores as teams see them: rounded to {phase.rounding} decimal(s), with their 95% intervals."
                 if phase.ladder is None else
                 f"Scores as teams see them: released by the Ladder, rounded to {phase.rounding} decimal(s).")
        if phase.private:
            shown += (f" The final standing: each team's best submission on the public part, scored on the private "
                      f"part ({phase.private:.0%} of the split's clusters)."
                      if final else f" Scores on the public part; {phase.private:.0%} of the split is held private and "
                      "decides the final standing, shown when the phase ends.")
        html = page("board.html", title=f"{config.challenge}: {phase.name} leaderboard", root="../", script=True,
                    templates=Path(__file__).resolve().parent / "templates", challenge=config.challenge,
                    phase=phase.name, benchmark=phase.benchmark, split=phase.split or task.default_split,
                    shown=shown, ladder=phase.ladder is not None, updated=updated,
                    labels=[labels.get(k, k) for k in keys],
                    rows=[{**r, "when": (r["when"] or "")[:19].replace("T", " "),
                           "cells": [as_text(s, phase.rounding) for s in r["scores"]]} for r in rows])
        record = {"challenge": config.challenge, "phase": phase.name, "benchmark": phase.benchmark,
                  "metrics": list(keys), "rounding": phase.rounding, "ladder": phase.ladder,
                  "part": ("private" if final else "public") if phase.private else None, "final": final,
                  "rows": [{"rank": r["rank"], "team": r["team"], "scores": r["scores"], "scored_submissions":
                            r["count"], "scored": r["when"]} for r in rows]}
        write_atomically(folder / "board.json", dumps(record).encode())
        for path, data in assets(site).items():
            if not path.exists() or path.read_bytes() != data:
                write_atomically(path, data)
        write_atomically(folder / "index.html", html)
    return folder / "index.html"
