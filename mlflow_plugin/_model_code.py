"""MLflow "model from code" entry: logged by path, so no Python object is pickled."""

import mlflow

from mlflow_plugin.pyfunc import TenantPyfunc

mlflow.models.set_model(TenantPyfunc())
