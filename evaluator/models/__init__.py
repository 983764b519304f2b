"""Models of every task.

Specs (evaluator/models/spec.py, the one parser): `baseline:<name>`, `py:<module>:<factory>`,
`hf:<hub id or path>`, `vllm:<hub id or path>`, `openai:<served model>`, `features:<folder>`; which
Model a spec becomes is decided in evaluator/models/resolve.py. A task declares its menu
(evaluator/models/menu.py): `baseline:` models and `hf:` families. Generative checkpoints (`hf:` and
`vllm:`) and served models (`openai:`) are backends of one contract (evaluator/models/backend.py) that
evaluator/models/ask.py's adapter asks.

Every adapter is a `Model` (evaluator/models/model.py): `predict(table) -> list` (one prediction per
row, in the task's prediction format), `input_columns` (the columns it reads, which the perceptual
score checks; None: every column), `samples` (per row of the last predict, what `--log-samples`
writes; None: nothing to log) and `metadata()` (what the prediction record says about it). A `py:`
factory's object is wrapped in a `PyModel` unless it is a `Model` already. A late-fusion model
(subclass `LateFusion`) also declares `encoders = {name: columns}` with `encode(name, table)`
returning one encoding per row and `fuse(encodings, table)`; the perceptual score then permutes
cached encodings instead of re-encoding.
"""
