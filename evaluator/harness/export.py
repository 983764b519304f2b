"""`vlbench export-task BENCH --data BUILD --harness lmms-eval --out DIR`: a built split as a native task
of another harness, self-contained in DIR.

DIR holds, for every harness:
- `docs/<split>.parquet`: the documents (evaluator/harness/docs.py), images embedded;
- `scored/<config>/<split>-*.parquet` and `scored/manifest.json`: the build's split as it was built, which
  the task's scoring reads (the group metrics need the split's own columns); from the public half of a sealed
  build, its public columns only: the harness then scores nothing (NaN metrics), the challenge's service does;
- `vlbench_task.json`: what was exported (vlbench version, benchmark, split, the build's manifest SHA-256,
  the form, the prompt template, the decoding), which also marks DIR as written by this command;
- `README.md`: how to run it and read its log back;
and the harness's own files (evaluator/harness/lmms_eval.py). DIR is written in a staging folder and renamed
into place (core/outdir.py); an existing DIR is replaced only when this command wrote it.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from core.errors import ParamsError, VlbenchError
from core.hashing import sha256_file
from core.jsonout import dumps
from core.manifest import MANIFEST
from evaluator.harness.meta import META, is_task_folder

HARNESSES = ("lmms-eval", "inspect")
# `--choice-mode auto` per harness. lmms-eval 0.7.3 asks multiple choice by letter: its transformers model classes
# cannot score log-likelihoods of image prompts here (llava_hf, the one that implements `loglikelihood`, counts
# its context without the images and fails under transformers 5: "Found 1 <image> tokens in the text but no
# images were passed"; its chat class generates only). VisDial and Social-IQ, which cannot be asked by letter,
# stay log-likelihood (lmms-eval's `multiple_choice`), for a model class that scores.
# Inspect's models generate (no log-likelihoods): multiple choice by letter only.
AUTO_CHOICE = {"lmms-eval": "letter", "inspect": "letter"}


def _write_docs(path: Path, docs: dict) -> None:
    """The documents as a parquet file that `datasets` reads with its features (images decoded)."""
    import datasets

    features = datasets.Features({
        "vlbench_id": datasets.Value("string"), "prompt_index": datasets.Value("int32"),
        "prompts": datasets.Value("int32"), "prompt": datasets.Value("string"),
        "choices": datasets.Sequence(datasets.Value("string")), "images": datasets.Sequence(datasets.Image())})
    rows = {**docs, "images": [[{"bytes": b, "path": None} for b in images] for images in docs["images"]]}
    path.parent.mkdir(parents=True)
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(path))


def _python(source: str, name: str) -> str:
    """Generated Python, checked to compile before it is written (every value in it is a `repr` literal or an
    identifier checked as one, so this never fails unless that code is wrong)."""
    try:
        compile(source, name, "exec")
    except (SyntaxError, ValueError) as exc:
        raise VlbenchError(f"{name}: the generated task file is not valid Python ({exc}); nothing was written") \
            from None
    return source


def _readme(meta: dict, out: Path) -> str:
    form = {"generate": "the model generates an answer",
            "letter": "the options are listed by letter and the model generates the letter",
            "loglik": "each option's log-likelihood is scored (lmms-eval's `multiple_choice`)"}[meta["form"]]
    if meta["harness"] == "lmms-eval":
        run = (f"python -m lmms_eval --model MODEL --model_args pretrained=CHECKPOINT --tasks {meta['task']} "
               f"--include_path {shlex.quote(str(out))} --batch_size 1 --log_samples --output_path LOGS")
        log = f"LOGS/.../*_samples_{meta['task']}.jsonl"
    else:
        # Inspect finds a task file by a path relative to the directory it runs in; a local OpenAI-compatible
        # server through its chat-completions provider (URL in SERVICE_BASE_URL)
        run = (f"cd {shlex.quote(str(out))} && inspect eval {meta['task']}.py --model openai-api/SERVICE/MODEL "
               "--log-dir LOGS")
        log = "LOGS/...eval"
    back = f"vlbench evaluate {meta['benchmark']} --data BUILD --predictions {log}"
    if meta.get("sealed"):
        back = (f"vlbench submit {log} --server URL --phase PHASE   # the challenge's service scores it (its "
                "answers are sealed)")
    name = "lmms-eval" if meta["harness"] == "lmms-eval" else "Inspect"
    return "\n".join([
        f"# {meta['benchmark']} ({meta['split']}) as an {name} task: "
        f"`{meta['task']}`", "",
        f"Written by `vlbench export-task` (vlbench {meta['vlbench']}) from the build whose `manifest.json` has "
        f"SHA-256 `{meta['manifest_sha256']}` ({meta['documents']} prompts over {meta['rows']} rows).", "",
        f"- Prompts: exactly what `vlbench predict` shows a generative VLM; {form}.",
        f"- Prompt template: `{json.dumps(meta['prompt_template'])}` "
        + ("(the benchmark's default)" if meta["prompt_is_default"] else "(--prompt)"),
        *([f"- Decoding: greedy, at most {meta['generation']['max_new_tokens']} new tokens."]
          if meta["form"] != "loglik" else []),
        *([f"- Video: {meta['video_frames']} frames per video, evenly spread, shown as images."]
          if meta["video_frames"] else []),
        ("- Scoring: the split is the public half of a sealed build (commitment "
         f"`{meta['sealed']['commitment']}`): it holds no answer, so the harness scores nothing (its metrics are NaN; "
         "`incomplete_rows` counts the rows a prompt is missing from); the challenge's service scores the log."
         if meta.get("sealed") else
         "- Scoring: each metric's aggregation scores the whole run with vlbench's own code on the exported split "
         "(`scored/`), so group metrics are computed as vlbench computes them.")
        + " vlbench must be importable in the harness's python.",
        "- Each logged sample carries the row's vlbench id, so the log maps back by id.", "",
        f"Run it ({'lmms-eval 0.7' if meta['harness'] == 'lmms-eval' else 'Inspect'}):", "", f"    {run}", "",
        ("Submit its log to the challenge:" if meta.get("sealed") else
         "Read its log back into vlbench (metrics with intervals, `compare`, leaderboards):"), "",
        f"    {back}", "",
        *(["The task's YAML names this folder by its absolute path; export again after moving it.", ""]
          if meta["harness"] == "lmms-eval" else [])])


def export_task(bench: str, data: str, harness: str, out: Path, *, split: str | None, template: str | None,
                choice_mode: str, images: Path | None, videos: Path | None, frames: int,
                max_new_tokens: int | None, overwrite: bool = False) -> Path:
    """Write the task folder OUT; returns it."""
    from core.manifest import read_manifest
    from core.names import check_path_text
    from core.outdir import atomic_folder, check_out
    from evaluator.harness import inspect_task, lmms_eval
    from evaluator.harness.docs import Shown, choice_form, harness_docs
    from evaluator.models.ask import prompt_template
    from evaluator.models.generation import Generation
    from evaluator.models.options import ModelOptions
    from evaluator.models.response_cache import vlbench_version
    from evaluator.sealed import sealed_record
    from evaluator.splits import open_split
    from evaluator.tasks import get_task

    if harness not in HARNESSES:
        raise ParamsError(f"--harness {harness}: expected one of {', '.join(HARNESSES)}")
    task = get_task(bench)
    ask = task.generative
    if ask is None:
        raise ParamsError(f"{bench}: no generative Ask to export ({task.generative_reason})")
    check_path_text(Path(out).absolute(), "--out")  # written into the task's YAML and README
    folder, split, table = open_split(task, data, split, truth=False)
    seal = sealed_record(folder)
    sealed = seal is not None and split not in (seal.get("open_splits") or [])
    read_manifest(folder)  # a record (what the task's meta and `push --inspect-task` bind by its SHA-256)
    check_out(out, {"--data": [folder], **({"--images": [images]} if images else {}),
                    **({"--videos": [videos]} if videos else {})}, overwrite, owned=is_task_folder,
              writer="`vlbench export-task`")
    form = choice_form(ask, choice_mode, AUTO_CHOICE[harness])
    if form == "loglik" and harness == "inspect":
        raise ParamsError(f"--harness inspect: Inspect's models generate and score no log-likelihoods, and {bench} is "
                          "scored by log-likelihood" + (f" ({ask.letter_reason})" if ask.letter_reason else
                                                        " (--choice-mode letter asks it by letter)"))
    template_text = prompt_template(ModelOptions(prompt=template), ask, bench)
    shown = Shown(template_text, form, images, videos, frames)
    docs = harness_docs(task, table, shown)
    meta = {"written_by": "vlbench export-task", "vlbench": vlbench_version(), "benchmark": bench,
            "config": task.config, "split": split, "harness": harness, "task": lmms_eval.task_name(bench, split),
            "form": form, "manifest_sha256": sha256_file(folder / MANIFEST), "prompt_template": template_text,
            "prompt_is_default": template is None,
            "generation": {"greedy": True, "max_new_tokens": max_new_tokens or Generation.max_new_tokens},
            "video_frames": frames if ask.video_column is not None and videos is not None else None,
            "metrics": [{"key": h.key, "label": h.label, "higher_is_better": h.higher_is_better}
                        for h in task.headline],
            "documents": len(docs["prompt"]), "rows": table.num_rows,
            **({"sealed": {"commitment": seal["commitment"]}} if sealed else {})}
    final = Path(out).absolute()
    with atomic_folder(out) as staging:
        _write_docs(staging / "docs" / f"{split}.parquet", docs)
        meta["docs_sha256"] = sha256_file(staging / "docs" / f"{split}.parquet")  # what `push --inspect-task` reads
        (staging / "scored" / task.config).mkdir(parents=True)
        shutil.copyfile(folder / MANIFEST, staging / "scored" / MANIFEST)
        for shard in sorted((folder / task.config).glob(f"{split}-*.parquet")):
            shutil.copyfile(shard, staging / "scored" / task.config / shard.name)
        (staging / META).write_text(dumps(meta, indent=2, sort_keys=True) + "\n")
        (staging / "README.md").write_text(_readme(meta, final))
        if harness == "lmms-eval":
            (staging / f"{meta['task']}.yaml").write_text(lmms_eval.task_yaml(meta, final / "docs" /
                                                                              f"{split}.parquet"))
            (staging / "utils.py").write_text(_python(lmms_eval.utils_py(meta), "utils.py"))
        else:
            (staging / f"{meta['task']}.py").write_text(_python(inspect_task.task_file(meta), f"{meta['task']}.py"))
    return final
