"""`vlbench suite-compare CARD1 CARD2 ... --out SITE`: the report cards of several models on one page
(SITE/index.html: a row per model, a column per headline metric, intervals shown, sortable), and the
paired comparisons of each model with the first wherever both scored the same build of a benchmark:
the difference B − A of each headline metric on the same rows, its paired cluster-bootstrap interval
and the permutation test's p-value (evaluator.compare, as `vlbench compare`); a figure per
benchmark family draws the models' headline metrics side by side (evaluator.suite.figures); the cards of `suite
--blind` add a column per multimodal gain (MG, with its paired interval), those made with `--base-llm` one per
multimodal leakage (ML). SITE carries the
marker `.vlbench-cards.json`; another non-empty folder is refused without --overwrite."""

from __future__ import annotations

import json
from pathlib import Path

from core.errors import ParamsError, VlbenchError, write_error
from core.jsonout import dumps
from core.outdir import check_out, write_atomically, write_together
from core.ownfiles import OwnFileError, read_own_file
from evaluator.publish.site import assets, metric_cell, page
from evaluator.request import ScoringRequest
from evaluator.suite.figures import FOLDER, family_figures, figure_files

MARKER = ".vlbench-cards.json"
CARD_LIMIT = 64 * 1024 * 1024  # bytes: a card.json of every benchmark with its intervals is far smaller


def read_card(folder: Path) -> dict:
    """A suite folder's card.json; anything else is a one-line error naming it."""
    path = Path(folder) / "card.json"
    try:
        data = read_own_file(path, CARD_LIMIT)
    except OwnFileError as exc:
        raise ParamsError(str(exc)) from None
    except OSError as exc:
        raise ParamsError(f"{path}: cannot read ({exc.strerror or exc}); a `vlbench suite` OUT holds one") from None
    if data is None:
        raise ParamsError(f"{path}: cannot read (no such file); a `vlbench suite` OUT holds one")
    try:
        card = json.loads(data)
    except (ValueError, RecursionError):
        raise ParamsError(f"{path}: not valid JSON") from None
    if not isinstance(card, dict) or not isinstance(card.get("benchmarks"), dict) or "model" not in card:
        raise ParamsError(f"{path}: not a report card (no model and benchmarks)")
    problem = card_problem(card)
    if problem:
        raise ParamsError(f"{path}: {problem}")
    _check_one_run(Path(folder), card)
    return card


