"""The Hub's evaluation-results files (Hub documentation, "Evaluation Results").

* A built folder carries `eval.yaml` at its root, what registers a dataset repo as a Hub benchmark:
  `name`, `description` and `tasks`, one task per leaderboard -- here one per headline metric of the
  registry (higher is better; a lower-is-better metric such as DISCO's MAE is left out, a Hub
  leaderboard ranks descending), each with the `config` and `split` holding the rows its metric reads
  (the task's config, or the metric's own: GQA-OOD's acc-tail over the `tail` config). A Hub task has no
  metric field, so the description names each task's metric and scale (in %, or from 0 to 1: VisDial's
  MRR, DISCO's 1 - MAPE), as `vlbench evaluate` reports it.
  `evaluation_framework` is left out: it must name a framework registered with the Hub, and vlbench
  is not one (yet); the card's last section says so (`card_section`).
* `vlbench evaluate --hub-results DIR` writes `DIR/.eval_results/<benchmark>.yaml` for a model repo:
  a list with one entry per task of that eval.yaml -- `dataset` (`id`: the benchmark's dataset repo,
  `task_id`, `revision` when known), `value` (the metric on its scale), `date` (ISO-8601), `source` with
  `--hub-source URL` (`url`: where the evaluation can be read, the pushed report or samples; `name`) and
  `notes` (the scale, the split, the confidence interval and how it was computed, the coverage).
* `vlbench push --inspect-task` replaces the built eval.yaml with one for the inspect-ai framework
  (evaluator/harness/hub.py): the same task ids, over the exported prompts of the rows each metric reads.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import ParamsError

if TYPE_CHECKING:
    from evaluator.base import Headline

EVAL_YAML = "eval.yaml"
RESULTS_FOLDER = ".eval_results"
HEADER = "# Written by `vlbench evaluate --hub-results` (Hub evaluation results of one benchmark).\n"


def task_id(key: str) -> str:
    """A metrics key as a task id: lower case letters, digits and underscores (`r@10` -> `r_10`)."""
    return re.sub(r"[^a-z0-9_]+", "_", key.lower()).strip("_")


def hub_tasks(benchmark: str) -> list[tuple[str, Headline]]:
    """(task id, headline metric) of each leaderboard of a benchmark."""
    from evaluator.tasks import get_task, has_task

    if not has_task(benchmark):
        return []
    return [(task_id(h.key), h) for h in get_task(benchmark).headline if h.higher_is_better]


def leaderboards_text(tasks: list[tuple[str, Headline, str]], split: str) -> str:
    """Each task's metric, scale and config, in words: "`acc_tail`: acc-tail in %, over config tail"."""
    return "; ".join(f"`{tid}`: {h.label} {h.scale_words}, over config {config}" for tid, h, config in tasks) + \
        f" (split {split})"


def _dump(data) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def built_hub_tasks(benchmark: str, splits: dict[str, list[str]],
                    split: str | None = None) -> tuple[list[tuple[str, Headline, str]], str, str]:
    """(tasks, the task's config, split) of a built folder whose configs hold `splits`: the leaderboards whose rows
    were built, each as (task id, headline, the built config it reads), over `split` or else the task's default
    split where it was built (no tasks: the benchmark has none, or the task's config was not built)."""
    from evaluator.tasks import get_task

    tasks = hub_tasks(benchmark)
    if not tasks:
        return [], "", ""
    task = get_task(benchmark)
    built = sorted(splits.get(task.config, []))
    if not built:
        return [], task.config, ""
    if split is None:
        split = task.default_split if task.default_split in built else built[0]
    read = [(tid, h, h.config or task.config) for tid, h in tasks]
    return [(tid, h, c) for tid, h, c in read if split in splits.get(c, [])], task.config, split


def eval_yaml(benchmark: str, splits: dict[str, list[str]]) -> str | None:
    """eval.yaml of a built folder whose configs hold `splits` (None: no leaderboard was built)."""
    tasks, _, split = built_hub_tasks(benchmark, splits)
    if not tasks:
        return None
    return _dump({
        "name": benchmark,
        "description": (f"{benchmark}, built from its raw sources by vlbench. Leaderboards (higher is better), "
                        f"as `vlbench evaluate {benchmark}` scores them: "
                        f"{leaderboards_text(tasks, split)}. "
                        f"No `evaluation_framework` is named: {NO_FRAMEWORK}"),
        "tasks": [{"id": tid, "config": config, "split": split} for tid, _, config in tasks],
    })


NO_FRAMEWORK = ("that field names a framework registered with the Hub, and vlbench is not one; "
                "`vlbench push BUILD --inspect-task TASK` makes the repo a benchmark for inspect-ai.")
CARD_HEADING = "## As a Hub benchmark"


