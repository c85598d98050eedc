"""Files by URI: a local path or ``s3://bucket/key``, read and written the same way.

The landing zone, report folders and small lake reads go through here. boto3 is configured from the same
environment variables Sail and delta-rs read (``AWS_ENDPOINT_URL`` or ``AWS_ENDPOINT``, ``AWS_REGION``
(default ``us-east-1``), ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``), with path-style addressing for
custom endpoints such as Ceph RGW or moto. The client is rebuilt whenever those variables change.

Failures are named (:class:`BucketNotFoundError`, :class:`S3EndpointError`, :class:`S3AccessError`, all
:class:`StorageError`) and their messages name the URI, the endpoint and the variables to set. Secrets are
never logged nor put in a message. A missing *object* is not an error: :func:`read_bytes` returns ``None``.

Example:
    >>> from jobs.lake import storage
    >>> storage.write_bytes("s3://landing/cluster=c1/a.json", b"{}")
    >>> [(f.uri, f.size) for f in storage.list_files("s3://landing/cluster=c1")]
    [('s3://landing/cluster=c1/a.json', 2)]
    >>> storage.read_bytes("s3://landing/cluster=c1/a.json", 1)
    b'}'
"""
from __future__ import annotations

import functools
import logging
import os
import pathlib
import shutil
import stat
from dataclasses import dataclass
from typing import Any, Callable, Iterable

__all__ = [
    "FileInfo",
    "StorageError",
    "BucketNotFoundError",
    "S3EndpointError",
    "S3AccessError",
    "is_s3",
    "split",
    "join",
    "relative",
    "list_files",
    "list_keys",
    "prefetch",
    "read_bytes",
    "write_bytes",
    "exists",
    "delete_tree",
    "upload_tree",
    "download_tree",
    "ensure_bucket",
    "client",
]

log = logging.getLogger(__name__)

_SCHEMES = ("s3://", "s3a://")
_MISSING_OBJECT = frozenset({"NoSuchKey", "404", "NotFound"})
_ACCESS = frozenset({"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden"})
_PAGE_SIZE = 1000  # keys per LIST call (the S3 maximum); tests lower it to exercise pagination
_ENDPOINT_HINT = ("AWS_ENDPOINT_URL to a running S3 endpoint (e.g. http://127.0.0.1:PORT for Ceph RGW or moto; "
                  "unset for AWS) and AWS_REGION")
_KEYS_HINT = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to a key pair of that store"


@dataclass(frozen=True)
class FileInfo:
    """One file: its URI (same scheme and root as the listing), size in bytes, modification time (epoch s) and, for
    an S3 object, its ETag ("" for local files): a content fingerprint that a copy of the same bytes keeps."""

    uri: str
    size: int
    mtime: float
    etag: str = ""
    regular: bool = True  # False: a symbolic link, a device or a pipe (local listings), which is never read


class StorageError(RuntimeError):
    """An object store call failed; the message names the URI and what to check."""


class BucketNotFoundError(StorageError):
    """The bucket of a URI does not exist at the configured endpoint."""


class S3EndpointError(StorageError):
    """The S3 endpoint is malformed or does not answer."""


class S3AccessError(StorageError):
    """The endpoint refused the credentials."""


def is_s3(uri: str) -> bool:
    """Whether ``uri`` is an object store URI (``s3://`` or ``s3a://``) rather than a local path."""
    return uri.startswith(_SCHEMES)


