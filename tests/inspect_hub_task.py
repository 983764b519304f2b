"""Run a Hub benchmark repo's tasks through Inspect's own loader of `hf/ORG/NAME/TASK` tasks
(inspect_ai/_eval/task/hf.py, `task_create_from_hf`: eval.yaml read and each task validated by its `HFTask`
schema, the `field_spec` turning rows into Samples, solvers and scorers made by name), with the two downloads
it makes served from a local copy of the repo: `eval.yaml` from the folder, and the config's split read by
`datasets` from the folder (its README's `configs`, as the Hub would). Runs in Inspect's environment:

    python inspect_hub_task.py REPO_FOLDER ORG/NAME TASK_ID MODEL LOG_DIR LIMIT
"""

import sys
from pathlib import Path

import datasets
import huggingface_hub
import inspect_ai._eval.task.hf as hf
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import MemoryDataset

folder, repo_id, task_id, model, log_dir, limit = sys.argv[1:7]


def hf_hub_download(repo_id, filename, repo_type, revision):
    assert repo_type == "dataset" and filename == "eval.yaml", (repo_type, filename)
    return str(Path(folder) / filename)


def hf_dataset(path, revision, name, split, sample_fields):
    rows = datasets.load_dataset(folder, name=name, split=split)
    return MemoryDataset([sample_fields(row) for row in rows], name=f"{path}/{name}")


huggingface_hub.hf_hub_download = hf_hub_download  # task_create_from_hf imports it when called
hf.hf_dataset = hf_dataset
tasks = hf.task_create_from_hf(f"hf/{repo_id}/{task_id}")
(log,) = inspect_eval(tasks, model=model, log_dir=log_dir, limit=int(limit), display="plain", max_connections=1)
assert log.status == "success", log.error
print(log.location)
