"""`vlbench suite`: one model over every built benchmark, into one report card of headline metrics
and the diagnostics that say why a model scores what it scores (run.py: the runs, resumable;
diagnostics.py: the cross-benchmark readings; card.py: card.json and report.md)."""
