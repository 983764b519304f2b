"""The report card of `vlbench suite`: OUT/card.json (everything, never NaN), OUT/report.md (the
headline metrics of every benchmark with their 95% intervals, the benchmarks not scored and why, then
the diagnostics, each with its reading and a figure of its intervals; a figure per benchmark family
of the headline metrics: OUT/figures/, evaluator.suite.figures) and OUT/index.html, the same as a page
of the leaderboard's kind (evaluator/publish/site.py: autoescaped templates, the site's
Content-Security-Policy, a sortable table), with each benchmark's report under reports/<benchmark>/."""

from __future__ import annotations

from pathlib import Path

from core.errors import write_error
from core.jsonout import dumps
from core.markdown import report_table
from core.outdir import write_together
from core.sanitise import sanitise
from evaluator.publish.site import assets, metric_cell, page, report_page
from evaluator.suite.figures import FOLDER, card_figures, diagnostic_entries, figure_files


def _markdown_cells(cell: dict) -> list[str]:
    """A value cell (`metric_cell`, shared with the page) as the Markdown table's value and interval."""
    return [cell["shown"], "–" if not cell["interval"] else f"[{cell['interval'][0]}, {cell['interval'][1]}]"]


def _line(text) -> str:
    """A name or reason from outside (a model, a folder, an error) as one printable line on the card."""
    return sanitise(text, (), None)


def card_markdown(card: dict) -> str:
    diagnostic_specs, family_specs = card_figures(card)
    rows, skipped = [], []
    for bench, row in card["benchmarks"].items():
        if row["status"] != "scored":
            skipped.append([_line(bench), row["status"], _line(row["reason"])])
            continue
        for key, entry in row["headline"].items():
            arrow = "" if entry["higher_is_better"] else " (lower is better)"
            rows.append([bench, row["split"], f"{entry['label']}{arrow}", *_markdown_cells(metric_cell(entry))])
    md = [f"# Report card: {_line(card['model'])}", "",
          f"Every benchmark built under `{_line(card['data'])}`, scored with `vlbench evaluate`'s metrics; 95% "
          f"intervals from {card['resamples']:,} cluster-bootstrap resamples (seed {card['seed']}). Per-benchmark "
          "reports: `reports/<benchmark>/report.md`.", "",
          *([f"Scored from the model's own runs in `{_line(card['predictions'])}` (`--predictions`: prediction "
             "files and harness logs, copied under `predictions/`); vlbench did not run the model.", ""]
            if card.get("predictions") else []),
          report_table(["benchmark", "split", "metric", "value", "95% interval"], rows), ""]
    md += [f"![{spec.title}]({FOLDER}/{spec.filename})\n" for spec in family_specs]
    if skipped:
        md += ["## Not scored", "", report_table(["benchmark", "status", "why"], skipped), ""]
    answers = answer_rows(card)
    if answers:
        md += ["## Generated answers", "", ANSWERS_READING, "",
               report_table(["benchmark", "thinking", "unfinished", "unparsed", "rows"],
                            [[r["bench"], r["thinking"], r["unfinished"], r["unparsed"], r["rows"]] for r in answers]),
               ""]
    bias = position_bias_rows(card)
    if bias:
        md += ["## Position bias (CircularEval)", "", POSITION_BIAS_READING, "",
               report_table(["benchmark", "circular", "plain", "chosen A / B / C / D"],
                            [[r["bench"], r["circular"], r["plain"], r["chosen"]] for r in bias]), ""]
    gains = gain_rows(card)
    if gains:
        md += ["## Multimodal gain", "", GAIN_READING, "",
               report_table(["benchmark", "metric", "with images", "without", "gain", "p"],
                            [[r["bench"], r["metric"], r["with"], r["without"], r["gain"], r["p"]] for r in gains]),
               ""]
    leaks = leakage_rows(card)
    if leaks:
        md += ["## Multimodal leakage", "", LEAKAGE_READING, "",
               report_table(["benchmark", "base LLM", "metric", "without images", "base LLM's", "leakage", "p"],
                            [[r["bench"], r["base_llm"], r["metric"], r["without"], r["base"], r["leakage"], r["p"]]
                             for r in leaks]), ""]
    priors = prior_rows(card)
    if priors:
        md += ["## Prior-following rate", "", PRIOR_READING, "",
               report_table(["benchmark", "errors", "rate (%)", "by part"],
                            [[r["bench"], r["errors"], r["rate"], r["parts"]] for r in priors]), ""]
    md += ["## Diagnostics", ""]
    for d, spec in zip(card["diagnostics"], diagnostic_specs):
        md += [f"### {d['name']}", "", f"{d['reading'][0].upper()}{d['reading'][1:]}.", ""]
        table = [[name, *_markdown_cells(cell)] for name, cell in _rows(d["values"])]
        md += [report_table(["", "value", "95% interval"], table), ""]
        md += [line for s in spec for line in (f"![{s.title}]({FOLDER}/{s.filename})", "")]
    no_perceptual = [f"{b} ({r['perceptual']})" for b, r in card["benchmarks"].items()
                     if r.get("perceptual") not in (None, "scored")]
    if no_perceptual:
        md += ["Perceptual score not computed: " + "; ".join(no_perceptual) + ".", ""]
    if card["missing_diagnostics"]:
        md += ["Not computed (inputs missing): " + "; ".join(card["missing_diagnostics"]) + ".", ""]
    return "\n".join(md)


