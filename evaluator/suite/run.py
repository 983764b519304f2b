"""`vlbench suite --model SPEC --data DIR --out OUT`: one model over every built benchmark under DIR.

Each registered benchmark with a task is predicted and scored (with intervals) when DIR holds a build
of it and the model can be asked; otherwise it is listed with the reason (not built, a model the
benchmark does not take, images it needs, a damaged build), never dropped. OUT is resumable and
incremental: a benchmark's predictions are kept under OUT/predictions/ with the key they were made
under (the model spec and, for a local checkpoint, its files; the dataset's manifest; the model
options; vlbench's version) and the SHA-256 of the file; a rerun reuses them only when both still hold,
so a crash, a Ctrl-C or a new benchmark in DIR costs only what is missing. With `--predictions SUBS`, the
model is not run: each benchmark's file in SUBS (`<benchmark>.<ext>`: a prediction file, an lmms-eval or
Inspect log of an exported task, a VLMEvalKit table) is copied under OUT/predictions/ and scored as
`vlbench evaluate` scores it; the perceptual score and CounterBias, which run the model, are skipped with
the reason. Generative and served
models keep their answers in the response cache as they come (`predict --resume`), so a killed
benchmark resumes from its last finished batch. OUT's marker file `.vlbench-suite.json` proves it is
a suite folder; another non-empty folder is refused without --overwrite.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from builders.registry import benchmarks
from core.errors import STOP_NOTES, ModelError, ParamsError, VlbenchError, WriteError
from core.hashing import sha256_file
from core.jsonout import dumps
from core.manifest import MANIFEST, build_identity, read_manifest
from core.outdir import check_out, write_atomically
from core.ownfiles import OwnFileError, read_own_file
from core.sanitise import sanitise
from evaluator.models.ask import letter_choice
from evaluator.models.options import ModelOptions
from evaluator.models.response_cache import folder_identity, vlbench_version
from evaluator.request import ScoringRequest
from evaluator.tasks import counterbias_benchmarks, get_task, task_names

MARKER = ".vlbench-suite.json"
MARKER_LIMIT = 64 * 1024  # bytes: the marker vlbench writes holds a model spec, a path and a flag
COMPLETE_RUNS = "a card scores complete runs only: run the model on the whole split"


def is_suite_folder(path: Path) -> bool:
    return (Path(path) / MARKER).is_file()


def unfinished_run(folder: Path) -> str | None:
    """Why FOLDER's card cannot be read as one run's, or None: the last `vlbench suite` run into it stopped
    before writing its card (its marker says so; a marker of a vlbench before the record counts as
    finished), or it has no readable marker to say (not written by `vlbench suite`, or copied without it)."""
    path = Path(folder) / MARKER
    try:
        data = read_own_file(path, MARKER_LIMIT)
    except OwnFileError as exc:
        return f"{exc}; run `vlbench suite` into it again"
    except OSError as exc:
        return f"{MARKER} cannot be read ({type(exc).__name__}); run `vlbench suite` into it again"
    if data is None:
        return (f"no {MARKER} beside its card.json to say the card is one run's (copied without it?); run "
                "`vlbench suite` into it again")
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return f"{MARKER} cannot be read ({type(exc).__name__}); run `vlbench suite` into it again"
    if not isinstance(record, dict):
        return f"{MARKER} is not a suite marker (a JSON object); run `vlbench suite` into it again"
    finished = record.get("finished", True)
    if not isinstance(finished, bool):
        return f"{MARKER}: `finished` is not true or false; run `vlbench suite` into it again"
    if not finished:
        return ("a `vlbench suite` run into it stopped before writing its card (its card and files are of two "
                "runs); run `vlbench suite` into it again to finish it")
    return None


def record_sha256(predictions: Path) -> str | None:
    """The SHA-256 of the prediction record beside a prediction file (None: it has none): the card binds the
    record, which its report reads (model, revision, how it was asked), as it binds the predictions."""
    from evaluator.models.prediction_record import metadata_path

    record = metadata_path(predictions)
    return sha256_file(record) if record.is_file() else None


def _files_state(out: Path) -> dict[Path, tuple[int, int, int]]:
    """(inode, mtime, size) of every file under OUT but the marker: a file written again (renamed into place)
    changes it."""
    return {p: (st.st_ino, st.st_mtime_ns, st.st_size) for p in out.rglob("*")
            if p.name != MARKER and (st := p.lstat()) and not p.is_dir()}


def _put_back(path: Path, data: bytes) -> bool:
    """Whether the earlier marker could be written back (the environment that stopped the run may refuse it
    too)."""
    try:
        write_atomically(path, data)
    except OSError:
        return False
    return True


@contextmanager
def unfinished(out: Path, model: str, data: str):
    """The block's run marks OUT unfinished in its marker until the card is written (`unfinished_run`): a run
    stopped midway (a signal, a kill, a full disk) leaves the previous card beside some of its own files, and
    suite-compare refuses such a folder. The one line of a stop says so. A run the environment stopped (a full
    disk, a read-only folder) before any file changed puts the marker back: OUT is as it was."""
    def mark(finished: bool) -> None:
        write_atomically(out / MARKER, (dumps({"model": model, "data": data, "finished": finished}, indent=2)
                                        + "\n").encode())

    note = (f"{out}: its card is marked unfinished until `vlbench suite` runs into it again (the benchmarks "
            "that finished are kept)")
    before, marker = _files_state(out), (out / MARKER).read_bytes() if (out / MARKER).is_file() else None
    mark(False)
    STOP_NOTES.append(note)  # what a Ctrl-C or SIGTERM now leaves: said in the command's one line
    try:
        yield
    except WriteError as exc:
        if marker is not None and _files_state(out) == before and _put_back(out / MARKER, marker):
            raise  # no file of OUT changed and its marker is as it was: so is OUT
        raise WriteError(f"{exc}; {note}") from None
    except VlbenchError as exc:
        raise VlbenchError(f"{exc}; {note}") from None
    STOP_NOTES.remove(note)
    mark(True)


def find_builds(data: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """({benchmark: built folder} of DATA's sub-folders, {folder name: why it is not a usable build});
    a benchmark built twice is taken from the folder named after it, else the first by name; a folder
    named after one benchmark that holds another's build is listed, not used."""
    if not data.is_dir():
        raise ParamsError(f"--data {data}: no such folder (a folder of built benchmarks, as `make demo` writes)")
    builds: dict[str, Path] = {}
    broken: dict[str, str] = {}
    known = {b.name for b in benchmarks()}
    for sub in sorted(p for p in data.iterdir() if p.is_dir() and (p / MANIFEST).exists()):
        try:
            bench = read_manifest(sub).get("benchmark")
        except VlbenchError as exc:
            broken[sub.name] = str(exc)
            continue
        if not isinstance(bench, str) or bench not in known:
            broken[sub.name] = f"{sub / MANIFEST}: benchmark {str(bench)[:60]!r} is not one vlbench knows"
        elif sub.name in known and sub.name != bench:  # data/vcr holding a VQA v2 build: a mix-up, not a build of vcr
            broken[sub.name] = f"{sub / MANIFEST}: a folder named {sub.name} holds a build of {bench}"
        elif bench not in builds or sub.name == bench:
            builds[bench] = sub
    if not builds and not broken:
        raise ParamsError(f"--data {data}: holds no built benchmark (sub-folders with a vlbench manifest.json)")
    return builds, broken


def is_hub_org(data: str) -> bool:
    """Whether --data names a Hub organisation (one word, no local file or folder of that name)."""
    return not Path(data).exists() and "/" not in data and not data.startswith((".", "~")) and bool(data.strip())


HUB_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")


def check_hub_org(org: str, option: str) -> str:
    """A Hub organisation or user name as the Hub accepts one (letters, digits, '-', '_', '.', not at either
    end, no '--' or '..', at most 96 characters); anything else (a path, markup, an option) is refused: it
    would be written into the results files as a repo id."""
    if not HUB_NAME.fullmatch(org) or "--" in org or ".." in org:
        raise ParamsError(f"{option} {org[:60]!r}: not a Hub organisation name (letters, digits, '-', '_' and '.', "
                          "not at either end)")
    return org


def find_hub_builds(org: str) -> tuple[dict[str, Path], dict[str, str], dict[str, str]]:
    """({benchmark: downloaded snapshot} of the ORG/<benchmark> dataset repos, {repo: why it is not a usable
    build}, {benchmark: why it was not found}): every registered benchmark's repo is looked for (the
    hub cache answers offline)."""
    from core.data import resolve_data

    builds: dict[str, Path] = {}
    broken: dict[str, str] = {}
    absent: dict[str, str] = {}
    for entry in benchmarks():
        repo = f"{org}/{entry.name}"
        try:
            folder = resolve_data(repo)
            bench = read_manifest(folder).get("benchmark")
        except ParamsError as exc:
            absent[entry.name] = str(exc).removeprefix(f"--data {repo}: ")
            continue
        except VlbenchError as exc:
            broken[repo] = f"{exc} (not a repo `vlbench push` wrote?)"
            continue
        if bench != entry.name:
            broken[repo] = f"{repo}: its manifest names the benchmark {bench!r}"
        else:
            builds[entry.name] = folder
    if not builds and not broken:
        raise ParamsError(f"--data {org}: no such folder, and no {org}/<benchmark> dataset repo on the Hub "
                          f"({next(iter(absent.values()), 'none looked for')})")
    return builds, broken, absent


def prediction_key(model: str, folder: Path, options: ModelOptions) -> str:
    """What a kept prediction file was made under; a change to any part makes the suite predict again."""
    kind, _, name = model.partition(":")
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(options).items()
                if k not in ("data", "response_cache")}
    identity = {"model": model, "files": folder_identity(name) if kind in ("hf", "vllm") else None,
                "dataset": build_identity(folder), "options": settings, "vlbench": vlbench_version()}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