def split(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> ``("bucket", "key")``."""
    rest = uri.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0] + "://"


def join(uri: str, *parts: str) -> str:
    """``uri`` and ``parts`` joined with single ``/`` separators (empty parts are skipped).

    Example:
        >>> join("s3://b/root/", "/cluster=c1", "a.json")
        's3://b/root/cluster=c1/a.json'
    """
    out = uri.rstrip("/") or uri
    for p in parts:
        p = p.strip("/")
        if p:
            out = f"{out}{p}" if out.endswith("/") else f"{out}/{p}"
    return out


def relative(uri: str, root_uri: str) -> str:
    """The path of ``uri`` below ``root_uri`` with ``/`` separators (``""`` for the root itself).

    Raises:
        ValueError: ``uri`` is not below ``root_uri``.
    """
    if is_s3(uri) or is_s3(root_uri):
        b1, k1 = split(uri)
        b2, k2 = split(root_uri)
        k2 = k2.strip("/")
        if b1 != b2 or not (not k2 or k1 == k2 or k1.startswith(k2 + "/")):
            raise ValueError(f"{uri} is not below {root_uri}")
        return k1[len(k2):].strip("/")
    root = root_uri.rstrip("/")
    if uri.startswith(root + "/") and not ({".", "..", ""} & set(uri[len(root) + 1:].split("/"))):
        return uri[len(root) + 1:]  # what a listing of the root yields: no need to resolve (a stat per folder)
    path = pathlib.Path(uri)
    if path.name in ("", ".", ".."):
        full = path.resolve()
    else:  # the file's own name is not resolved: it may be a symlink loop, which is listed and then quarantined
        full = path.parent.resolve() / path.name
    rel = full.relative_to(pathlib.Path(root_uri).resolve()).as_posix()
    return "" if rel == "." else rel


# ---------------------------------------------------------------------------------------------------- client


# Concurrent GETs for a step that reads many small objects (config and consume queue files): each mostly waits on
# the network (10-30 ms on S3), so the count is set by latency, not by cores.
S3_READ_THREADS = 16


def _endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT") or None


@functools.lru_cache(maxsize=8)
def _client(endpoint: str | None, region: str, key_id: str | None, secret: str | None) -> Any:
    import boto3
    from botocore.config import Config

    cfg = Config(
        s3={"addressing_style": "path"} if endpoint else {},
        retries={"max_attempts": 3, "mode": "standard"},
        max_pool_connections=2 * S3_READ_THREADS,  # the ingest's concurrent small reads
        connect_timeout=5,
        read_timeout=120,
    )
    creds = {"aws_access_key_id": key_id, "aws_secret_access_key": secret} if key_id else {}
    return boto3.client("s3", endpoint_url=endpoint, region_name=region, config=cfg, **creds)


def client() -> Any:
    """A boto3 S3 client for the current environment (cached per endpoint, region and credentials).

    Raises:
        S3EndpointError: ``AWS_ENDPOINT_URL`` is not an ``http(s)://host[:port]`` URL.
    """
    endpoint = _endpoint()
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise S3EndpointError(f"AWS_ENDPOINT_URL={endpoint!r} is not a URL: set it to http(s)://host:port "
                              "(or unset it for AWS)")
    try:
        return _client(endpoint, os.environ.get("AWS_REGION") or "us-east-1",
                       os.environ.get("AWS_ACCESS_KEY_ID") or None, os.environ.get("AWS_SECRET_ACCESS_KEY") or None)
    except ValueError as exc:
        raise S3EndpointError(f"AWS_ENDPOINT_URL={endpoint!r}: {exc}; set it to http(s)://host:port") from exc


def _code(exc: BaseException) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _cause(exc: BaseException) -> Exception:
    """The botocore error behind a boto3 transfer error (``S3UploadFailedError`` only keeps it as context)."""
    e: BaseException | None = exc
    while e is not None:
        if _code(e) or type(e).__module__.startswith("botocore"):  # type: ignore[arg-type]
            return e  # type: ignore[return-value]
        e = e.__cause__ or e.__context__
    return exc  # type: ignore[return-value]


def _error(op: str, uri: str, exc: Exception) -> StorageError:
    """A named error for a failed S3 call on ``uri``: what went wrong, at which endpoint, and what to set."""
    from botocore import exceptions as bx

    where = f"endpoint {_endpoint() or 'AWS (AWS_ENDPOINT_URL unset)'}"
    code = _code(exc)
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ConnectionClosedError)):
        return S3EndpointError(f"{op} {uri}: cannot reach {where}: {exc}. Set {_ENDPOINT_HINT}")
    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return S3AccessError(f"{op} {uri}: no credentials for {where}. Set {_KEYS_HINT}")
    if code == "NoSuchBucket":
        return BucketNotFoundError(f"{op} {uri}: bucket {split(uri)[0]!r} does not exist at {where}. Create it "
                                   "(jobs.lake.storage.ensure_bucket) or set AWS_ENDPOINT_URL to the store that "
                                   "holds it")
    if code in _ACCESS:
        return S3AccessError(f"{op} {uri}: {where} refused the credentials ({code}). Set {_KEYS_HINT}")
    return StorageError(f"{op} {uri}: {type(exc).__name__}: {exc} at {where}. Check AWS_ENDPOINT_URL, AWS_REGION, "
                        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")


# ---------------------------------------------------------------------------------------------------- listing


def list_files(prefix_uri: str) -> list[FileInfo]:
    """Every file at or below ``prefix_uri``, recursively, sorted by URI (paginated on S3).

    A prefix that names one file lists that file; a prefix with nothing below it lists nothing.

    Raises:
        BucketNotFoundError: the bucket does not exist (S3).
        S3EndpointError, S3AccessError: the endpoint is unreachable or refuses the credentials.
    """
    if is_s3(prefix_uri):
        scheme = _scheme(prefix_uri)
        bucket, key = split(prefix_uri)
        key = key.strip("/")
        out: list[FileInfo] = []
        try:
            pages = client().get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=key, PaginationConfig={"PageSize": _PAGE_SIZE})
            for page in pages:
                for obj in page.get("Contents", []):
                    k = obj["Key"]
                    if key and k != key and not k.startswith(key + "/"):
                        continue  # "a/bc" is not below "a/b"
                    if k.endswith("/"):
                        continue  # a "folder" marker, not a file
                    out.append(FileInfo(f"{scheme}{bucket}/{k}", int(obj["Size"]), obj["LastModified"].timestamp(),
                                        str(obj.get("ETag") or "")))
        except Exception as exc:  # noqa: BLE001 - botocore raises many unrelated types
            raise _error("list", prefix_uri, exc) from exc
        return sorted(out, key=lambda f: f.uri)
    root = pathlib.Path(prefix_uri)
    if root.is_file():
        st = root.stat()
        return [FileInfo(str(root), st.st_size, st.st_mtime)]
    files: list[FileInfo] = []
    todo = [str(root)]
    while todo:  # os.walk's order of visits does not matter: the result is sorted
        files_here, dirs = _scan(todo.pop())
        files.extend(files_here)
        todo.extend(dirs)
    return sorted(files, key=lambda f: f.uri)


def _scan(folder: str) -> tuple[list[FileInfo], list[str]]:
    """The files (with size and mtime) and the folders directly in a local folder (os.scandir: one stat a file)."""
    files: list[FileInfo] = []
    dirs: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:  # as os.walk (no onerror): a folder that vanished or cannot be read lists nothing
        return files, dirs
    for e in entries:
        try:
            is_dir = e.is_dir()
        except OSError:  # a symlink loop: a file here, as os.walk lists it
            is_dir = False
        if is_dir:  # as os.walk: a link to a folder is neither listed nor followed
            if not e.is_symlink():
                dirs.append(e.path)
            continue
        # A link (to a file, dangling or a loop) is listed from the link itself and marked: a landing zone holds
        # copies, and a link could point anywhere (/etc/shadow); the ingest quarantines it by name, unread.
        st = e.stat(follow_symlinks=False)
        files.append(FileInfo(e.path, st.st_size, st.st_mtime, regular=stat.S_ISREG(st.st_mode)))
    return files, dirs


def list_level(prefix_uri: str) -> tuple[list[FileInfo], list[str]]:
    """The files directly below ``prefix_uri`` and the URIs of its folders (S3: the common prefixes of a ``/``
    delimited listing), for a listing that decides which folders to descend into."""
    if not is_s3(prefix_uri):
        return _scan(prefix_uri)
    scheme = _scheme(prefix_uri)
    bucket, key = split(prefix_uri)
    key = key.strip("/")
    prefix = key + "/" if key else ""
    files: list[FileInfo] = []
    dirs: list[str] = []
    try:
        pages = client().get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix, Delimiter="/", PaginationConfig={"PageSize": _PAGE_SIZE})
        for page in pages:
            for obj in page.get("Contents", []):
                if not obj["Key"].endswith("/"):
                    files.append(FileInfo(f"{scheme}{bucket}/{obj['Key']}", int(obj["Size"]),
                                          obj["LastModified"].timestamp(), str(obj.get("ETag") or "")))
            for cp in page.get("CommonPrefixes", []):
                dirs.append(f"{scheme}{bucket}/{cp['Prefix'].rstrip('/')}")
    except Exception as exc:  # noqa: BLE001 - botocore raises many unrelated types
        raise _error("list", prefix_uri, exc) from exc
    return files, dirs


def list_keys(prefix_uri: str) -> list[str]:
    """The URIs of :func:`list_files`."""
    return [f.uri for f in list_files(prefix_uri)]


def exists(uri: str) -> bool:
    """Whether ``uri`` is a file, or a folder (prefix) with at least one file below it."""
    if not is_s3(uri):
        return os.path.exists(uri)
    bucket, key = split(uri)
    key = key.strip("/")
    if not key:
        return _bucket_exists(uri)
    try:
        client().head_object(Bucket=bucket, Key=key)
        return True
    except Exception as exc:  # noqa: BLE001
        if _code(exc) not in _MISSING_OBJECT and _code(exc) != "NoSuchBucket":
            raise _error("head", uri, exc) from exc
    try:
        page = client().list_objects_v2(Bucket=bucket, Prefix=key + "/", MaxKeys=1)
    except Exception as exc:  # noqa: BLE001
        if _code(exc) == "NoSuchBucket":
            return False
        raise _error("list", uri, exc) from exc
    return bool(page.get("KeyCount") or page.get("Contents"))


def delete_tree(uri: str) -> int:
    """Delete ``uri`` and everything below it (a local folder or an s3:// prefix); returns files deleted."""
    if not is_s3(uri):
        if not os.path.exists(uri):
            return 0
        n = sum(len(files) for _, _, files in os.walk(uri))
        shutil.rmtree(uri)
        return n
    bucket, _ = split(uri)
    keys = [split(u)[1] for u in list_keys(uri.rstrip("/") + "/")]
    for i in range(0, len(keys), 1000):
        try:
            client().delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]],
                                                           "Quiet": True})
        except Exception as exc:  # noqa: BLE001
            raise _error("delete", uri, exc) from exc
    return len(keys)


