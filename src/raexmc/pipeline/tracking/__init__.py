"""MLflow tracking: the one mlflow importer besides serving. One run per pipeline execution, logged into by every stage."""
