"""The MLflow side of tenantml: pyfunc tenant models, job runs as the service's memory (one
`JobRun` writes every kind of job's run), the registry alias ``best``, and a run-context provider
(entry point ``mlflow.run_context_provider``).

Names load lazily: MLflow imports `mlflow_plugin.context` while MLflow itself is still importing,
so this package must not import MLflow's client eagerly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow_plugin.context import TenantRunContext, context_env
    from mlflow_plugin.jobrun import JobRun
    from mlflow_plugin.pyfunc import TenantPyfunc, log_trained_model, pyfunc_input, signature_for
    from mlflow_plugin.registry import (
        BEST,
        BestModel,
        best_model,
        model_versions,
        promote_if_better,
        settle_best,
    )
    from mlflow_plugin.tracking import (
        SCHEDULER_EXPERIMENT,
        JobRecord,
        end_job_run,
        ensure_tenant_experiment,
        experiment_name,
        job_records,
        start_job_run,
        tenant_experiments,
    )

_HOME = {
    "TenantRunContext": "context",
    "context_env": "context",
    "JobRun": "jobrun",
    "TenantPyfunc": "pyfunc",
    "log_trained_model": "pyfunc",
    "pyfunc_input": "pyfunc",
    "signature_for": "pyfunc",
    "BEST": "registry",
    "BestModel": "registry",
    "best_model": "registry",
    "model_versions": "registry",
    "promote_if_better": "registry",
    "settle_best": "registry",
    "SCHEDULER_EXPERIMENT": "tracking",
    "JobRecord": "tracking",
    "end_job_run": "tracking",
    "ensure_tenant_experiment": "tracking",
    "experiment_name": "tracking",
    "job_records": "tracking",
    "start_job_run": "tracking",
    "tenant_experiments": "tracking",
}
__all__ = [
    "BEST",
    "BestModel",
    "JobRecord",
    "JobRun",
    "SCHEDULER_EXPERIMENT",
    "TenantPyfunc",
    "TenantRunContext",
    "best_model",
    "context_env",
    "model_versions",
    "end_job_run",
    "ensure_tenant_experiment",
    "experiment_name",
    "job_records",
    "log_trained_model",
    "promote_if_better",
    "pyfunc_input",
    "settle_best",
    "signature_for",
    "start_job_run",
    "tenant_experiments",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'mlflow_plugin' has no attribute {name!r}")
    return getattr(importlib.import_module(f"mlflow_plugin.{_HOME[name]}"), name)
