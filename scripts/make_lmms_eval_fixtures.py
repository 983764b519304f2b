"""Run the real lmms-eval 0.7.3 on the embedded VQA v2 validation and GQA test-dev samples, and keep
its `--log_samples` logs and results as the fixtures of tests/test_lmms_eval_logs.py.

What it does, in a temporary folder:
1. writes vlbench's sample sources and, from them, the two datasets in lmms-lab's Hub layout
   (pipelines/samples/lmms_lab.py: VQAv2 `validation`, GQA `testdev_balanced_instructions` and
   `testdev_balanced_images`);
2. writes a tiny LLaVA (pipelines/tiny_models.py `write_tiny_llava_answering`, random weights) whose
   generation config biases greedy decoding to the answer "Yes" and then the end of the sequence
   (`sequence_bias`), so that every question gets the capitalised answer LLaVA-style models give:
   lmms-eval scores it, vlbench must score it the same;
3. copies lmms-eval's own task files (`vqav2/_default_template_vqav2_yaml`, `vqav2/vqav2_val.yaml`,
   `vqav2/utils.py`; `gqa/gqa.yaml`, `gqa/utils.py`) from the installed lmms_eval, pointing their
   dataset at the local folders and naming the tasks `vqav2_val_vlbench` and `gqa_vlbench` (a local
   task named like a built-in one loses to it);
4. runs `python -m lmms_eval --model llava_hf --tasks vqav2_val_vlbench,gqa_vlbench --batch_size 1
   --log_samples` offline, with vlbench's python and lmms-eval beside it on PYTHONPATH;
5. copies the two samples logs (`<task>.samples.jsonl`, lmms-eval's dated file names dropped, content
   untouched) and the results file (`results.json`) to tests/fixtures/lmms_eval/.

lmms-eval runs from the folder `scripts/harness_env.sh lmms-eval` installs (../shared/recipes/lmms-eval-offline.md's
recipe):

    LMMS=$(bash scripts/harness_env.sh lmms-eval .venv/bin/python)
    .venv/bin/python scripts/make_lmms_eval_fixtures.py --env "$LMMS"
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "lmms_eval"
TASKS = {"vqav2_val": "vqav2_val_vlbench", "gqa": "gqa_vlbench"}


def copy_tasks(lmms: Path, tasks: Path, vqav2: Path, gqa: Path) -> None:
    """lmms-eval's own task files, pointed at the local datasets and renamed."""
    source = lmms / "lmms_eval" / "tasks"
    (tasks / "vqa_local").mkdir(parents=True)
    (tasks / "gqa_local").mkdir()
    template = (source / "vqav2" / "_default_template_vqav2_yaml").read_text()
    (tasks / "vqa_local" / "_default_template_vqav2_yaml").write_text(
        re.sub(r"(?m)^dataset_path: .*$", f"dataset_path: {vqav2}", template))
    val = (source / "vqav2" / "vqav2_val.yaml").read_text()
    (tasks / "vqa_local" / "vqav2_val.yaml").write_text(val.replace('task: "vqav2_val"',
                                                                     f'task: "{TASKS["vqav2_val"]}"'))
    shutil.copy(source / "vqav2" / "utils.py", tasks / "vqa_local" / "utils.py")
    config = (source / "gqa" / "gqa.yaml").read_text()
    config = re.sub(r"(?m)^dataset_path: .*$", f"dataset_path: {gqa}", config)
    (tasks / "gqa_local" / "gqa.yaml").write_text(config.replace('task: "gqa"', f'task: "{TASKS["gqa"]}"'))
    utils = (source / "gqa" / "utils.py").read_text()
    (tasks / "gqa_local" / "utils.py").write_text(utils.replace('"lmms-lab-encoder/GQA"', repr(str(gqa))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", type=Path, required=True,
                        help="the folder `scripts/harness_env.sh lmms-eval` prints (harness/, deps/, stubs/)")
    args = parser.parse_args()
    env_root = args.env.resolve()
    sys.path.insert(0, str(ROOT))
    from pipelines.samples import write_samples
    from pipelines.samples.lmms_lab import write_gqa, write_vqav2
    from pipelines.tiny_models import write_tiny_llava_answering

    with tempfile.TemporaryDirectory(prefix="vlbench-lmms-") as tmp:
        tmp = Path(tmp)
        write_samples(tmp / "sources")
        vqav2 = write_vqav2(tmp / "sources", tmp / "VQAv2")
        gqa = write_gqa(tmp / "sources", tmp / "GQA")
        model = write_tiny_llava_answering(tmp / "tiny-llava", "Yes")
        copy_tasks(env_root / "harness", tmp / "tasks", vqav2, gqa)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "HF_DATASETS_CACHE": str(tmp / "hf-datasets"),
               "PYTHONPATH": os.pathsep.join(str(p) for p in (env_root / "harness", env_root / "deps",
                                                               env_root / "stubs", ROOT))}
        command = [sys.executable, "-m", "lmms_eval", "--model", "llava_hf", "--model_args",
                   f"pretrained={model},device_map=cpu", "--tasks", ",".join(TASKS.values()),
                   "--include_path", str(tmp / "tasks"), "--batch_size", "1", "--log_samples",
                   "--output_path", str(tmp / "out"), "--device", "cpu"]
        print(" ".join(command), flush=True)
        subprocess.run(command, check=True, env=env, cwd=tmp)
        FIXTURES.mkdir(parents=True, exist_ok=True)
        for task in TASKS.values():
            (log,) = (tmp / "out").rglob(f"*_samples_{task}.jsonl")
            shutil.copy(log, FIXTURES / f"{task}.samples.jsonl")
        (results,) = (tmp / "out").rglob("*_results.json")
        shutil.copy(results, FIXTURES / "results.json")
    print(f"wrote {FIXTURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