def _check_one_run(folder: Path, card: dict) -> None:
    """Refuse a card folder that mixes two runs: a `vlbench suite` run into it that stopped before writing its
    card (its marker says so), or a prediction file that is not the one a row's numbers were computed from."""
    from core.hashing import sha256_file
    from evaluator.suite.run import record_sha256, unfinished_run

    problem = unfinished_run(folder)
    if problem:
        raise ParamsError(f"{folder}: {problem}")
    for bench, row in card["benchmarks"].items():
        if row["status"] != "scored" or "predictions_sha256" not in row:  # a card of an older vlbench: no record
            continue
        path = _predictions(folder, bench, row)
        if not path.is_file() or sha256_file(path) != row["predictions_sha256"]:
            raise ParamsError(f"{path}: not the predictions card.json was computed from (changed or missing since); "
                              "run `vlbench suite` into the folder again")
        if "record_sha256" in row and record_sha256(path) != row["record_sha256"]:
            raise ParamsError(f"{path}: its prediction record is not the one card.json was made with (changed, added "
                              "or removed since); run `vlbench suite` into the folder again")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def card_problem(card: dict) -> str | None:
    """What in a card.json is not as `vlbench suite` writes it (every field suite-compare reads, row by row),
    or None."""
    if not isinstance(card["model"], str):
        return "field 'model' is not text"
    for bench, row in card["benchmarks"].items():
        where = f"benchmarks.{str(bench)[:40]}"
        if not isinstance(row, dict) or not isinstance(row.get("status"), str):
            return f"{where}: not a row with a `status`"
        if row["status"] != "scored":
            continue
        for field in ("split", "folder", "build"):
            if not isinstance(row.get(field), str):
                return f"{where}.{field}: not text"
        for field in ("predictions", "predictions_sha256"):
            if field in row and not isinstance(row[field], str):
                return f"{where}.{field}: not text"
        if row.get("record_sha256") is not None and not isinstance(row["record_sha256"], str):
            return f"{where}.record_sha256: not text"
        headline = row.get("headline")
        if not isinstance(headline, dict):
            return f"{where}.headline: not a mapping"
        for key, entry in headline.items():
            at = f"{where}.headline.{str(key)[:40]}"
            if not isinstance(entry, dict) or not isinstance(entry.get("label"), str) or \
                    not {"value", "interval"} <= set(entry):
                return f"{at}: not a metric with a `label`, a `value` and an `interval`"
            if entry.get("value") is not None and not _number(entry["value"]):
                return f"{at}.value: not a number"
            interval = entry.get("interval")
            if interval is not None and not (isinstance(interval, list) and len(interval) == 2 and
                                              all(_number(b) for b in interval)):
                return f"{at}.interval: not two numbers"
        for field in (f for f, _ in MEASURES.values()):
            measured = row.get(field, {})
            if not isinstance(measured, dict) or not isinstance(measured.get("metrics", {}), dict):
                return f"{where}.{field}: not a mapping of metrics"
            for key, entry in measured.get("metrics", {}).items():
                at = f"{where}.{field}.metrics.{str(key)[:40]}"
                if not isinstance(entry, dict) or not isinstance(entry.get("label"), str) or \
                        (entry.get("value") is not None and not _number(entry["value"])):
                    return f"{at}: not a measure with a `label` and a numeric `value`"
                interval = entry.get("interval")
                if interval is not None and not (isinstance(interval, list) and len(interval) == 2 and
                                                  all(_number(b) for b in interval)):
                    return f"{at}.interval: not two numbers"
    return None


def card_names(cards: list[dict], folders: list[Path]) -> list[str]:
    """Each card's name on the page and in the figures: `MODEL (FOLDER)` as one sanitised line (a figure
    prints text as it is), and where two cards would share one
    (one model's cards in folders of one name), the card's place among the arguments too, so that no two
    series merge."""
    from core.sanitise import sanitise

    names = [sanitise(f"{card['model']} ({Path(folder).name})", (), 120) for card, folder in zip(cards, folders)]
    return [f"{name} #{k + 1}" if names.count(name) > 1 else name for k, name in enumerate(names)]


def _predictions(folder: Path, bench: str, row: dict) -> Path:
    """A scored row's prediction file in its card folder (`predictions/<bench>.json` unless the row names the
    copy of a submission, `suite --predictions`); a name that leaves the folder is not followed."""
    from builders.sources.files import check_relative

    rel = row.get("predictions", f"predictions/{bench}.json")
    check_relative(str(rel), folder / "card.json", field=f"benchmarks.{bench}.predictions")
    return folder / rel


