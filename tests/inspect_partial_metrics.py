"""Score every prefix of an exported task's Inspect log the way Inspect's live display scores the samples done
so far (inspect_ai/_eval/task/run.py's `update_metrics_display_fn` calls `eval_results` with the scores of the
samples complete at that moment, about once a second, on the task's own scorer and metrics; a metric that
raises there ends the task `error`). Which prefixes a real run scores depends on the machine's speed, so this
scores all of them. Runs in Inspect's environment and prints one JSON line per prefix, {metric: value}:

    python inspect_partial_metrics.py TASK_FOLDER LOG.eval
"""

import json
import math
import sys
from pathlib import Path

from inspect_ai._eval.task.results import eval_results
from inspect_ai.log import read_eval_log
from inspect_ai.scorer import SampleScore

from evaluator.harness.inspect_task import exported_task

folder, log = Path(sys.argv[1]), sys.argv[2]
task = exported_task(folder)
samples = read_eval_log(log).samples
for k in range(len(samples) + 1):
    scores = [{"vlbench": SampleScore(score=s.scores["vlbench"], sample_id=s.id, sample_metadata=s.metadata)}
              for s in samples[:k]]
    results, _ = eval_results(samples=k, scores=scores, reducers=None, scorers=task.scorer, metrics=task.metrics,
                              scorer_names=["vlbench"])
    (score,) = results.scores
    print(json.dumps({name: None if math.isnan(m.value) else m.value for name, m in score.metrics.items()}))
