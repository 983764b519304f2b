"""Social-IQ evaluation: the task and answer accuracy / A2."""