def _kept(record: Path, path: Path, key: str) -> bool:
    """Whether PATH was made under `key` and is unchanged since (its RECORD says so). Both are read as files of
    a folder anyone may have changed: a RECORD or PATH that is a link, a FIFO or huge is not kept (it is made
    again), and never read."""
    try:
        kept = json.loads(read_own_file(record, MARKER_LIMIT) or b"null")
        regular = path.is_file() and not path.is_symlink()
        return regular and kept["key"] == key and kept["sha256"] == sha256_file(path)
    except (OSError, ValueError, KeyError, TypeError, OwnFileError):
        return False


def _keep(record: Path, path: Path, key: str) -> None:
    """RECORD: the key PATH was made under and PATH's SHA-256, for `_kept`."""
    write_atomically(record, (dumps({"key": key, "sha256": sha256_file(path)}, indent=2) + "\n").encode())


def modalities_read(task, adapter, folder: Path) -> list[str]:
    """The benchmark's perceptual-score modalities whose columns the model reads."""
    from core.data import load_table, pick_split
    from evaluator.models.model import input_columns

    split = pick_split(folder, task.config, None, task.default_split)
    columns = set(input_columns(adapter, load_table(folder, task.config, split).slice(0, 1)))
    return [m.name for m in task.modalities if columns & set(m.columns)]


def submission_of(folder: Path, bench: str) -> Path:
    """The one file of `--predictions FOLDER` named for the benchmark: `<benchmark>.<ext>` (a record beside a
    prediction file, `<benchmark>.meta.json`, is not one)."""
    found = sorted(p for p in Path(folder).iterdir() if p.name == bench + p.suffix and p.suffix and p.is_file())
    if not found:
        raise ModelError(f"--predictions {folder}: holds no {bench}.<ext> (a prediction file or a harness log)")
    if len(found) > 1:
        raise ModelError(f"--predictions {folder}: holds {', '.join(p.name for p in found)}; keep one per benchmark")
    return found[0]


