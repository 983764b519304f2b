"""Writing results: a scoring's metrics.json, report.md and plots (`report.py`), the leaderboard's static
pages (`site.py`, `site_templates/`) and the Hub's evaluation-results files (`hub_results.py`)."""
