"""An exported task for Inspect (inspect-ai): the task file `vlbench export-task --harness inspect` writes, and
the task, solver and scorer it builds inside Inspect.

The folder holds `<task>.py`, a file of a few lines whose `@task` function calls `exported_task(folder)`,
and what `export.py` writes for every harness (the documents, the scored split, `vlbench_task.json`,
README.md). Each document becomes one Inspect `Sample`: one user message holding the document's images (as
the data URLs `openai:` sends, evaluator/models/served.py's `image_url`, so a served model sees the same
bytes) and then its prompt, the row's vlbench id as its target and metadata, and `<id>#<prompt>` as its id.
The solver is Inspect's `generate()` under the task's decoding (greedy, the answer budget). Inspect's models
generate; they score no log-likelihoods, so multiple choice is asked by letter, and a benchmark that cannot
be asked by letter (VisDial, Social-IQ) is not exported to Inspect.

The scorer records, per sample, the prompt's record (the same record lmms-eval's `process_results` writes,
evaluator/harness/run.py) in the score's metadata and the answer; one metric per headline metric of
the benchmark scores all of the run's records with the benchmark's own code (`ExportedRun.metrics`), so
Inspect's own results hold vlbench's numbers, and `vlbench evaluate` reads the `.eval` log back by id. Inspect
also computes the metrics on the samples done so far, for its live display: each is defined on any subset (NaN
until something is complete), and `incomplete_rows` counts the rows a prompt is missing from.
"""

from __future__ import annotations

from pathlib import Path

from evaluator.harness.run import INCOMPLETE, RECORD, ExportedRun


def task_file(meta: dict) -> str:
    """The task's Python file: Inspect finds the `@task` function by its name, the task's name (a Python
    identifier, `lmms_eval.task_name`); every other value from meta is a Python literal (`repr`)."""
    from core.names import check_identifier

    name = check_identifier(meta["task"], "the exported task's name")
    docstring = repr(f"Written by `vlbench export-task` (vlbench {meta['vlbench']}): {meta['benchmark']}, split "
                     f"{meta['split']}; vlbench must be importable here.")
    return (f"{docstring}\n"
            "from pathlib import Path\n\n"
            "from inspect_ai import task\n\n"
            "from evaluator.harness.inspect_task import exported_task\n\n\n"
            "@task\n"
            f"def {name}():\n"
            "    return exported_task(Path(__file__).resolve().parent)\n")


def exported_task(folder: Path):
    """The Inspect Task of an exported folder."""
    from inspect_ai import Task
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import ChatMessageUser, ContentImage, ContentText, GenerateConfig
    from inspect_ai.solver import generate

    from core.data import read_parquet
    from evaluator.models.served import image_url

    functions = ExportedRun(folder)
    meta = functions.meta
    docs = read_parquet(folder / "docs" / f"{meta['split']}.parquet").to_pylist()
    samples = [Sample(
        input=[ChatMessageUser(content=[*(ContentImage(image=image_url(image["bytes"])) for image in doc["images"]),
                                        ContentText(text=doc["prompt"])])],
        target=doc["vlbench_id"], id=f"{doc['vlbench_id']}#{doc['prompt_index']}",
        metadata={"vlbench_id": doc["vlbench_id"], "prompt_index": doc["prompt_index"], "prompts": doc["prompts"]})
        for doc in docs]
    return Task(dataset=MemoryDataset(samples, name=meta["task"]), solver=generate(), scorer=_scorer(functions),
                config=GenerateConfig(max_tokens=meta["generation"]["max_new_tokens"], temperature=0.0),
                name=meta["task"], metadata={"vlbench": {k: meta[k] for k in (
                    "vlbench", "benchmark", "split", "manifest_sha256", "form")}})


def _scorer(functions: ExportedRun):
    from inspect_ai.scorer import Score, metric, scorer

    def run_metric(key: str):
        @metric(name=key)
        def factory():
            def compute(scores) -> float:  # Score or SampleScore, as Inspect hands them
                return functions.metrics([getattr(s, "score", s).metadata[RECORD] for s in scores])[key]
            return compute
        return factory()

    keys = [m["key"] for m in functions.meta["metrics"]] + [INCOMPLETE]

    @scorer(metrics=[run_metric(key) for key in keys], name="vlbench")
    def vlbench():
        async def score(state, target):
            doc = {"vlbench_id": state.metadata["vlbench_id"], "prompt_index": state.metadata["prompt_index"],
                   "prompts": state.metadata["prompts"]}
            record = functions.record(doc, state.output.completion)
            return Score(value=0, answer=state.output.completion, metadata={RECORD: record},
                         explanation="no score per sample: the task's metrics score the whole run by vlbench's rules")
        return score

    return vlbench()
