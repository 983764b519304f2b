"""`python -m pipelines.cli ...`: the `vlbench` console script."""

from pipelines.cli import main

main()
