"""Language-shortcut labels: text-only multiple-choice models and the agreement rule, and the
command that writes them as a new version of a dataset."""
