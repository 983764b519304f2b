"""vlbench benchmarks as native tasks of other evaluation harnesses, and their logs read back.

`docs.py` turns a built split into the harness's documents: one per prompt vlbench asks (exactly the
prompt `vlbench predict` shows a generative VLM, its images, its options), each carrying vlbench's id.
`outputs.py` turns the harness's per-prompt outputs back into vlbench predictions by id, the way
`GenerativeAdapter` does (evaluator/models/ask.py), and scores them with the Task's own metric code.
`run.py` is what every exported task does inside its harness: each prompt's record, and the run's metrics.
`lmms_eval.py` writes an lmms-eval 0.7 task folder and holds the functions its YAML calls inside lmms-eval;
`inspect_task.py` the Inspect task file and the task it builds; `meta.py` the folder's `vlbench_task.json`.
`export.py` is `vlbench export-task`; `logs.py` reads a harness's log of an exported task as a submission;
`hub.py` the layer `vlbench push --inspect-task` adds to make a pushed build a Hub benchmark for Inspect.
"""
