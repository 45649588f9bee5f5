"""A run-context provider: an MLflow run started where ``TENANTML_TENANT``, ``TENANTML_POLICY``
or ``TENANTML_TICK`` is set is tagged with the tenant, policy and scheduler tick it belongs to.
Registered under the ``mlflow.run_context_provider`` entry point, so MLflow applies it to any run
started in such a process, e.g. a user's own runs next to a tenant's (see `context_env`).

The service's job runs do not rely on it: `mlflow_plugin.jobrun.JobRun` sets their tags itself,
the same in a worker process and in a thread of the embedded mode (whose environment is shared).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from mlflow.tracking.context.abstract_context import RunContextProvider

__all__ = ["ENV_TAGS", "TenantRunContext", "context_env"]

ENV_TAGS = {
    "TENANTML_TENANT": "tenantml.tenant",
    "TENANTML_POLICY": "tenantml.policy",
    "TENANTML_TICK": "tenantml.tick",
}


class TenantRunContext(RunContextProvider):
    def in_context(self) -> bool:
        return any(os.environ.get(k) for k in ENV_TAGS)

    def tags(self) -> dict[str, str]:
        return {tag: os.environ[k] for k, tag in ENV_TAGS.items() if os.environ.get(k)}


@contextmanager
def context_env(
    tenant: str | None = None, policy: str | None = None, tick: int | None = None
) -> Iterator[None]:
    """Set the tagging variables for the duration of a block (restored afterwards)."""
    values = {
        "TENANTML_TENANT": tenant,
        "TENANTML_POLICY": policy,
        "TENANTML_TICK": None if tick is None else str(tick),
    }
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is not None:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
