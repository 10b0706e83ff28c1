"""MLflow tracking (the only mlflow importer besides serving): one run per pipeline execution, for every stage."""
