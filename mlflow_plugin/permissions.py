"""Per-tenant permissions on MLflow's authentication app (``tenantml up --auth``).

The server runs MLflow's ``basic-auth`` app with ``default_permission = NO_PERMISSIONS``; the
operator grants each tenant an MLflow user with MANAGE on its own experiment
(``tenantml/<name>``) and registered model (``<name>``) and nothing else, and MLflow enforces it
on every call. The store-side half of isolation is `store.TenantScopedStore`.
"""

from __future__ import annotations

import secrets

from store import validate_tenant_name

__all__ = ["MANAGE", "grant_tenant"]

MANAGE = "MANAGE"


def grant_tenant(tracking_uri: str, tenant: str, experiment_id: str) -> str:
    """Create (or reset) the MLflow user `tenant` with MANAGE on its experiment and registered
    model only; returns its new password. Needs the operator's (admin) credentials."""
    from mlflow.exceptions import MlflowException, RestException
    from mlflow.server import get_app_client
    from mlflow.tracking import MlflowClient

    validate_tenant_name(tenant)
    auth = get_app_client("basic-auth", tracking_uri=tracking_uri)
    password = secrets.token_urlsafe(18)
    try:
        auth.create_user(tenant, password)
    except RestException as e:
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        auth.update_user_password(tenant, password)
    client = MlflowClient(tracking_uri)
    try:
        client.get_registered_model(tenant)
    except MlflowException:
        client.create_registered_model(tenant, tags={"tenantml.tenant": tenant})
    # MLflow 3.17's unified grant: one (resource type, id) per call, replacing an earlier grant.
    auth.grant_user_permission(tenant, "experiment", experiment_id, MANAGE)
    auth.grant_user_permission(tenant, "registered_model", tenant, MANAGE)
    return password
