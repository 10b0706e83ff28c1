"""The harness every stage runs in (stage.py): one-line errors, one stage at a time per working copy, the
params guard, and MLflow tracking (the only mlflow importer besides serving): one run per pipeline execution."""