def compare_cards(folders: list[Path], out: Path, *, resamples: int = 1000, seed: int = 0,
                  overwrite: bool = False) -> dict:
    from evaluator.compare import compare_predictions

    if len(folders) < 2:
        raise ParamsError("give at least two report cards (`vlbench suite` OUT folders)")
    cards = [read_card(f) for f in folders]
    check_out(out, {"a report card": [Path(f) for f in folders]}, overwrite,
              owned=lambda p: (Path(p) / MARKER).is_file(), writer="`vlbench suite-compare`")
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(out / MARKER, (dumps({"cards": [str(f) for f in folders]}, indent=2) + "\n").encode())
    columns: dict[tuple[str, str], str] = {}
    for card in cards:
        for bench, row in card["benchmarks"].items():
            for key, entry in (row.get("headline") or {}).items():
                columns.setdefault((bench, key), f"{bench} {entry['label']}")
    for prefix, (field, short) in MEASURES.items():  # the blind runs' measures (suite --blind, --base-llm), after
        for card in cards:                             # every headline metric
            for bench, row in card["benchmarks"].items():
                for key, entry in _measured(row, field).items():
                    columns.setdefault((bench, prefix + key), f"{bench} {short} {entry['label']}")
    rows = [{"model": name, "card": str(folder),
             "values": {f"{b}:{k}": _cell(card["benchmarks"].get(b, {}), k) for b, k in columns}}
            for card, folder, name in zip(cards, folders, card_names(cards, folders))]
    comparisons = []
    first, first_folder = cards[0], Path(folders[0])
    for card, folder, named in zip(cards[1:], folders[1:], rows[1:]):
        for bench, row in card["benchmarks"].items():
            base = first["benchmarks"].get(bench, {})
            if row.get("status") != "scored" or base.get("status") != "scored" or row.get("build") != base.get("build"):
                continue
            try:
                result = compare_predictions(
                    ScoringRequest(bench, base["folder"], base["split"], resamples=resamples, seed=seed),
                    [_predictions(first_folder, bench, base), _predictions(Path(folder), bench, row)])
            except VlbenchError as exc:
                comparisons.append({"a": rows[0]["model"], "b": named["model"], "benchmark": bench,
                                    "error": str(exc)})
                continue
            (c,) = result["comparisons"]
            headline = set((row.get("headline") or {}))
            comparisons.append({"a": rows[0]["model"], "b": named["model"], "benchmark": bench, "rows": result["rows"],
                                "metrics": {k: v for k, v in c["metrics"].items() if k in headline}})
    record = {"columns": [{"benchmark": b, "key": k, "label": label} for (b, k), label in columns.items()],
              "cards": rows, "comparisons": comparisons, "resamples": resamples, "seed": seed}
    families = family_figures([(row["model"], card) for row, card in zip(rows, cards)])
    files = {out / "cards.json": (dumps(record, note_key="undefined", indent=2) + "\n").encode(),
             **figure_files(out, families), **assets(out)}
    files[out / "index.html"] = page(
        "cards.html", title="Report cards", script=True,
        families=[{"title": s.title, "src": f"{FOLDER}/{s.filename}"} for s in families],
        labels=list(columns.values()), resamples=resamples, seed=seed,
        rows=[{"model": r["model"], "cells": [metric_cell(v) if v else metric_cell({"value": None})
                                              for v in r["values"].values()]} for r in rows],
        comparisons=[{"error": None, **c, "rows_shown": [(k, _difference(v)) for k, v in c.get("metrics", {}).items()]}
                     for c in comparisons])
    try:  # rendered first, written together: a full disk or a read-only SITE leaves the previous page as it was
        write_together(files)
    except OSError as exc:
        raise write_error(f"--out {out}: cannot write the page", exc) from None
    return record


# the column keys of the blind runs' measures, <prefix><headline key>: the card row's field and the column's name
MEASURES = {"mg:": ("multimodal_gain", "MG"),  # `suite --blind`
            "ml:": ("multimodal_leakage", "ML")}  # `suite --base-llm`


def _measured(row: dict, field: str) -> dict:
    """A card row's measure (a MEASURES field) by headline key ({} where it has none)."""
    found = row.get(field) if row.get("status") == "scored" else None
    return (found or {}).get("metrics") or {}


def _cell(row: dict, key: str) -> dict | None:
    """A card row's value of a column: a headline metric, or a measure of the blind runs (`mg:<key>`, `ml:<key>`)."""
    for prefix, (field, _) in MEASURES.items():
        if key.startswith(prefix):
            return _measured(row, field).get(key[len(prefix):])
    return (row.get("headline") or {}).get(key)


def _difference(row: dict) -> dict:
    """A compared metric's B − A, its interval and p-value, as shown."""
    diff, interval = row.get("difference"), row.get("interval")
    return {"shown": "–" if diff is None else f"{diff:+.2f}",
            "interval": None if interval is None else [f"{interval[0]:+.2f}", f"{interval[1]:+.2f}"],
            "p": row.get("p_value")}
