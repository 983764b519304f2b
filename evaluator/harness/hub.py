"""A pushed build as a Hub benchmark that Inspect runs: `vlbench push BUILD --inspect-task TASK` adds a layer.

The Hub registers a dataset repo as a benchmark by its `eval.yaml`; for the inspect-ai framework, Inspect reads
it (`inspect eval hf/ORG/NAME/TASK_ID`, inspect_ai/_eval/task/hf.py, its `HFTask` schema, extra keys refused):
each task names a config and split, a `field_spec` mapping columns to an Inspect Sample, and solvers and scorers
from Inspect's built-ins only. The layer, made from an Inspect task `vlbench export-task` wrote from this very
build (its manifest's SHA-256 checked), is:

- `inspect/<split>-00000-of-00001.parquet`, the `inspect` config: one row per prompt of the exported documents
  -- `input` (the prompt in vlbench's words: template, options, instruction), `image` (the image as the data URL
  `openai:` sends; the Hub format takes one image per sample, and shows it after the text), `target` (the
  reference answer: the right option's letter, or the benchmark's reference column), `id` (`<vlbench
  id>#<prompt>`, as the exported task's samples; named in the field_spec, though Inspect 0.3.285 numbers a Hub
  task's samples itself) and `vlbench` (the record the exported task's scorer logs, without the output), which
  Inspect keeps as the sample's metadata, so `vlbench evaluate` reads the run's `.eval` log back by id and
  scores it by the paper's rules;
- `inspect/<config>/<split>-00000-of-00001.parquet`, the `inspect_<config>` config, for a leaderboard whose metric
  reads one built config's rows (GQA-OOD's acc-tail, config `tail`): the rows of `inspect` whose item is in it;
- `eval.yaml` with `evaluation_framework: inspect-ai`: one task per leaderboard (evaluator/publish/hub_results.py),
  each over the prompts of the rows its metric reads (`inspect`, or `inspect_<config>`), solved by `generate`
  (greedy, the exported answer budget) and scored by a built-in proxy (`match` at the beginning for a letter,
  `exact` for a generated answer). HFTask has no metric field, so the description names each task's metric and
  scale and says that Inspect's proxy is a fraction from 0 to 1 while the leaderboards hold vlbench's values;
- `README.md`, the card with the configs declared and its last section (on the Hub as a benchmark) replaced by
  one on running it in Inspect;
- `inspect/vlbench_layer.json`: what the layer replaced and added, with SHA-256s, so that `vlbench verify`
  checks a downloaded repo (the build's own files against its manifest, the layer against this record).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path, PurePosixPath

from core.errors import ParamsError, VlbenchError
from core.hashing import sha256_file
from core.jsonout import dumps
from core.manifest import MANIFEST

CONFIG = "inspect"
LAYER = f"{CONFIG}/vlbench_layer.json"
WRITTEN_BY = "vlbench push --inspect-task"
SCORERS = {"letter": {"name": "match", "args": {"location": "begin"}}, "generate": {"name": "exact"}}


def _exported(build: Path, task_dir: Path) -> tuple[dict, Path]:
    """The meta and documents of an Inspect task exported from `build`."""
    from evaluator.harness.meta import read_meta

    where = f"--inspect-task {task_dir}"
    try:
        meta = read_meta(task_dir)
    except VlbenchError as exc:
        raise ParamsError(f"{where}: {exc}") from None
    if meta.get("harness") != "inspect":
        raise ParamsError(f"{where}: is an {meta.get('harness')} task; the Hub's benchmark format runs Inspect "
                          "tasks (export it with --harness inspect)")
    built = sha256_file(build / MANIFEST)
    if meta.get("manifest_sha256") != built:
        raise ParamsError(f"{where}: was exported from the build whose manifest SHA-256 begins "
                          f"{str(meta.get('manifest_sha256'))[:16]}, not from {build} ({built[:16]})")
    docs = task_dir / "docs" / f"{meta['split']}.parquet"
    if not docs.is_file() or sha256_file(docs) != meta.get("docs_sha256"):
        raise ParamsError(f"{where}: {docs.relative_to(task_dir)} is missing or differs from what export-task "
                          "wrote; export the task again")
    return meta, docs


def hub_table(task, table, docs: list[dict], meta: dict):
    """The `inspect` config's rows (see the module docstring), in the documents' order."""
    import pyarrow as pa

    from evaluator.harness.outputs import prompt_keys
    from evaluator.harness.run import prompt_record
    from evaluator.models.served import image_url

    _, _, row_of = task.generative.prompts(table)
    reference = dict(zip(prompt_keys(task, table, row_of), task.generative.references(table)))
    rows = []
    for n, doc in enumerate(docs):
        key = (doc["vlbench_id"], doc["prompt_index"])
        if key not in reference:
            raise ParamsError(f"document {n}: id {key[0][:60]} (prompt {key[1]}) is not a prompt of the build")
        if len(doc["images"]) > 1:
            raise ParamsError(f"document {n} (id {key[0][:60]}): shows {len(doc['images'])} images; the Hub's "
                              "benchmark format takes one image per sample")
        rows.append({"id": f"{key[0]}#{key[1]}", "input": doc["prompt"],
                     "image": image_url(doc["images"][0]["bytes"]) if doc["images"] else "",
                     "target": reference[key], "vlbench": prompt_record(meta, doc)})
    record = pa.struct([("benchmark", pa.string()), ("build", pa.string()), ("split", pa.string()),
                        ("form", pa.string()), ("id", pa.string()), ("prompt_index", pa.int32()),
                        ("prompts", pa.int32())])
    schema = pa.schema([("id", pa.string()), ("input", pa.string()), ("image", pa.string()),
                        ("target", pa.string()), ("vlbench", record)])
    return pa.Table.from_pylist(rows, schema=schema)


def layer_config(built_config: str | None) -> str:
    """The layer's config holding the prompts of a built config's rows (None: every row, `inspect`)."""
    return CONFIG if built_config is None else f"{CONFIG}_{built_config}"


def rows_of_config(task, rows, built):
    """The layer's rows (`hub_table`) whose item is a row of `built`, another config's table of the split."""
    import pyarrow as pa

    from evaluator.harness.docs import parse_id

    keep = set(task.ids(built))
    return rows.filter(pa.array([parse_id(r["id"]) in keep for r in rows.column("vlbench").to_pylist()],
                                pa.bool_()))


def inspect_eval_yaml(benchmark: str, meta: dict, repo_id: str, tasks: list) -> dict:
    """eval.yaml for the inspect-ai framework: one task per leaderboard (`tasks`: (task id, Headline, the layer's
    config holding the prompts of the rows its metric reads))."""
    from evaluator.publish.hub_results import leaderboards_text

    if not tasks:
        raise ParamsError(f"{benchmark}: no leaderboard metric (higher is better) to make a Hub task of")
    first = tasks[0][0]
    field_spec = {"input": "input", "target": "target", "id": "id", "metadata": ["vlbench"],
                  **({"input_image": "image"} if meta["images"] else {})}
    solver = {"name": "generate", "args": {"temperature": 0.0, "max_tokens": meta["generation"]["max_new_tokens"]}}
    return {
        "name": benchmark,
        "description": (f"{benchmark}, built from its raw sources by vlbench, asked in vlbench's words "
                        f"(`inspect eval hf/{repo_id}/{first}` runs it). Each task asks the prompts of the rows its "
                        "leaderboard's metric reads. The per-sample score Inspect prints is a proxy "
                        f"(`{SCORERS[meta['form']]['name']}` against the reference answer, its accuracy a fraction "
                        "from 0 to 1); the leaderboards (higher is better) hold vlbench's values, each on its own "
                        f"scale: {leaderboards_text(tasks, meta['split'])}. "
                        f"`vlbench evaluate {benchmark} --data {repo_id} --predictions LOG.eval` scores a run's log "
                        "by the paper's rules."),
        "evaluation_framework": "inspect-ai",
        "tasks": [copy.deepcopy({"id": tid, "config": config, "split": meta["split"], "field_spec": field_spec,
                                 "solvers": [solver], "scorers": [SCORERS[meta["form"]]]}) for tid, _, config in tasks],
    }


def card_with_config(text: str, benchmark: str, split: str, repo_hint: str, tasks: list,
                     data: dict[str | None, str]) -> str:
    """The build's card with the layer's configs declared (`data`: the built config whose rows a config holds,
    None for every row -> its file) and its last section, on the Hub as a benchmark
    (evaluator/publish/hub_results.card_section), replaced by one on running its tasks (as `inspect_eval_yaml`
    takes them) in Inspect."""
    from huggingface_hub import DatasetCard

    from evaluator.publish.hub_results import CARD_HEADING

    card = DatasetCard(text)
    configs = list(card.data.get("configs") or [])
    configs += [{"config_name": layer_config(built), "data_files": [{"split": split,
                                                                    "path": f"{PurePosixPath(rel).parent}/{split}-*"}]}
                for built, rel in data.items()]
    card.data.configs = configs
    subsets = [f"`{layer_config(built)}` those of the rows of config `{built}`" for built in data if built]
    section = "\n".join([
        "", "## Running it in Inspect", "",
        f"The `{CONFIG}` config holds this benchmark's prompts in vlbench's words, one row per prompt (the image "
        "after the text, as Inspect shows a Hub task's image)" + "".join(f", {s}" for s in subsets) + ". `eval.yaml` "
        "(`evaluation_framework: inspect-ai`) makes a task of each leaderboard, over the prompts its metric reads:",
        "", *(f"- `{tid}`: {h.label} {h.scale_words}, config `{config}`, split `{split}`" for tid, h, config in tasks),
        "",
        f"    inspect eval hf/{repo_hint}/{tasks[0][0]} --model PROVIDER/MODEL --log-dir LOGS", "",
        "Inspect's printed score is a proxy, its accuracy a fraction from 0 to 1. Score the log by the benchmark's "
        "own rules, each metric on its scale (intervals, `compare` and leaderboards follow):", "",
        f"    vlbench evaluate {benchmark} --data {repo_hint} --predictions LOGS/....eval", ""])
    body = str(card)
    if CARD_HEADING in body:  # the plain build's section says why its eval.yaml names no framework
        body = body[:body.rindex("\n" + CARD_HEADING)]
    return body.rstrip("\n") + "\n" + section


def write_layer(build: Path, task_dir: Path, repo_id: str, staging: Path) -> list[str]:
    """Write the layer's files into `staging` (same relative paths as in the repo); returns them."""
    import pyarrow.parquet as pq
    import yaml

    from core.data import available_splits, load_table, read_parquet
    from evaluator.publish.hub_results import EVAL_YAML, built_hub_tasks, hub_tasks
    from evaluator.splits import checked_table
    from evaluator.tasks import get_task

    build, task_dir = Path(build), Path(task_dir)
    meta, docs_path = _exported(build, task_dir)
    task = get_task(meta["benchmark"])
    docs = read_parquet(docs_path).to_pylist()
    table = checked_table(task, build, meta["split"], load_table(build, meta["config"], meta["split"]))
    rows = hub_table(task, table, docs, meta)
    meta = {**meta, "images": any(rows.column("image").to_pylist())}
    configs = {task.config} | {h.config for _, h in hub_tasks(task.name) if h.config}
    built, _, _ = built_hub_tasks(task.name, {c: available_splits(build, c) for c in configs}, meta["split"])
    tasks = [(tid, h, layer_config(h.config)) for tid, h, _ in built]
    spec = inspect_eval_yaml(meta["benchmark"], meta, repo_id, tasks)
    data = {None: f"{CONFIG}/{meta['split']}-00000-of-00001.parquet"}
    (staging / CONFIG).mkdir(parents=True)
    pq.write_table(rows, staging / data[None])
    for built_config in sorted({h.config for _, h, _ in tasks if h.config}):
        data[built_config] = f"{CONFIG}/{built_config}/{meta['split']}-00000-of-00001.parquet"
        (staging / CONFIG / built_config).mkdir()
        pq.write_table(rows_of_config(task, rows, load_table(build, built_config, meta["split"])),
                       staging / data[built_config])
    (staging / EVAL_YAML).write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=100))
    card = card_with_config((build / "README.md").read_text(), meta["benchmark"], meta["split"], repo_id, tasks,
                            data)
    (staging / "README.md").write_text(card)
    listed = {item["path"]: item["sha256"] for item in json.loads((build / MANIFEST).read_bytes())["outputs"]}
    layer = {"written_by": WRITTEN_BY, "benchmark": meta["benchmark"], "split": meta["split"], "form": meta["form"],
             "manifest_sha256": meta["manifest_sha256"], "vlbench": meta["vlbench"],
             "replaced": {rel: {"built_sha256": listed.get(rel), "sha256": sha256_file(staging / rel)}
                          for rel in (EVAL_YAML, "README.md")},
             "added": {rel: sha256_file(staging / rel) for rel in data.values()}}
    (staging / LAYER).write_text(dumps(layer, indent=2, sort_keys=True) + "\n")
    return sorted([EVAL_YAML, "README.md", *data.values(), LAYER])


