"""The MLflow model's code ("models from code"): MLflow runs this file to build the model when it logs it and when it
loads it, where a logged Python object would be unpickled, a way to run any code that MLflow warns of on every log.
Only MLflow runs it (serving.log_predictor names it by its path); the package it imports travels with the model."""

from mlflow.models import set_model

from raexmc.pipeline.serving import RaexmcModel

set_model(RaexmcModel())
