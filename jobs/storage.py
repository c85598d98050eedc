"""Files by URI: a local path or ``s3://bucket/key``, read and written the same way.

The landing zone, report folders and small lake reads go through here; boto3 is configured from the same
environment variables Sail and delta-rs read (``AWS_ENDPOINT_URL``/``AWS_ENDPOINT``, ``AWS_REGION``, keys),
with path-style addressing for custom endpoints such as Ceph RGW or moto. Secrets are never logged.
"""
from __future__ import annotations

import functools
import os
import pathlib
from dataclasses import dataclass
from typing import Any

__all__ = ["FileInfo", "is_s3", "join", "list_files", "list_keys", "read_bytes", "write_bytes", "exists",
           "upload_tree", "download_tree", "relative", "ensure_bucket", "split"]


@dataclass(frozen=True)
class FileInfo:
    uri: str
    size: int
    mtime: float


class StorageError(RuntimeError):
    """An object store call failed; the message names the URI and what to check."""


def is_s3(uri: str) -> bool:
    return uri.startswith(("s3://", "s3a://"))


def split(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> (bucket, key)."""
    rest = uri.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key


def join(uri: str, *parts: str) -> str:
    out = uri.rstrip("/")
    for p in parts:
        p = p.strip("/")
        if p:
            out = f"{out}/{p}"
    return out


def relative(uri: str, root: str) -> str:
    """The path of ``uri`` below ``root`` with ``/`` separators."""
    root = root.rstrip("/")
    if is_s3(uri):
        return uri[len(root):].lstrip("/")
    return pathlib.Path(uri).resolve().relative_to(pathlib.Path(root).resolve()).as_posix()


def _endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT")


@functools.lru_cache(maxsize=8)
def _client(endpoint: str | None, region: str, key_id: str | None) -> Any:
    import boto3
    from botocore.config import Config

    cfg = Config(s3={"addressing_style": "path"} if endpoint else {}, retries={"max_attempts": 5, "mode": "standard"})
    return boto3.client("s3", endpoint_url=endpoint, region_name=region, config=cfg)


def s3() -> Any:
    return _client(_endpoint(), os.environ.get("AWS_REGION", "us-east-1"), os.environ.get("AWS_ACCESS_KEY_ID"))


def _explain(uri: str, exc: Exception) -> StorageError:
    return StorageError(f"{uri}: {type(exc).__name__}: {exc}. Check the bucket exists and AWS_ENDPOINT_URL, "
                        f"AWS_REGION, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (endpoint now: {_endpoint() or 'AWS'})")


def list_files(prefix: str) -> list[FileInfo]:
    """Every file below ``prefix``, recursively, sorted by URI."""
    if is_s3(prefix):
        bucket, key = split(prefix)
        key = key.rstrip("/") + "/" if key else ""
        out = []
        try:
            for page in s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
                for obj in page.get("Contents", []):
                    out.append(FileInfo(f"s3://{bucket}/{obj['Key']}", int(obj["Size"]),
                                        obj["LastModified"].timestamp()))
        except Exception as exc:  # noqa: BLE001
            raise _explain(prefix, exc) from exc
        return sorted(out, key=lambda f: f.uri)
    root = pathlib.Path(prefix)
    if not root.exists():
        return []
    out = []
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = pathlib.Path(dirpath) / n
            st = p.stat()
            out.append(FileInfo(str(p), st.st_size, st.st_mtime))
    return sorted(out, key=lambda f: f.uri)


def list_keys(prefix: str) -> list[str]:
    return [f.uri for f in list_files(prefix)]


def read_bytes(uri: str, start: int = 0, end: int | None = None) -> bytes | None:
    """The bytes ``[start, end)`` of a file, or None when it does not exist."""
    if is_s3(uri):
        bucket, key = split(uri)
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if start or end is not None:
            kwargs["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            return s3().get_object(**kwargs)["Body"].read()
        except Exception as exc:  # noqa: BLE001
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                return None
            if code == "InvalidRange":
                return b""
            raise _explain(uri, exc) from exc
    try:
        with open(uri, "rb") as f:
            if start:
                f.seek(start)
            return f.read() if end is None else f.read(max(0, end - start))
    except FileNotFoundError:
        return None


def write_bytes(uri: str, data: bytes) -> None:
    if is_s3(uri):
        bucket, key = split(uri)
        try:
            s3().put_object(Bucket=bucket, Key=key, Body=data)
        except Exception as exc:  # noqa: BLE001
            raise _explain(uri, exc) from exc
        return
    p = pathlib.Path(uri)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(p)


def exists(uri: str) -> bool:
    if is_s3(uri):
        bucket, key = split(uri)
        try:
            s3().head_object(Bucket=bucket, Key=key)
            return True
        except Exception:  # noqa: BLE001
            return False
    return os.path.exists(uri)


def ensure_bucket(uri: str) -> None:
    """Create the bucket of ``uri`` when it does not exist (tests and the demo)."""
    bucket, _ = split(uri)
    try:
        s3().head_bucket(Bucket=bucket)
    except Exception:  # noqa: BLE001
        try:
            s3().create_bucket(Bucket=bucket)
        except Exception as exc:  # noqa: BLE001
            raise _explain(uri, exc) from exc


def upload_tree(local_dir: str, dest: str) -> int:
    """Copy a local folder to ``dest`` (s3:// or local); returns the number of files."""
    n = 0
    root = pathlib.Path(local_dir)
    for f in list_files(local_dir):
        rel = pathlib.Path(f.uri).relative_to(root).as_posix()
        write_bytes(join(dest, rel), pathlib.Path(f.uri).read_bytes())
        n += 1
    return n


def download_tree(src: str, local_dir: str) -> int:
    n = 0
    for f in list_files(src):
        data = read_bytes(f.uri) or b""
        write_bytes(str(pathlib.Path(local_dir) / relative(f.uri, src)), data)
        n += 1
    return n
