"""The VQA answer stress table, scored by lmms-eval's own `vqav2_process_results` and by vlbench.

Each row is a question's ten human answers and a model's raw answer written as models write it: as
is, capitalised, with a period, with an article, as a number word, with an extra sentence. The
lmms-eval column is computed by lmms-eval 0.7.3's `lmms_eval.tasks.vqav2.utils.vqav2_process_results`
itself; the vlbench column by `vlbench predict`'s answer cleaning (`VqaAnswer.prediction`) followed by
`vlbench evaluate`'s VQA accuracy. `tests/test_vqa.py::test_stress_table_matches_lmms_eval` holds the
table this script printed as its golden.

lmms-eval is installed beside vlbench's environment by scripts/harness_env.sh (the recipe of
`../shared/recipes/lmms-eval-offline.md`; the VQA task needs no model), then:

    LMMS=$(bash scripts/harness_env.sh lmms-eval .venv/bin/python)
    PYTHONPATH=$LMMS/harness:$LMMS/deps:$LMMS/stubs .venv/bin/python scripts/lmms_eval_stress_table.py
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (label, the ten human answers, the model's raw output)
ROWS = [
    ("as is", ["yes"] * 10, "yes"),
    ("capitalised", ["yes"] * 10, "Yes"),
    ("period", ["yes"] * 10, "Yes."),
    ("extra sentence", ["yes"] * 10, "Yes. There is a table."),
    ("second line", ["yes"] * 10, "Yes\nThere is a table."),
    ("article", ["dog"] * 10, "A dog"),
    ("article, capitalised, period", ["dog"] * 10, "The dog."),
    ("number word", ["2"] * 10, "two"),
    ("number word, capitalised", ["2"] * 10, "Two."),
    ("mixed answers, capitalised", ["red"] * 6 + ["dark red"] * 4, "Red"),
    ("mixed answers, number word", ["2"] * 5 + ["two"] * 3 + ["3"] * 2, "Two"),
    ("wrong", ["yes"] * 10, "No"),
]


def lmms_eval_scores() -> list[float]:
    from lmms_eval.tasks.vqav2.utils import vqav2_process_results

    scores = []
    for _, answers, output in ROWS:
        doc = {"question_id": 1, "answers": [{"answer": a, "answer_confidence": "yes", "answer_id": k + 1}
                                             for k, a in enumerate(answers)]}
        scores.append(vqav2_process_results(copy.deepcopy(doc), [output])["exact_match"])
    return scores


def vlbench_scores() -> list[float]:
    from evaluator.vqa.metrics import vqa_accuracy
    from evaluator.vqa.task import VQATask

    ask = VQATask().generative
    return [float(v) for v in vqa_accuracy([ask.prediction(o) for _, _, o in ROWS], [a for _, a, _ in ROWS])]


def main() -> int:
    theirs, ours = lmms_eval_scores(), vlbench_scores()
    print(json.dumps([{"case": label, "output": output, "lmms_eval": t, "vlbench": o}
                      for (label, _, output), t, o in zip(ROWS, theirs, ours)], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