def layer_problems(folder: Path, listed: dict) -> tuple[list[str], set[str]]:
    """(problems, paths the layer accounts for) of a folder holding a layer record: each replaced file is the
    layer's and replaced the manifest's; each added file is the layer's."""
    from core.manifest import read_manifest_file

    path = Path(folder) / LAYER
    try:
        layer = read_manifest_file(path)
    except VlbenchError as exc:
        return [f"{LAYER}: {exc}"], {LAYER}
    if layer.get("written_by") != WRITTEN_BY or not isinstance(layer.get("replaced"), dict) or \
            not isinstance(layer.get("added"), dict):
        return [f"{LAYER}: not a layer record written by `{WRITTEN_BY}`"], {LAYER}
    problems, covered = [], {LAYER}
    for rel, hashes in sorted(layer["replaced"].items()):
        covered.add(rel)
        if not isinstance(hashes, dict) or rel not in listed or hashes.get("built_sha256") != listed[rel]["sha256"]:
            problems.append(f"{rel}: the layer record says it replaced a file the manifest does not list so")
        elif not (folder / rel).is_file() or sha256_file(folder / rel) != hashes.get("sha256"):
            problems.append(f"{rel}: sha256 differs from the layer record ({LAYER})")
    for rel, digest in sorted(layer["added"].items()):
        covered.add(rel)
        if not str(rel).startswith(f"{CONFIG}/") or ".." in Path(rel).parts:
            problems.append(f"{LAYER}: added file {str(rel)[:80]} is outside {CONFIG}/")
        elif not (folder / rel).is_file() or sha256_file(folder / rel) != digest:
            problems.append(f"{rel}: missing or its sha256 differs from the layer record ({LAYER})")
    return problems, covered