def card_section(benchmark: str, splits: dict[str, list[str]]) -> str:
    """The plain build card's last section: what its eval.yaml registers, and why it names no evaluation
    framework (or why there is no eval.yaml)."""
    tasks, config, split = built_hub_tasks(benchmark, splits)
    lines = ["", CARD_HEADING, ""]
    if not tasks:
        why = (f"{benchmark} has no leaderboard metric where higher is better" if not hub_tasks(benchmark) else
               f"the config its leaderboards read ({config}) was not built")
        lines.append(f"This folder has no `{EVAL_YAML}`: {why}, and a Hub benchmark is a list of leaderboards.")
        return "\n".join(lines) + "\n"
    lines += [f"`{EVAL_YAML}` registers this folder as a Hub benchmark, one task per leaderboard:", ""]
    lines += [f"- `{tid}`: {h.label} {h.scale_words}, over config `{c}`, split `{split}`" for tid, h, c in tasks]
    lines += ["", f"It names no `evaluation_framework`: {NO_FRAMEWORK} A model repo's results for these tasks are "
              f"written by `vlbench evaluate {benchmark} --data DATA --predictions FILE --hub-results DIR "
              "--hub-dataset ORG/NAME` (`DIR/.eval_results/`)."]
    return "\n".join(lines) + "\n"


def read_eval_yaml(folder: Path) -> dict:
    import yaml

    path = Path(folder) / EVAL_YAML
    try:
        data = yaml.safe_load(path.read_text())
    except OSError:
        raise ParamsError(f"--hub-results: {folder} has no {EVAL_YAML} (build it again with this vlbench)") from None
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ParamsError(f"{path}: not valid YAML ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
        raise ParamsError(f"{path}: expected `name`, `description` and a `tasks` list")
    for n, task in enumerate(data["tasks"]):
        if not isinstance(task, dict) or not isinstance(task.get("id"), str):
            raise ParamsError(f"{path}: task {n} of `tasks` is not a mapping with a string `id`")
    return data


def check_source(url: str | None, hub_results) -> None:
    """`--hub-source`: given with --hub-results only, an https URL, printable, no spaces, at most 2,000
    characters."""
    if url is None:
        return
    if hub_results is None:
        raise ParamsError("--hub-source: names the source of --hub-results entries; pass --hub-results DIR too")
    if not re.fullmatch(r"https://[!-~]{1,1992}", url) or "://" in url[8:]:
        raise ParamsError(f"--hub-source {url[:80]!r}: expected an https URL (the pushed report or samples)")


def write_eval_results(out: Path, benchmark: str, folder: Path, metrics: dict, dataset_id: str,
                       revision: str | None = None, date: str | None = None, source: str | None = None) -> Path:
    """DIR/.eval_results/<benchmark>.yaml of one evaluation (see the module docstring)."""
    from evaluator.stats.bootstrap import value_at

    if not re.fullmatch(r"[\w.-]+/[\w.-]+", dataset_id or ""):
        raise ParamsError(f"--hub-dataset {dataset_id!r}: expected the benchmark's Hub dataset repo id, ORG/NAME")
    check_source(source, out)
    spec = read_eval_yaml(folder)
    keys = {tid: h for tid, h in hub_tasks(benchmark)}
    intervals = metrics.get("intervals", {})
    coverage = metrics.get("coverage", {})
    entries = []
    for task in spec["tasks"]:
        headline = keys.get(task.get("id"))
        key = headline.key if headline else None
        value = value_at(metrics, key) if key else None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        notes = [f"{headline.label} {headline.scale_words}", f"split {metrics['split']}"]
        bounds = intervals.get("metrics", {}).get(key)
        if bounds:
            notes.append(f"95% CI [{bounds[0]}, {bounds[1]}] ({intervals['resamples']} cluster-bootstrap resamples "
                         f"of {intervals['unit']}s, seed {intervals['seed']})")
        if coverage.get("missing"):
            notes.append(f"{coverage['scored']} of {coverage['expected']} examples scored")
        dataset = {"id": dataset_id, "task_id": task["id"], **({"revision": revision} if revision else {})}
        entries.append({"dataset": dataset, "value": value, "date": date or datetime.date.today().isoformat(),
                        **({"source": {"url": source, "name": "vlbench evaluate"}} if source else {}),
                        "notes": "; ".join(notes)})
    if not entries:
        raise ParamsError(f"--hub-results: no leaderboard metric of {benchmark} was computed")
    from core.outdir import write_atomically

    target = Path(out) / RESULTS_FOLDER / f"{task_id(benchmark)}.yaml"
    for path in (target.parent, target):  # a link would carry the write into another folder
        if path.is_symlink():
            raise ParamsError(f"--hub-results {out}: {path} is a symbolic link; vlbench writes only into a real "
                              f"{RESULTS_FOLDER} folder of DIR")
    if target.exists() and not target.read_text(errors="replace").startswith(HEADER):
        raise ParamsError(f"--hub-results {out}: {target} exists and was not written by vlbench; move it away first")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ParamsError(f"--hub-results {out}: cannot create {target.parent} ({exc.strerror or exc})") from None
    write_atomically(target, (HEADER + _dump(entries)).encode())
    return target
