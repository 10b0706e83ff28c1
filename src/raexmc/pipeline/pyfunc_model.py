"""The MLflow model's code ("models from code"): MLflow runs this file to build the model when it logs and
loads it, where a pickled object would run any code; serving.log_predictor names it by path.
"""

from mlflow.models import set_model

from raexmc.pipeline.serving import RaexmcModel

set_model(RaexmcModel())