def _copy_submission(source: Path, out: Path) -> Path:
    """The submission and the record beside it copied under OUT/predictions/ (the card is scored from its own
    copy, never from a file that may change after)."""
    from evaluator.models.prediction_record import metadata_path

    target = out / "predictions" / source.name
    write_atomically(target, source.read_bytes())
    record = metadata_path(source)
    if record.is_file():
        write_atomically(metadata_path(target), record.read_bytes())
    elif metadata_path(target).is_file():
        metadata_path(target).unlink()  # the record of an earlier copy (the suite wrote it) would name another run
    return target


def _perceptual(bench: str, model: str, folder: Path, out: Path, key: str, options: ModelOptions, resamples: int,
                seed: int) -> dict:
    """The perceptual score (Gat et al., NeurIPS 2021) of the model on a benchmark whose modalities it
    reads two or more of, kept under OUT/perceptual/<bench> with its key like the predictions; else why not."""
    from evaluator.perceptual.run import perceptual_score
    from evaluator.perceptual.score import PerceptualOptions

    task = get_task(bench)
    if not task.modalities:
        return {"skipped": f"{bench} declares no modalities"}
    report, record = out / "perceptual" / bench, out / "perceptual" / f"{bench}.key.json"
    key = hashlib.sha256(f"{key}/{resamples}/{seed}".encode()).hexdigest()  # the intervals depend on both
    if _kept(record, report / "metrics.json", key):
        return {"metrics": json.loads((report / "metrics.json").read_text()), "reused": True}
    read = modalities_read(task, task.make_model(model, dataclasses.replace(options, data=folder)), folder)
    if len(read) < 2:
        return {"skipped": f"the model reads {' and '.join(read) or 'none'} of {bench}'s modalities "
                           f"({', '.join(m.name for m in task.modalities)}): nothing to compare"}
    metrics = perceptual_score(ScoringRequest(bench, str(folder), None, resamples=resamples, seed=seed), model,
                               PerceptualOptions(seed=seed), model_options=options, report=report)
    _keep(record, report / "metrics.json", key)
    return {"metrics": metrics, "reused": False}


def _counterbias(bench: str, model: str, folder: Path | None, out: Path, options: ModelOptions, resamples: int,
                 seed: int, cache: Path | None) -> dict:
    """CounterBias (Zhang, Wang, Sang, ACM MM 2022) of the model on the VL-Bias build (of `bench`), kept under
    OUT/counterbias with its key like the predictions; else why not."""
    from core.errors import ModelError
    from evaluator.vl_bias.run import CounterBiasOptions, run_counterbias

    if folder is None:
        return {"skipped": f"no VL-Bias build under --data (vlbench build {bench} --source SOURCES --out DATA/{bench})"}
    if model.partition(":")[0] not in ("hf", "py"):
        return {"skipped": f"CounterBias reads a model's probabilities at a [MASK] (an hf: masked LM, generative VLM, "
                           f"CLIP or SigLIP, or a py: BiasProbe); {model} is not one"}
    report, record = out / "counterbias", out / "counterbias.key.json"
    cb_options = CounterBiasOptions(cache=cache)
    key = hashlib.sha256(f"{prediction_key(model, folder, options)}/{cb_options.attack}/{resamples}/{seed}".encode()
                         ).hexdigest()
    if _kept(record, report / "metrics.json", key):
        return {"metrics": json.loads((report / "metrics.json").read_text()), "reused": True}
    try:
        metrics = run_counterbias(str(folder), model, cb_options, options, report=report, bootstrap=resamples,
                                  seed=seed)
    except ModelError as exc:
        return {"skipped": str(exc)}
    _keep(record, report / "metrics.json", key)
    return {"metrics": metrics, "reused": False}


def shortcut_columns(folder: Path, split: str) -> list[str]:
    """The language-shortcut label columns (`vlbench shortcuts`) a build carries for a split, if any."""
    from core.data import available_splits, load_table
    from evaluator.shortcuts.labels import CONFIG

    if split not in available_splits(folder, CONFIG):
        return []
    names = load_table(folder, CONFIG, split).column_names
    return [c for c in names if c.startswith("shortcut_") and not c.endswith("_right")]


def _by_shortcuts(bench: str, folder: Path, predictions: Path, split: str, resamples: int, seed: int) -> dict:
    """{label column: evaluate's metrics by that column's groups (Biased / Neutral / Non-Biased)}."""
    from evaluator.run import evaluate

    return {column: evaluate(ScoringRequest(bench, str(folder), split, resamples=resamples, seed=seed), predictions,
                             by=column)["by"]["groups"] for column in shortcut_columns(folder, split)}


@dataclasses.dataclass
class SuiteRun:
    """One `vlbench suite` run: what every step reads, and the card's parts as the steps find them."""

    model: str
    data: Path
    out: Path
    model_options: ModelOptions
    resamples: int
    seed: int
    images_root: Path | None
    submissions: Path | None
    hub_results: Path | None
    hub_org: str | None
    hub_source: str | None
    echo: Callable[[str], None]
    blind: bool = False  # also a blind run of each benchmark (--no-image) and the model's multimodal gain
    base_llm: str | None = None  # the model's base LLM, asked the blind prompts: the multimodal leakage
    base_llm_url: tuple = ()  # the endpoints of an openai: base LLM
    rows: dict[str, dict] = dataclasses.field(default_factory=dict)  # the card's row of each benchmark
    scored: dict[str, dict] = dataclasses.field(default_factory=dict)  # evaluate's metrics
    perceptual: dict[str, dict] = dataclasses.field(default_factory=dict)  # perceptual scores
    shortcut_groups: dict[str, dict] = dataclasses.field(default_factory=dict)  # metrics by shortcut labels


