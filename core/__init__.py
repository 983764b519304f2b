"""The ground floor: code every layer shares and that imports nothing else of the project (errors,
parameter parsing, progress bars, in-progress names, JSON output, output folders and atomic writes,
manifests and checksums, reading a built folder, figure specs and their drawing, model folders checked
and loaded safely, the torch runtime). Layers: core -> builders -> evaluator -> pipelines -> scripts
(tests/test_layers.py)."""
