"""Key/value blob backends under the example store: a local directory and S3.

Keys are relative POSIX paths made by the store itself (``tenants/<name>/...``); user input never
reaches a key unvalidated. Both backends give the two guarantees the store is built on:

* `put` is atomic: a reader sees the old object or the new one, never a torn write
  (local: write a temporary file, fsync, rename; S3: a PUT is atomic);
* `put_new` creates a key only if it does not exist yet, atomically, and says whether it did
  (local: ``os.link`` of a finished temporary file; S3: a PUT with ``If-None-Match: *``).
  Manifest versions are written with it, so two writers can never both publish version N.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["BlobStore", "LocalBlobStore", "S3BlobStore"]


@runtime_checkable
class BlobStore(Protocol):
    """What the example store needs from a backend."""

    def put(self, key: str, data: bytes) -> None: ...

    def put_new(self, key: str, data: bytes) -> bool: ...

    def get(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> list[str]: ...

    def delete(self, key: str) -> None: ...

    def describe(self) -> str: ...

    def url(self) -> str:
        """Where the blobs are, as `store.open_store` takes it back (``file://`` or ``s3://``)."""
        ...


class LocalBlobStore:
    """Blobs as files under `root` (the embedded default)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def describe(self) -> str:
        return f"local directory {self.root}"

    def url(self) -> str:
        return self.root.resolve().as_uri()

    def _path(self, key: str) -> Path:
        return self.root / key

    def _write_temp(self, path: Path, data: bytes) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.name)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            os.unlink(tmp)
            raise
        return tmp

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._write_temp(path, data)
        os.replace(tmp, path)

    def put_new(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        return True

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        # A prefix is either a folder ("a/b/") or a folder plus the start of a name ("a/b/c").
        folder = base if prefix.endswith("/") else base.parent
        if not folder.is_dir():
            return []
        out: list[str] = []
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                if name.startswith(".tmp-"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), self.root)
                key = Path(rel).as_posix()
                if key.startswith(prefix):
                    out.append(key)
        return sorted(out)

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass


class S3BlobStore:
    """Blobs as objects in an S3 bucket under `prefix`, through boto3 (AWS, MinIO, moto...)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        client: Any = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        if client is None:
            import boto3

            client = boto3.client("s3", endpoint_url=endpoint_url)
        self.client = client

    def describe(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"S3 bucket {self.bucket!r}{where}"

    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def _key(self, key: str) -> str:
        return self.prefix + key

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def put_new(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*"
            )
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412"):
                return False
            raise
        return True

    def get(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise KeyError(key) from None
            raise
        body: bytes = resp["Body"].read()
        return body

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return False
            raise
        return True

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._key(prefix)
        )
        for page in pages:
            for obj in page.get("Contents", []):
                yield obj["Key"][len(self.prefix) :]

    def list(self, prefix: str) -> list[str]:
        return sorted(self._iter_keys(prefix))

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