def run_suite(model: str, data: Path, out: Path, *, model_options: ModelOptions = ModelOptions(),
              only: list[str] | None = None, images_root: Path | None = None, resamples: int = 1000, seed: int = 0,
              perceptual: bool = True, counterbias: bool = True, counterbias_cache: Path | None = None,
              hub_results: Path | None = None, hub_org: str | None = None, hub_source: str | None = None,
              overwrite: bool = False, submissions: Path | None = None, shard=None, ray=None, blind: bool = False,
              base_llm: str | None = None, base_llm_url: tuple = (), echo=print) -> dict | None:
    """Predict and score every benchmark of DATA with MODEL, with the perceptual score where the model
    reads two or more modalities (`perceptual`) and CounterBias on a VL-Bias build where the model can be
    measured (`counterbias`, its counterfactual images cached in `counterbias_cache`); write OUT's card
    (card.json, report.md, index.html).
    `hub_results`: also the Hub's evaluation results of every scored benchmark, naming each one's
    dataset repo `<hub_org>/<benchmark>` and, with `hub_source`, the URL of the card. `submissions`: score each
    benchmark's file in that folder instead of running MODEL (which then names the model the files came from).
    `shard` (evaluator.shards.Shard): only predict that shard of every benchmark into OUT/predictions/ (kept, so a
    rerun predicts only what is missing) and return None; a later run without it merges each benchmark's complete
    set of shards made under the same settings (`vlbench merge`'s checks) instead of predicting, and scores.
    `ray` (evaluator.ray_shards.RayRun): each benchmark's shards as Ray tasks, their files written into
    OUT/predictions/ as they finish, each benchmark merged and scored as soon as its shards are in (`_predict_on_ray`).
    `blind`: also each benchmark without its images (`--no-image`, OUT/predictions/<bench>.blind.json) and the
    model's multimodal gain on it (`_multimodal_gain`). `base_llm` (a spec, implies `blind`): the model's base LLM
    asked the same blind prompts (OUT/predictions/<bench>.base-llm.json; `base_llm_url`: an openai: one's endpoints)
    and the model's multimodal leakage (`_multimodal_leakage`).
    """
    from core.progress import progress
    from evaluator.suite.card import write_card

    if base_llm is not None:
        check_base_llm(base_llm, base_llm_url)
        blind = True
    elif base_llm_url:
        raise ParamsError("--base-llm-base-url: the endpoint of an openai: --base-llm; no --base-llm was given")
    hub_org = _hub_org(data, hub_org, hub_results, hub_source)
    builds, broken, absent = _builds(data)
    todo, measured = _benchmarks_asked(only)
    if images_root is not None and not Path(images_root).is_dir():
        raise ParamsError(f"--images-root {images_root}: no such folder")
    if submissions is not None and not Path(submissions).is_dir():
        raise ParamsError(f"--predictions {submissions}: no such folder")
    # OUT may lie inside DATA (demo_out/card), never in or around one of its builds
    for given, flag in ((shard, "--shard"), (ray, "--ray")):
        if given is not None and submissions is not None:
            raise ParamsError(f"{flag} with --predictions: a shard runs the model; --predictions scores files made")
    if shard is not None and ray is not None:
        raise ParamsError("--ray with --shard: --ray runs every shard itself (on the cluster) and merges them")
    if blind and (submissions is not None or model_options.no_image):
        raise ParamsError(f"{'--base-llm' if base_llm else '--blind'} runs the model again without images: it needs "
                          "the model itself (not --predictions) and its images (not --no-image)")
    # several shards may start into one new OUT at once: a folder holding only predictions is one of theirs
    owned = is_suite_folder if shard is None else (
        lambda t: is_suite_folder(t) or {p.name for p in Path(t).iterdir()} <= {"predictions", MARKER})
    check_out(out, {"--data build": [*builds.values()], **({"--predictions": [Path(submissions)]} if submissions
                                                            else {})},
              overwrite, owned=owned, writer="`vlbench suite`")
    (out / "predictions").mkdir(parents=True, exist_ok=True)
    run = SuiteRun(model, data, out, model_options, resamples, seed, images_root, submissions, hub_results, hub_org,
                   hub_source, echo, blind, base_llm, tuple(base_llm_url))
    if shard is not None:  # no card: the marker says so until a run without --shard writes one
        write_atomically(out / MARKER, (dumps({"model": model, "data": str(data), "finished": False}, indent=2)
                                        + "\n").encode())
        for bench in progress([b for b in todo if b in builds], desc="benchmarks", unit="benchmark", leave=True):
            _predict_shard(run, bench, builds[bench], shard)
        return None
    with unfinished(out, model, str(data)):
        if ray is not None:  # each benchmark scored here as soon as its shards are in, while the cluster works on
            _predict_on_ray(run, [b for b in todo if b in builds], builds, ray, perceptual)
        for bench in progress(todo, desc="benchmarks", unit="benchmark", leave=True):  # one bar over the benchmarks
            folder = builds.get(bench)
            if bench in run.rows:  # scored during the Ray run
                continue
            if folder is None:
                run.rows[bench] = {"status": "not built", "reason": f"no {data}/{bench} dataset repo ({absent[bench]})"
                                   if bench in absent else f"no build of {bench} under {data} (vlbench build "
                                                           f"{bench} --source SOURCES --out {Path(data) / bench})"}
                echo(f"{bench:10s} not built")
            else:
                _score_benchmark(run, bench, folder, perceptual)
        for found in (run.rows, run.scored, run.perceptual, run.shortcut_groups):  # in the benchmarks' order, however
            ordered = {b: found.pop(b) for b in todo if b in found}                # they were scored
            found.update(ordered)
        for name, reason in broken.items():
            run.rows[f"{name}/"] = {"status": "damaged build", "reason": reason}
        bias = _bias(run, measured, builds, only, counterbias, counterbias_cache)
        card = _card(run, bias)
        write_card(out, card)
    return card


def _hub_org(data: Path, hub_org: str | None, hub_results: Path | None, hub_source: str | None) -> str | None:
    """The Hub organisation whose ORG/<benchmark> dataset repos hold the builds (--hub-org, or --data when it
    names one), checked with --hub-results and --hub-source."""
    from evaluator.publish.hub_results import check_source

    on_hub = is_hub_org(str(data))
    if on_hub:
        check_hub_org(str(data), "--data")
    hub_org = check_hub_org(hub_org, "--hub-org") if hub_org is not None else str(data) if on_hub else None
    if hub_results is not None and hub_org is None:
        raise ParamsError("--hub-results: pass --hub-org ORG, the Hub organisation whose ORG/<benchmark> dataset "
                          "repos hold the builds")
    check_source(hub_source, hub_results)
    return hub_org


