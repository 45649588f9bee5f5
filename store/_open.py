"""`open_store`: an example store from its URL, the one form every process can be handed."""

from __future__ import annotations

from urllib.parse import unquote, urlparse

from store._blobs import LocalBlobStore, S3BlobStore
from store._examples import ExampleStore

__all__ = ["open_store"]


def open_store(url: str, *, s3_endpoint_url: str | None = None) -> ExampleStore:
    """The `ExampleStore` at ``url``: ``file:///abs/dir`` or ``s3://bucket[/prefix]``.

    ``s3_endpoint_url`` names a non-AWS S3 server (MinIO, moto, s3rver); credentials come from
    boto3's usual chain (environment, profile, instance role).
    """
    if url.startswith("s3://"):
        bucket, _, prefix = url[5:].partition("/")
        if not bucket:
            raise ValueError(
                f"store {url!r} is not valid: s3:// needs a bucket (s3://bucket/prefix)"
            )
        return ExampleStore(S3BlobStore(bucket, prefix, endpoint_url=s3_endpoint_url))
    if url.startswith("file://"):
        path = unquote(urlparse(url).path)
        if not path.startswith("/"):
            raise ValueError(f"store {url!r} is not valid: file:// needs an absolute path")
        return ExampleStore(LocalBlobStore(path))
    raise ValueError(f"store {url!r} is not valid: use file:///abs/dir or s3://bucket/prefix")
