"""vlbench benchmarks as native tasks of other evaluation harnesses, and their logs read back.

`docs.py` turns a built split into the harness's documents: one per prompt vlbench asks (exactly the
prompt `vlbench predict` shows a generative VLM, its images, its options), each carrying vlbench's id.
`outputs.py` turns the harness's per-prompt outputs back into vlbench predictions by id, the way
`GenerativeAdapter` does (evaluator/models/ask.py), and scores them with the Task's own metric code.
`lmms_eval.py` writes an lmms-eval 0.7 task folder and holds the functions its YAML calls inside lmms-eval;
`export.py` is `vlbench export-task`; `logs.py` reads a harness's log of an exported task as a submission.
"""