def _builds(data: Path) -> tuple[dict[str, Path], dict[str, str], dict[str, str]]:
    """({benchmark: build}, {folder or repo: why it is not a usable build}, {benchmark: why no repo was found})
    of DATA: a folder of builds or a Hub organisation."""
    if is_hub_org(str(data)):
        return find_hub_builds(str(data))
    builds, broken = find_builds(Path(data))
    return builds, broken, {}


def _benchmarks_asked(only: list[str] | None) -> tuple[list[str], str | None]:
    """(the benchmarks with a task to predict and score, in registration order; the one CounterBias measures,
    or None), of those --benchmarks names (None: all)."""
    registered, measured = task_names(), counterbias_benchmarks()
    unknown = sorted(set(only or ()) - set(registered) - set(measured))
    if unknown:
        raise ParamsError(f"--benchmarks {unknown[0]}: not a benchmark with a task, nor {' / '.join(measured)} "
                          f"(known: {', '.join([*registered, *measured])})")
    return [b for b in registered if only is None or b in only], next(iter(measured), None)


def _options(run: SuiteRun, task) -> ModelOptions:
    """The model options of one benchmark: its images under --images-root; --circular where it is asked by
    letter (the others are asked as they are)."""
    images = (None if run.images_root is None or task.images_folder is None
              else Path(run.images_root) / task.images_folder)
    return dataclasses.replace(run.model_options, images=images if images is not None and images.is_dir()
                               else run.model_options.images,
                               circular=run.model_options.circular and letter_choice(task.generative))


def _predict_shard(run: SuiteRun, bench: str, folder: Path, shard) -> str | None:
    """`suite --shard`: one shard of a benchmark's predictions, kept under the run's key (a rerun skips it), and of
    its blind runs (`_blind_runs`); a benchmark the model cannot be run on is said in its line, as the card would,
    and the reason returned."""
    from evaluator.run import predict

    options = _options(run, get_task(bench))
    try:
        runs = [(bench, run.model, options), *_blind_runs(run, bench, folder, options)]
    except VlbenchError as exc:
        run.echo(f"{bench:10s} not predicted: {exc}")
        return str(exc)
    for name, model, settings in runs:
        path = shard.path(run.out / "predictions" / f"{name}.json")
        record = path.with_name(path.name.removesuffix(".json") + ".key.json")
        try:
            key = prediction_key(model, folder, settings)
            if _kept(record, path, key):
                run.echo(f"{name:10s} shard {shard.index} of {shard.count} kept")
                continue
            _, rows, _ = predict(bench, str(folder), model, run.out / "predictions" / f"{name}.json",
                                 options=settings, shard=shard)
        except WriteError:
            raise
        except VlbenchError as exc:
            run.echo(f"{name:10s} not predicted: {exc}")
            if name == bench:
                return str(exc)
            continue  # a blind run that cannot run: the card-writing run says why
        _keep(record, path, key)
        run.echo(f"{name:10s} shard {shard.index} of {shard.count}: {rows:,} rows")
    return None


def _blind_runs(run: SuiteRun, bench: str, folder: Path, options: ModelOptions) -> list[tuple[str, str, ModelOptions]]:
    """(file name, model, options) of the blind runs a benchmark's row asks for: with --blind the model's without
    images, with --base-llm its base LLM's on the same prompts; none where the model reads no image of it
    (`_blind_refusal`)."""
    if not run.blind or _blind_refusal(run, bench, folder, options) is not None:
        return []
    blind = dataclasses.replace(options, no_image=True)
    return [(f"{bench}.blind", run.model, blind),
            *([(f"{bench}.base-llm", run.base_llm, base_llm_options(run, blind))] if run.base_llm else [])]


def _blind_refusal(run: SuiteRun, bench: str, folder: Path, options: ModelOptions) -> str | None:
    """Why the model's score on the benchmark has no image to lose (it reads none of its images or videos), or
    None."""
    task = get_task(bench)
    read = modalities_read(task, task.make_model(run.model, dataclasses.replace(options, data=folder)), folder)
    if {"image", "video"} & set(read):
        return None
    return (f"the model is shown no image of {bench} (it reads {', '.join(read) or 'none'} of its inputs): its score "
            "has no image to lose")


def _predict_on_ray(run: SuiteRun, benches: list[str], builds: dict[str, Path], ray, perceptual: bool) -> None:
    """`suite --ray`: each benchmark's shards as Ray tasks, their files written into OUT/predictions/ as they finish;
    a benchmark whose shards are all in is merged and scored at once (`_score_benchmark`), while the cluster predicts
    the others; one the nodes could not predict gets its row with their reason (never predicted here instead). A task
    gets the shard's files OUT holds already (a rerun's), which `_predict_shard` keeps when they
    were made under the same settings, so a rerun predicts only what is missing."""
    import functools

    from evaluator.ray_shards import run_on_ray, write_shard_files

    folder = run.out / "predictions"
    kept = {p.name: p.read_bytes() for p in sorted(folder.iterdir())
            if ".shard-" in p.name and p.is_file() and not p.is_symlink()}
    job = functools.partial(_suite_shard_files, dataclasses.replace(run, echo=print), builds, kept)

    arrived: dict[str, list] = {}

    def keep(bench: str, shard, result) -> None:
        files, lines, reason = result
        write_shard_files(folder, files)
        for line in lines:
            run.echo(line)
        arrived.setdefault(bench, []).append(reason)
        if len(arrived[bench]) == shard.count:
            reasons = [r for r in arrived[bench] if r is not None]
            if reasons:
                _not_scored(run, bench, reasons[0])
            else:
                _score_benchmark(run, bench, builds[bench], perceptual)

    run_on_ray(ray, benches, job, keep, run.echo, f"{run.model} on {len(benches)} benchmarks")


