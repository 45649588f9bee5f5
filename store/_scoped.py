"""Tenant isolation: per-tenant credentials on MLflow's authentication app, and a store that
confines a tenant to its own prefix.

With ``tenantml up --auth`` the MLflow server runs MLflow's ``basic-auth`` app with
``default_permission = NO_PERMISSIONS``: nobody sees anything without a grant. The operator (the
admin user whose credentials `up` writes into the installation's ``servers.json``, so only the
operator's own processes, the scheduler and the workers, hold them) grants each tenant:

* an MLflow user named after the tenant, with MANAGE on the tenant's experiment
  (``tenantml/<name>``) and on its registered model (``<name>``) and nothing else; MLflow itself
  enforces this on every call (runs, metrics, artifacts, model versions, ``models:/<name>@best``),
  whether it comes through our SDK, our CLI or MLflow's own client and UI;
* in the SDK and CLI, a `TenantScopedStore`: every store call for another tenant's name is
  refused with `TenantAccessError`, and listing tenants lists only its own.

A tenant identifies itself with ``TENANTML_USER`` and ``TENANTML_PASSWORD`` (or
``Client(user=..., password=...)``). The store check is the SDK's; on AWS the same confinement is
enforced by giving each tenant an IAM role limited to ``s3://<bucket>/<prefix>/tenants/<name>/*``
(``infra/iam/tenant-policy.json``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from store._examples import ExampleStore, validate_tenant_name

__all__ = ["TenantAccessError", "TenantScopedStore"]


class TenantAccessError(PermissionError):
    """A tenant's identity asked for another tenant's data."""


class TenantScopedStore:
    """`ExampleStore` for one tenant's identity: calls naming any other tenant are refused."""

    _PER_TENANT = (
        "create_tenant",
        "schema",
        "versions",
        "manifest",
        "feed",
        "refine",
        "examples",
        "load",
        "put_checkpoint",
        "get_checkpoint",
        "delete_checkpoint",
        "delete_job_checkpoints",
        "put_blob",
        "get_blob",
        "gc",
    )

    def __init__(self, store: ExampleStore, tenant: str) -> None:
        self._store = store
        self.tenant = validate_tenant_name(tenant)

    def _check(self, name: Any) -> None:
        if name != self.tenant:
            raise TenantAccessError(
                f"tenant {self.tenant!r} may not access tenant {name!r}: each tenant's "
                "credentials reach only its own data, runs and models (the operator sees all)"
            )

    def tenants(self) -> list[str]:
        return [t for t in self._store.tenants() if t == self.tenant]

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._store, attr)  # an unknown name: AttributeError (dunders too)
        if attr not in self._PER_TENANT:
            if attr == "blobs" or attr.startswith("_"):  # `_publish` took any tenant's name
                raise TenantAccessError(
                    f"tenant {self.tenant!r}: {attr} (the raw blob store, the store's own "
                    "helpers) is the operator's"
                )
            return value

        def scoped(name: str, *args: Any, **kwargs: Any) -> Any:
            validate_tenant_name(name)  # a name that is no tenant's is an error of its own
            self._check(name)
            fn: Callable[..., Any] = value
            return fn(name, *args, **kwargs)

        return scoped
