"""GQA-OOD evaluation: the task (submissions, models, report) and its metrics."""