def _suite_shard_files(run: SuiteRun, builds: dict[str, Path], kept: dict[str, bytes], bench: str,
                       shard) -> tuple[dict[str, bytes], list[str], str | None]:
    """One benchmark's shard, predicted on a Ray node into a folder of its own (holding the shard's files OUT kept):
    its prediction files by name, its lines, and why it was not predicted (None when it was)."""
    import tempfile

    lines: list[str] = []
    mine = re.compile(rf"{re.escape(bench)}(\.blind|\.base-llm)?\.shard-{shard.index}-of-{shard.count}\..*")
    with tempfile.TemporaryDirectory(prefix="vlbench-suite-shard-") as folder:
        here = dataclasses.replace(run, out=Path(folder), echo=lines.append)
        (here.out / "predictions").mkdir()
        for name, data in kept.items():
            if mine.fullmatch(name):
                (here.out / "predictions" / name).write_bytes(data)
        reason = _predict_shard(here, bench, builds[bench], shard)
        files = {p.name: p.read_bytes() for p in sorted((here.out / "predictions").iterdir())
                 if mine.fullmatch(p.name) and p.is_file()}
    return files, lines, reason


def _merged_shards(predictions: Path, key: str) -> int | None:
    """Merge the complete set of shards of PREDICTIONS (`suite --shard`: <name>.shard-I-of-N.json beside it), each
    kept under `key`, into it; the shard count, or None when there is no complete set."""
    from evaluator.shards import merge

    name = predictions.name.removesuffix(".json")
    pattern = re.compile(rf"{re.escape(name)}\.shard-(\d+)-of-(\d+)\.json")
    sets: dict[int, dict[int, Path]] = {}
    for path in predictions.parent.iterdir():
        found = pattern.fullmatch(path.name)
        if found and _kept(path.with_name(path.name.removesuffix(".json") + ".key.json"), path, key):
            sets.setdefault(int(found.group(2)), {})[int(found.group(1))] = path
    complete = sorted(n for n, paths in sets.items() if len(paths) == n)
    if not complete:
        return None
    count = complete[-1]
    merge([sets[count][i] for i in range(count)], predictions)
    return count


def _not_scored(run: SuiteRun, bench: str, reason: str) -> None:
    """The row of a benchmark the model cannot be scored on, with the reason (and where the suite takes images)."""
    folder = get_task(bench).images_folder
    if "--images" in reason and folder is not None:
        reason += f" (the suite takes them from --images-root DIR/{folder}/)"
    run.rows[bench] = {"status": "not scored", "reason": reason}
    run.echo(f"{bench:10s} not scored: {reason}")


def _score_benchmark(run: SuiteRun, bench: str, folder: Path, perceptual: bool) -> None:
    """Predict (or take from --predictions, or merge from `--shard` runs) and score one built benchmark into its
    row, with its metrics by the shortcut labels it carries and, where asked, its perceptual score; a benchmark
    the model cannot be scored on gets its row with the reason."""
    task = get_task(bench)
    options = _options(run, task)
    try:
        key = prediction_key(run.model, folder, options)  # a build whose manifest lists no outputs: its row
        predictions, reused = _predictions(run, bench, folder, options, key)
        metrics = _evaluate(run, bench, folder, predictions)
    except WriteError:
        raise  # the environment (a full disk, a read-only OUT): the run stops, the card is not rewritten
    except VlbenchError as exc:
        _not_scored(run, bench, str(exc))
        return
    run.scored[bench] = metrics
    run.rows[bench] = {"status": "scored", "split": metrics["split"], "reused": reused, "folder": str(folder),
                       "predictions": predictions.relative_to(run.out).as_posix(),
                       **({"input": metrics["input"]} if "input" in metrics else {}),
                       "predictions_sha256": sha256_file(predictions),
                       "record_sha256": record_sha256(predictions),
                       "build": build_identity(folder), **answers_read(metrics),
                       **({"circular": metrics["circular"]} if metrics.get("circular", {}).get("prompts") else {}),
                       **({"prior_following": _prior_entry(metrics["prior_following"])}
                          if "prior_following" in metrics else {}),
                       "headline": {h.key: {"label": h.label, "higher_is_better": h.higher_is_better,
                                            **_value(metrics, h.key)} for h in task.headline}}
    if run.blind:
        run.rows[bench]["multimodal_gain"] = _multimodal_gain(run, bench, folder, options, predictions)
    if run.base_llm is not None:
        run.rows[bench]["multimodal_leakage"] = _multimodal_leakage(run, bench, folder, options,
                                                                    run.rows[bench]["multimodal_gain"])
    groups = _by_shortcuts(bench, folder, predictions, metrics["split"], run.resamples, run.seed)
    if groups:
        run.shortcut_groups[bench] = {"headline": [h.key for h in task.headline], "groups": groups}
    if perceptual and run.submissions is not None:
        run.rows[bench]["perceptual"] = "scored from --predictions: the perceptual score runs the model itself"
    elif perceptual:
        try:
            found = _perceptual(bench, run.model, folder, run.out, key, options, run.resamples, run.seed)
        except WriteError:
            raise
        except VlbenchError as exc:
            found = {"skipped": str(exc)}
        if "metrics" in found:
            run.perceptual[bench] = found["metrics"]
        run.rows[bench]["perceptual"] = found.get("skipped", "scored")
    shown = "  ".join(f"{h.label} {_fmt(_value(metrics, h.key)['value'])}" for h in task.headline)
    run.echo(f"{bench:10s} {metrics['split']:10s} {shown}{'  (kept predictions)' if reused else ''}")


