"""The data layer: tenants' schemas and examples in one `ExampleStore` over a local directory
or S3 (`open_store(url)`; see `_examples` for the layout), the schema language (`store.schema`),
input limits (`store.limits`) and file loaders (`store.loaders`)."""

from store._blobs import BlobStore, LocalBlobStore, S3BlobStore
from store._codec import BadExampleError, Encoded, encode_inputs, is_class_output
from store._examples import (
    ConcurrentUpdateError,
    Dataset,
    ExampleRecord,
    ExampleStore,
    Manifest,
    TenantExistsError,
    UnknownTenantError,
    validate_tenant_name,
)
from store._open import open_store
from store._scoped import TenantAccessError, TenantScopedStore

__all__ = [
    "BadExampleError",
    "BlobStore",
    "ConcurrentUpdateError",
    "Dataset",
    "ExampleRecord",
    "Encoded",
    "ExampleStore",
    "LocalBlobStore",
    "Manifest",
    "S3BlobStore",
    "TenantAccessError",
    "TenantExistsError",
    "TenantScopedStore",
    "UnknownTenantError",
    "encode_inputs",
    "is_class_output",
    "open_store",
    "validate_tenant_name",
]
