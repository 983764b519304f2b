"""`vlbench serve`: a self-hosted service that scores submissions against sealed answers (config.py: the challenge's
YAML; store.py: teams, tokens and submissions; app.py: the web application; worker.py: the scoring workers;
run.py: the processes; client.py: `vlbench submit`)."""