# ---------------------------------------------------------------------------------------------------- bytes


def read_bytes(uri: str, start: int = 0, end: int | None = None) -> bytes | None:
    """The bytes ``[start, end)`` of a file (a ranged GET on S3), or ``None`` when the file does not exist.

    A range past the end of the file gives ``b""``, like a local read.

    Raises:
        BucketNotFoundError: the bucket does not exist (a missing bucket is a setup error, not a missing file).
        S3EndpointError, S3AccessError: the endpoint is unreachable or refuses the credentials.
        OSError: a local file that exists but cannot be read (permissions, a symlink loop, an I/O error).
    """
    if start < 0:
        raise ValueError(f"read_bytes({uri!r}): start must be >= 0, got {start}")
    if end is not None and end <= start:
        return b"" if exists(uri) else None
    if is_s3(uri):
        bucket, key = split(uri)
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if start or end is not None:
            kwargs["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            return bytes(client().get_object(**kwargs)["Body"].read())
        except Exception as exc:  # noqa: BLE001
            code = _code(exc)
            if code in _MISSING_OBJECT:
                return None
            if code == "InvalidRange":
                return b""
            raise _error("read", uri, exc) from exc
    try:
        with open(uri, "rb") as f:
            if start:
                f.seek(start)
            return f.read() if end is None else f.read(end - start)
    except (FileNotFoundError, IsADirectoryError):
        if os.path.islink(uri) and not os.path.exists(uri):
            raise  # a dangling link is listed but cannot be read: an unreadable file, not a missing one
        return None


def prefetch(uris: Iterable[str]) -> None:
    """Ask the kernel to start reading local files into the page cache (``posix_fadvise(WILLNEED)``), so that the
    reads that follow find them there; S3 objects, and files that cannot be opened, are left alone (their reads
    say what is wrong). Costs an open and a close a file; the reading happens beside the caller."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    for uri in uris:
        if is_s3(uri):
            continue
        try:
            fd = os.open(uri, os.O_RDONLY)
        except OSError:
            continue
        try:
            advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


def write_bytes(uri: str, data: bytes | memoryview) -> None:
    """Write ``data`` to ``uri``, replacing it whole (atomic rename locally; one PUT on S3).

    Raises:
        BucketNotFoundError, S3EndpointError, S3AccessError: as for :func:`read_bytes`.
    """
    if is_s3(uri):
        bucket, key = split(uri)
        try:
            client().put_object(Bucket=bucket, Key=key, Body=bytes(data) if isinstance(data, memoryview) else data)
        except Exception as exc:  # noqa: BLE001
            raise _error("write", uri, exc) from exc
        return
    p = pathlib.Path(uri)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(p)


# ---------------------------------------------------------------------------------------------------- trees


def upload_tree(local_dir: str, dest_uri: str) -> int:
    """Copy every file below ``local_dir`` to the same relative path below ``dest_uri`` (S3 or local).

    Large files are streamed (multipart on S3), so a 1 GiB commitlog segment never sits in memory. On S3 the files
    go up side by side (:data:`S3_READ_THREADS`): each PUT mostly waits on the network.

    Returns:
        The number of files copied.
    """
    import shutil

    root = pathlib.Path(local_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"upload_tree: {local_dir} is not a directory")

    def one(f: FileInfo) -> None:
        rel = pathlib.Path(f.uri).relative_to(root).as_posix()
        target = join(dest_uri, rel)
        if is_s3(target):
            bucket, key = split(target)
            try:
                if f.size <= _ONE_PUT:  # a transfer manager's threads and parts cost more than the PUT itself
                    with open(f.uri, "rb") as body:
                        client().put_object(Bucket=bucket, Key=key, Body=body)
                else:
                    client().upload_file(f.uri, bucket, key)
            except Exception as exc:  # noqa: BLE001
                raise _error("upload", target, _cause(exc)) from exc
        else:
            pathlib.Path(target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f.uri, target)  # with its mtime, as a sync job keeps it (LandingFile.fingerprint)

    n = _each(list_files(str(root)), one, is_s3(dest_uri))
    log.info("uploaded %d files from %s to %s", n, local_dir, dest_uri)
    return n


def download_tree(src_uri: str, local_dir: str) -> int:
    """Copy every file below ``src_uri`` to the same relative path below ``local_dir`` (from S3 side by side, as
    :func:`upload_tree`).

    Returns:
        The number of files copied.
    """
    import shutil

    def one(f: FileInfo) -> None:
        target = pathlib.Path(local_dir) / relative(f.uri, src_uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        if is_s3(f.uri):
            bucket, key = split(f.uri)
            try:
                if f.size <= _ONE_PUT:
                    target.write_bytes(client().get_object(Bucket=bucket, Key=key)["Body"].read())
                else:
                    client().download_file(bucket, key, str(target))
            except Exception as exc:  # noqa: BLE001
                raise _error("download", f.uri, _cause(exc)) from exc
        else:
            shutil.copyfile(f.uri, target)

    return _each(list_files(src_uri), one, is_s3(src_uri))


_ONE_PUT = 8 << 20  # bytes: a file up to this size is copied in one request


def _each(items: list[Any], fn: Callable[[Any], None], threads: bool) -> int:
    """``fn`` of every item, on :data:`S3_READ_THREADS` threads when ``threads`` (the first error raised); the count."""
    if not threads:
        for item in items:
            fn(item)
        return len(items)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=S3_READ_THREADS) as pool:
        for _ in pool.map(fn, items):
            pass
    return len(items)


# ---------------------------------------------------------------------------------------------------- buckets


def _bucket_exists(uri: str) -> bool:
    bucket, _ = split(uri)
    try:
        client().head_bucket(Bucket=bucket)
        return True
    except Exception as exc:  # noqa: BLE001
        if _code(exc) in ("404", "NoSuchBucket", "NotFound"):
            return False
        raise _error("head bucket", uri, exc) from exc


def ensure_bucket(uri: str) -> None:
    """Create the bucket of ``uri`` when it does not exist (tests and the demo). Idempotent.

    Raises:
        S3EndpointError, S3AccessError: the endpoint is unreachable or refuses the credentials.
        StorageError: the bucket cannot be created (e.g. an invalid name: 3-63 lowercase characters).
    """
    if not is_s3(uri):
        raise ValueError(f"ensure_bucket({uri!r}): not an s3:// URI")
    if _bucket_exists(uri):
        return
    bucket, _ = split(uri)
    try:
        client().create_bucket(Bucket=bucket)
    except Exception as exc:  # noqa: BLE001
        if _code(exc) in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            return
        raise _error("create bucket", uri, exc) from exc
