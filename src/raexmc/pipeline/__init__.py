"""The pipeline around the method: stage runner, MLflow tracking, the served model, sweeps, project paths, plots."""