ANSWERS_READING = ("Unfinished: answers cut off inside their thinking (the token budget ran out), never read as "
                   "an answer and scored wrong; a larger --max-new-tokens gives the model room. Unparsed: answers "
                   "the benchmark's rules could not read (unfinished ones included), scored wrong.")


def answer_rows(card: dict) -> list[dict]:
    """Per benchmark the model generated answers for, how many were unfinished and unparsed, when thinking
    was on somewhere or an answer was unfinished (else: nothing to show)."""
    rows = [{"bench": bench, "thinking": "on" if row["answers"]["thinking"] else "off",
             **{k: row["answers"][k] for k in ("unfinished", "unparsed", "rows")}}
            for bench, row in card["benchmarks"].items() if row.get("status") == "scored" and row.get("answers")]
    return rows if any(r["thinking"] == "on" or r["unfinished"] for r in rows) else []


POSITION_BIAS_READING = ("With --circular each multiple-choice prompt is asked once per rotation of its options: "
                         "circular accuracy counts a prompt only when every rotation is right, plain accuracy reads "
                         "the options as listed; a letter chosen far more often than a quarter of the time is a "
                         "position bias (%, 95% intervals in each benchmark's report).")


def position_bias_rows(card: dict) -> list[dict]:
    """Per benchmark asked with --circular: circular and plain accuracy, and how often each letter was chosen."""
    def shown(entry: dict) -> str:
        return f"{entry['value']:.2f}"

    return [{"bench": bench, "circular": shown(row["circular"]["circular_accuracy"]),
             "plain": shown(row["circular"]["plain_accuracy"]),
             "chosen": " / ".join(shown(v["chosen"]) for v in row["circular"]["letters"].values())}
            for bench, row in card["benchmarks"].items() if row.get("status") == "scored" and row.get("circular")]


PRIOR_READING = ("Of the model's errors, the share that are the training prior's answer (the question type's for VQA, "
                 "the local group's for GQA-OOD; each benchmark's report says which): near 100% the model falls "
                 "back on the prior when it is wrong; a uniform guess among d answers follows it on 1/(d - 1) of its "
                 "errors where the prior's answer is among the d and is not the right one (0 where it is not among "
                 "them). "
                 "95% cluster-bootstrap intervals in brackets.")


GAIN_READING = ("What the images add: the model's score with them minus its score without them, on the same rows "
                "(the multimodal gain of Chen et al., NeurIPS 2024, §4; where lower is better, the score without "
                "them minus the score with them, so a positive gain is always an improvement; the blind run is asked "
                "the prompt without its pictures, or shown a neutral grey image where the model cannot run without "
                "one). Near 0: the benchmark is answered without looking; below 0: the images made it worse. Paired "
                "95% cluster-bootstrap intervals in brackets; p: the paired permutation test of no gain.")


def gain_rows(card: dict) -> list[dict]:
    """Per scored benchmark with a blind run (`suite --blind`): each headline metric with images, without, and the
    multimodal gain with its paired interval and p-value; or why there is no blind run."""
    rows = []
    for bench, row in card["benchmarks"].items():
        found = row.get("multimodal_gain") if row.get("status") == "scored" else None
        if found is None:
            continue
        if "not_measured" in found:
            rows.append({"bench": bench, "metric": "-", "with": "-", "without": "-", "gain": "not measured",
                         "p": _line(found["not_measured"])})
            continue
        for entry in found["metrics"].values():
            lower = entry.get("higher_is_better") is False
            rows.append({"bench": bench, "metric": entry["label"] + (" (lower is better)" if lower else ""),
                         "with": _number(entry["with"]), "without": _number(entry["without"]),
                         "gain": _with_interval(entry), "p": _p_value(entry)})
    return rows


LEAKAGE_READING = ("What the model answers without images that its base LLM cannot: its blind score minus the score "
                   "of the language model it was built on, asked the same prompts, floored at 0 (the multimodal "
                   "leakage of Chen et al., NeurIPS 2024, §4; where lower is better, the base LLM's score minus the "
                   "blind one). Above 0: the VLM's training taught it answers to the benchmark's text, a sign the "
                   "benchmark (or data like it) leaked into that training. Paired 95% cluster-bootstrap intervals, "
                   "floored at 0 as the leakage is, in brackets; p: the paired permutation test of no lead.")


