"""Tenant data: one `ExampleStore` over a local directory or S3 (see `_examples` for the layout)."""

from tenantml.store._blobs import BlobStore, LocalBlobStore, S3BlobStore
from tenantml.store._codec import BadExampleError, is_class_output
from tenantml.store._examples import (
    ConcurrentUpdateError,
    Dataset,
    ExampleRecord,
    ExampleStore,
    Manifest,
    TenantExistsError,
    UnknownTenantError,
    validate_tenant_name,
)

__all__ = [
    "BadExampleError",
    "BlobStore",
    "ConcurrentUpdateError",
    "Dataset",
    "ExampleRecord",
    "ExampleStore",
    "LocalBlobStore",
    "Manifest",
    "S3BlobStore",
    "TenantExistsError",
    "UnknownTenantError",
    "is_class_output",
    "validate_tenant_name",
]