def _prior_entry(found: dict) -> dict:
    """The card's entry of evaluate's prior-following rate: the rate and its interval, overall and per part, with
    the counts; or why it was not measured."""
    if "not_measured" in found:
        return {"not_measured": found["not_measured"]}
    bounds = found.get("intervals", {}).get("metrics", {})

    def entry(counts: dict, key: str) -> dict:
        return {"value": counts["rate"], "interval": bounds.get(key), "errors": counts["errors"],
                "following": counts["following"]}

    return {"prior": found["prior"], **entry(found, "rate"),
            **({"parts_column": found["parts_column"],
                "parts": {v: entry(c, f"parts.{v}.rate") for v, c in found["parts"].items()}}
               if "parts" in found else {})}


def _predictions(run: SuiteRun, bench: str, folder: Path, options: ModelOptions, key: str,
                 name: str | None = None, model: str | None = None) -> tuple[Path, bool]:
    """(the benchmark's predictions under OUT/predictions/, whether kept from an earlier run): the
    --predictions file copied, the kept file made under `key`, or the model's new predictions (`name`: the file's
    name without .json, the benchmark's by default; a blind run's is `<bench>.blind`; `model`: the spec run, the
    suite's model by default)."""
    from evaluator.run import predict

    name = name or bench
    predictions = run.out / "predictions" / f"{name}.json"
    record = run.out / "predictions" / f"{name}.key.json"
    if run.submissions is not None:
        return _copy_submission(submission_of(run.submissions, bench), run.out), False
    if _kept(record, predictions, key):
        return predictions, True
    merged = _merged_shards(predictions, key)
    if merged is not None:
        _keep(record, predictions, key)
        run.echo(f"{name:10s} merged {merged} shards")
        return predictions, False
    try:
        predict(bench, str(folder), model or run.model, predictions, options=options)
    except (VlbenchError, OSError, MemoryError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 -- the model's own failure on this benchmark: its row
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ModelError(f"{model or run.model} failed on {bench} ({type(exc).__name__}: "
                         f"{sanitise(first, (), 200)})") from None
    _keep(record, predictions, key)
    return predictions, False


def _multimodal_gain(run: SuiteRun, bench: str, folder: Path, options: ModelOptions, predictions: Path) -> dict:
    """The model's multimodal gain on the benchmark (Chen et al., *Are We on the Right Way for Evaluating Large
    Vision-Language Models?*, NeurIPS 2024, §4: MG = S(with images) - S(without); for a metric where lower is
    better, S(without) - S(with), so that MG > 0 always means the images improved the score, as ML's lead does):
    its blind run
    (`--no-image`, kept under its own key, so cached apart from the run with images) compared with the run with
    images on the same rows, per headline metric, with the paired cluster-bootstrap 95% interval and the paired
    permutation test's p-value (`vlbench compare`'s engine); or why it was not measured."""
    from evaluator.compare import compare_predictions

    task = get_task(bench)
    blind = dataclasses.replace(options, no_image=True)
    try:
        refused = _blind_refusal(run, bench, folder, options)
        if refused is not None:
            raise ModelError(refused)
        path, reused = _predictions(run, bench, folder, blind, prediction_key(run.model, folder, blind),
                                    f"{bench}.blind")
        found = compare_predictions(ScoringRequest(bench, str(folder), None, resamples=max(run.resamples, 1),
                                                   seed=run.seed), [path, predictions])["comparisons"][0]["metrics"]
    except WriteError:
        raise
    except VlbenchError as exc:
        run.echo(f"{bench:10s} no blind run: {exc}")
        return {"not_measured": str(exc)}
    gains = {}
    for h in task.headline:  # one sign for every metric: a positive gain is what the images improve
        if h.key not in found:
            continue
        entry, sign = found[h.key], 1 if h.higher_is_better else -1
        gains[h.key] = {"label": h.label, "higher_is_better": h.higher_is_better, "with": entry["b"],
                        "without": entry["a"],
                        "value": None if entry["difference"] is None else sign * entry["difference"],
                        "interval": None if not entry["interval"] else sorted(sign * b for b in entry["interval"]),
                        "p_value": entry["p_value"]}
    run.echo(f"{bench:10s} {'blind':10s} " + "  ".join(f"MG {g['label']} {_fmt(g['value'])}" for g in gains.values())
             + ("  (kept predictions)" if reused else ""))
    return {"predictions": path.relative_to(run.out).as_posix(), "metrics": gains}


def check_base_llm(spec: str, urls) -> None:
    """`--base-llm SPEC`: a text-only causal LM run here (`hf:`) or served (`openai:`, its endpoints from
    `--base-llm-base-url`), checked before any benchmark runs."""
    from evaluator.models.spec import hf_config, parse_spec
    from evaluator.models.vlm_checkpoint import is_text_lm

    kind, name = parse_spec(spec)
    if kind == "openai":
        from evaluator.models.served import check_endpoints, parse_base_urls

        check_endpoints(parse_base_urls(urls), f"--base-llm {spec} (--base-llm-base-url gives its endpoint)")
        return
    if urls:
        raise ParamsError(f"--base-llm-base-url: the endpoint of an openai: base LLM; --base-llm {spec} runs here")
    if kind != "hf":
        raise ParamsError(f"--base-llm {spec}: a base LLM is an hf: text-only causal LM checkpoint, or one served "
                          "as openai:MODEL (`vllm serve` runs a vllm: one)")
    config = hf_config(name)
    if not is_text_lm(config):
        raise ParamsError(f"--base-llm {spec}: a {config.model_type} model is not a text-only causal LM (the "
                          "language model a VLM was built on, e.g. Vicuna for LLaVA-1.5, Qwen2 for Qwen2-VL)")


BASE_LLM_OWN = ("revision", "chat_template", "min_pixels", "max_pixels", "base_url", "images", "videos")


def base_llm_options(run: SuiteRun, options: ModelOptions) -> ModelOptions:
    """The base LLM's options: the blind run's, as far as the base LLM's kind reads them, less those that name the
    VLM's checkpoint, endpoint or pictures (BASE_LLM_OWN); its endpoints are --base-llm-base-url's."""
    from evaluator.models.options import MODEL_OPTIONS, reader_kind
    from evaluator.models.served import parse_base_urls
    from evaluator.models.spec import parse_spec

    kind = reader_kind(parse_spec(run.base_llm)[0], True)
    kept = {o.field: getattr(options, o.field) for o in MODEL_OPTIONS
            if kind in o.readers and o.field not in BASE_LLM_OWN}
    return ModelOptions(**{**kept, "no_image": True, "base_url": parse_base_urls(run.base_llm_url)})


def _multimodal_leakage(run: SuiteRun, bench: str, folder: Path, options: ModelOptions, gain: dict) -> dict:
    """The model's multimodal leakage on the benchmark (Chen et al., NeurIPS 2024, §4: ML = max(0, S(LVLM without
    images) - S(its base LLM))): the base LLM asked the blind run's prompts (kept under its own key), compared with
    the blind run on the same rows per headline metric (`vlbench compare`'s engine). For a metric where lower is
    better, the blind model's lead is S(base LLM) - S(LVLM without images). max(0, .) is monotone, so the percentile
    interval of ML is the paired interval of the lead with each bound floored at 0; p is the paired permutation
    test of no lead. Or why it was not measured (no blind run, a base LLM that cannot be asked)."""
    from evaluator.compare import compare_predictions

    if "not_measured" in gain:
        return {"base_llm": run.base_llm, "not_measured": f"no blind run ({gain['not_measured']})"}
    task = get_task(bench)
    base = base_llm_options(run, options)
    try:
        path, reused = _predictions(run, bench, folder, base, prediction_key(run.base_llm, folder, base),
                                    f"{bench}.base-llm", model=run.base_llm)
        found = compare_predictions(ScoringRequest(bench, str(folder), None, resamples=max(run.resamples, 1),
                                                   seed=run.seed), [path, run.out / gain["predictions"]]
                                    )["comparisons"][0]["metrics"]
    except WriteError:
        raise
    except VlbenchError as exc:
        run.echo(f"{bench:10s} no base LLM run: {exc}")
        return {"base_llm": run.base_llm, "not_measured": str(exc)}
    leaks = {}
    for h in task.headline:
        if h.key not in found:
            continue
        entry, sign = found[h.key], 1 if h.higher_is_better else -1
        lead = None if entry["difference"] is None else sign * entry["difference"]
        bounds = sorted(sign * b for b in entry["interval"]) if entry["interval"] else None
        leaks[h.key] = {"label": h.label, "without": entry["b"], "base": entry["a"], "lead": lead,
                        "value": None if lead is None else max(0.0, lead),
                        "interval": None if bounds is None else [max(0.0, b) for b in bounds],
                        "p_value": entry["p_value"]}
    run.echo(f"{bench:10s} {'base LLM':10s} " + "  ".join(f"ML {m['label']} {_fmt(m['value'])}"
                                                         for m in leaks.values())
             + ("  (kept predictions)" if reused else ""))
    return {"base_llm": run.base_llm, "predictions": path.relative_to(run.out).as_posix(), "metrics": leaks}


def _evaluate(run: SuiteRun, bench: str, folder: Path, predictions: Path) -> dict:
    """`vlbench evaluate`'s metrics of the predictions, its report under OUT/reports/<bench> (and the Hub's
    evaluation results where asked)."""
    from evaluator.run import evaluate

    return evaluate(ScoringRequest(bench, str(folder), None, resamples=run.resamples, seed=run.seed,
                                   partial_hint=COMPLETE_RUNS, train_file=run.model_options.train_file),
                    predictions, report=run.out / "reports" / bench, hub_results=run.hub_results,
                    hub_dataset=None if run.hub_org is None else f"{run.hub_org}/{bench}", hub_source=run.hub_source)


def _bias(run: SuiteRun, bench: str | None, builds: dict[str, Path], only: list[str] | None, counterbias: bool,
          cache: Path | None) -> dict:
    """CounterBias of the model on the build of the benchmark it measures (`_counterbias`), or why not."""
    if not counterbias:
        return {"skipped": "--no-counterbias"}
    if run.submissions is not None:
        return {"skipped": "scored from --predictions: CounterBias attacks the model itself"}
    if bench is None:
        return {"skipped": "no registered benchmark is measured by CounterBias"}
    if only is not None and bench not in only:
        return {"skipped": f"{bench} is not among --benchmarks"}
    bias = _counterbias(bench, run.model, builds.get(bench), run.out, run.model_options, run.resamples, run.seed, cache)
    if "metrics" in bias:
        avg = bias["metrics"]["measures"][next(iter(bias["metrics"]["measures"]))]["avg"]
        run.echo(f"{bench:10s} CounterBias mean |bias| " + "  ".join(f"{k} {_fmt(v if v is None else 100 * v)}%"
                                                                     for k, v in avg.items())
                 + ("  (kept)" if bias["reused"] else ""))
    return {**bias, "benchmark": bench}


def _card(run: SuiteRun, bias: dict) -> dict:
    """card.json's content: the rows, the diagnostics the scores support and those they do not."""
    from evaluator.suite.diagnostics import diagnostics

    found, missing = diagnostics(run.scored, run.perceptual, run.shortcut_groups, bias)
    return {"model": run.model, "data": str(run.data), **({"predictions": str(run.submissions)}
                                                          if run.submissions else {}),
            "benchmarks": run.rows, "diagnostics": found, "missing_diagnostics": missing,
            "resamples": run.resamples, "seed": run.seed, "vlbench": vlbench_version()}


def answers_read(metrics: dict) -> dict:
    """A scored benchmark's `answers` entry where the model generated them: how many were cut off inside
    their thinking (unfinished) or could not be parsed, and whether thinking was on."""
    record = metrics.get("prediction_record") or {}
    if record.get("unfinished_answers") is None:
        return {}
    return {"answers": {"thinking": bool(record.get("thinking")), "unfinished": record["unfinished_answers"],
                        "unparsed": record.get("unparsed_outputs", 0),
                        "rows": (metrics.get("coverage") or {}).get("scored")}}


def _value(metrics: dict, key: str) -> dict:
    from evaluator.suite.diagnostics import estimate

    return estimate(metrics, key).as_dict()


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"