def leakage_rows(card: dict) -> list[dict]:
    """Per scored benchmark with a base LLM run (`suite --base-llm`): each headline metric without images, the base
    LLM's, and the multimodal leakage with its interval and p-value; or why it was not measured."""
    rows = []
    for bench, row in card["benchmarks"].items():
        found = row.get("multimodal_leakage") if row.get("status") == "scored" else None
        if found is None:
            continue
        model = _line(found["base_llm"])
        if "not_measured" in found:
            rows.append({"bench": bench, "base_llm": model, "metric": "-", "without": "-", "base": "-",
                         "leakage": "not measured", "p": _line(found["not_measured"])})
            continue
        for entry in found["metrics"].values():
            rows.append({"bench": bench, "base_llm": model, "metric": entry["label"],
                         "without": _number(entry["without"]), "base": _number(entry["base"]),
                         "leakage": _with_interval(entry), "p": _p_value(entry)})
    return rows


def _number(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _with_interval(entry: dict) -> str:
    """An entry's value with its interval in brackets, at 2 decimals."""
    bounds = entry["interval"]
    return _number(entry["value"]) + ("" if not bounds else f" [{bounds[0]:.2f}, {bounds[1]:.2f}]")


def _p_value(entry: dict) -> str:
    return "-" if entry["p_value"] is None else f"{entry['p_value']:.3g}"


def prior_rows(card: dict) -> list[dict]:
    """Per scored benchmark with a prior-following rate: its errors, the rate with its interval, and the rate on
    each part (GQA-OOD's head and tail, VQA's answer types), or why it was not measured."""
    def shown(entry: dict) -> str:
        if entry["value"] is None:
            return "no errors"
        bounds = entry.get("interval")
        return f"{entry['value']:.2f}" + ("" if not bounds else f" [{bounds[0]:.2f}, {bounds[1]:.2f}]")

    rows = []
    for bench, row in card["benchmarks"].items():
        found = row.get("prior_following") if row.get("status") == "scored" else None
        if found is None:
            continue
        if "not_measured" in found:
            rows.append({"bench": bench, "errors": "-", "rate": "not measured", "parts": _line(found["not_measured"])})
            continue
        parts = "; ".join(f"{_line(v)}: {shown(e)}" for v, e in found.get("parts", {}).items())
        rows.append({"bench": bench, "errors": found["errors"], "rate": shown(found), "parts": parts or "-"})
    return rows


def _rows(values: dict) -> list[tuple[str, dict]]:
    """A diagnostic's (name, value cell) rows, groups (per answer type) flattened."""
    return [(name, metric_cell(entry)) for name, entry in diagnostic_entries(values)]


def card_files(out: Path, card: dict) -> dict[Path, bytes]:
    """Every file of the card by its path: card.json, the page with its figures (OUT/figures/), each scored
    benchmark's report page, report.md (which shows the figures too) and the site's assets."""
    files = {out / "card.json": (dumps(card, note_key="undefined", indent=2) + "\n").encode()}
    rows, skipped = [], []
    for bench, row in card["benchmarks"].items():
        if row["status"] != "scored":
            skipped.append({"bench": _line(bench), "status": row["status"], "reason": _line(row["reason"])})
            continue
        files[out / "reports" / bench / "index.html"] = report_page(
            out / "reports" / bench, f"{bench}: {_line(card['model'])}", "../../index.html", "report card", "../../")
        rows += [{"bench": bench, "split": row["split"], "cell": metric_cell(entry),
                  "metric": entry["label"] + ("" if entry["higher_is_better"] else " (lower is better)")}
                 for entry in row["headline"].values()]
    diagnostic_specs, family_specs = card_figures(card)
    files.update(figure_files(out, [s for specs in diagnostic_specs for s in specs] + family_specs))
    diagnostics = [{"name": d["name"], "reading": d["reading"], "rows": _rows(d["values"]),
                    "figures": [{"title": s.title, "src": f"{FOLDER}/{s.filename}"} for s in specs]}
                   for d, specs in zip(card["diagnostics"], diagnostic_specs)]
    files[out / "index.html"] = page(
        "card.html", title=f"Report card: {_line(card['model'])}", script=True,
        model=_line(card["model"]), data=_line(card["data"]), resamples=card["resamples"], seed=card["seed"],
        rows=rows, skipped=skipped, answers=answer_rows(card), answers_reading=ANSWERS_READING,
        bias=position_bias_rows(card), bias_reading=POSITION_BIAS_READING, gains=gain_rows(card),
        gain_reading=GAIN_READING, leaks=leakage_rows(card), leakage_reading=LEAKAGE_READING, priors=prior_rows(card),
        prior_reading=PRIOR_READING, diagnostics=diagnostics,
        missing=card["missing_diagnostics"],
        families=[{"title": s.title, "src": f"{FOLDER}/{s.filename}"} for s in family_specs])
    files[out / "report.md"] = card_markdown(card).encode("utf-8", "backslashreplace")  # names not UTF-8
    return {**files, **assets(out)}


def write_card(out: Path, card: dict) -> None:
    """Every file of the card (`card_files`), rendered first and then written together: a full disk or a
    read-only folder leaves the previous card as it was, never a page beside another run's card.json or an
    empty figure."""
    try:
        write_together(card_files(out, card))
    except OSError as exc:
        raise write_error(f"--out {out}: cannot write the card", exc) from None
