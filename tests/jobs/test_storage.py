"""jobs.lake.storage on local paths and on S3 (moto): exact bytes, sizes and listings; named errors with exact
messages."""
from __future__ import annotations

import pathlib
import time
import uuid

import pytest

from jobs.lake import storage

DATA = bytes(range(256)) * 4  # 1024 bytes, every offset distinguishable


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh empty root per test: a local folder, or a unique prefix in the moto bucket."""
    if request.param == "local":
        return str(tmp_path / "root")
    endpoint = request.getfixturevalue("moto_s3")
    endpoint.apply(monkeypatch)
    return storage.join(endpoint.bucket_uri, f"t-{uuid.uuid4().hex[:10]}")


@pytest.fixture()
def moto(moto_s3: object, monkeypatch: pytest.MonkeyPatch) -> object:
    """The moto endpoint, with its environment applied for this test."""
    moto_s3.apply(monkeypatch)  # type: ignore[attr-defined]
    return moto_s3


def _listing(root: str, prefix: str = "") -> list[tuple[str, int]]:
    return [(storage.relative(f.uri, root), f.size) for f in storage.list_files(storage.join(root, prefix))]


# ------------------------------------------------------------------------------------------------ bytes


def test_write_then_read_gives_the_exact_bytes(root: str) -> None:
    uri = storage.join(root, "cluster=c1/store/commitlog/00000000000000000000")
    storage.write_bytes(uri, DATA)
    assert storage.read_bytes(uri) == DATA


def test_write_replaces_the_whole_file(root: str) -> None:
    uri = storage.join(root, "summary.json")
    storage.write_bytes(uri, b"a much longer first version")
    storage.write_bytes(uri, b"{}")
    assert storage.read_bytes(uri) == b"{}"
    assert _listing(root) == [("summary.json", 2)]


@pytest.mark.parametrize(
    "start, end, expected",
    [
        pytest.param(0, None, DATA, id="whole_file"),
        pytest.param(10, 20, DATA[10:20], id="middle_range_is_half_open"),
        pytest.param(1000, None, DATA[1000:], id="from_offset_to_the_end"),
        pytest.param(0, 1, DATA[:1], id="first_byte"),
        pytest.param(1020, 2000, DATA[1020:], id="end_past_the_file_is_clipped"),
        pytest.param(1024, None, b"", id="start_at_the_end_is_empty"),
        pytest.param(5000, 6000, b"", id="range_past_the_end_is_empty"),
        pytest.param(7, 7, b"", id="empty_range"),
    ],
)
def test_ranged_read_returns_exactly_the_range(root: str, start: int, end: int | None, expected: bytes) -> None:
    uri = storage.join(root, "seg")
    storage.write_bytes(uri, DATA)
    assert storage.read_bytes(uri, start, end) == expected


@pytest.mark.parametrize("start, end", [(0, None), (10, 20), (7, 7)], ids=["whole", "range", "empty_range"])
def test_missing_file_reads_as_none(root: str, start: int, end: int | None) -> None:
    storage.write_bytes(storage.join(root, "present"), b"x")
    assert storage.read_bytes(storage.join(root, "absent"), start, end) is None


def test_negative_start_is_rejected(root: str) -> None:
    uri = storage.join(root, "seg")
    with pytest.raises(ValueError, match=r"start must be >= 0, got -1"):
        storage.read_bytes(uri, -1)


# ------------------------------------------------------------------------------------------------ listing

LANDING = {
    "cluster=c1/broker=b1/snapshot_ts=20240101T000000Z/store/config/topics.json": b"{\n}",
    "cluster=c1/broker=b1/snapshot_ts=20240101T000000Z/store/commitlog/00000000000000000000": DATA,
    "cluster=c1/clients/snapshot_ts=20240101T000000Z/10.0.0.5@DEFAULT/g1/offsets.json": b"",
    "cluster=c10/broker=b9/store/config/topics.json": b"x",
}


def test_list_files_is_recursive_sorted_with_exact_sizes(root: str) -> None:
    for rel in reversed(list(LANDING)):
        storage.write_bytes(storage.join(root, rel), LANDING[rel])
    before = time.time()
    assert _listing(root, "cluster=c1") == [
        ("cluster=c1/broker=b1/snapshot_ts=20240101T000000Z/store/commitlog/00000000000000000000", 1024),
        ("cluster=c1/broker=b1/snapshot_ts=20240101T000000Z/store/config/topics.json", 3),
        ("cluster=c1/clients/snapshot_ts=20240101T000000Z/10.0.0.5@DEFAULT/g1/offsets.json", 0),
    ]  # cluster=c10 shares the name prefix but is not below cluster=c1
    files = storage.list_files(root)
    assert [storage.relative(f.uri, root) for f in files] == sorted(LANDING)
    assert all(before - 600 < f.mtime <= before + 5 for f in files)
    assert storage.list_keys(root) == [f.uri for f in files]


def test_listing_a_file_gives_that_file_and_a_missing_prefix_nothing(root: str) -> None:
    storage.write_bytes(storage.join(root, "a/bc"), b"123")
    storage.write_bytes(storage.join(root, "a/b/c"), b"1")
    assert [(storage.relative(f.uri, root), f.size) for f in storage.list_files(storage.join(root, "a/bc"))] == [
        ("a/bc", 3)
    ]
    assert _listing(root, "a/b") == [("a/b/c", 1)]
    assert storage.list_files(storage.join(root, "nothing/here")) == []


def test_s3_listing_follows_every_page(moto: object, monkeypatch: pytest.MonkeyPatch) -> None:
    root = storage.join(moto.bucket_uri, f"pages-{uuid.uuid4().hex[:8]}")  # type: ignore[attr-defined]
    for i in range(5):
        storage.write_bytes(storage.join(root, f"f{i}"), b"x" * i)
    calls: list[str] = []
    events = storage.client().meta.events
    handler = lambda **kw: calls.append(kw["model"].name)  # noqa: E731
    events.register("before-call.s3.ListObjectsV2", handler)
    monkeypatch.setattr(storage, "_PAGE_SIZE", 2)
    try:
        assert _listing(root) == [(f"f{i}", i) for i in range(5)]
    finally:
        events.unregister("before-call.s3.ListObjectsV2", handler)
    assert calls == ["ListObjectsV2"] * 3


def test_s3a_uris_keep_their_scheme(moto: object) -> None:
    bucket = moto.bucket_uri.removeprefix("s3://")  # type: ignore[attr-defined]
    root = f"s3a://{bucket}/s3a-{uuid.uuid4().hex[:8]}"
    storage.write_bytes(f"{root}/x", b"12")
    assert [(f.uri, f.size) for f in storage.list_files(root)] == [(f"{root}/x", 2)]


def test_exists_for_files_folders_and_missing_paths(root: str) -> None:
    storage.write_bytes(storage.join(root, "a/bc"), b"1")
    assert storage.exists(storage.join(root, "a/bc")) is True
    assert storage.exists(storage.join(root, "a")) is True
    assert storage.exists(storage.join(root, "a/b")) is False
    assert storage.exists(storage.join(root, "zzz")) is False


# ------------------------------------------------------------------------------------------------ trees


def test_upload_then_download_tree_copies_every_file_exactly(root: str, tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    for rel, data in LANDING.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    dest = storage.join(root, "landing")
    assert storage.upload_tree(str(src), dest) == 4
    assert _listing(dest) == [(rel, len(LANDING[rel])) for rel in sorted(LANDING)]
    assert storage.read_bytes(storage.join(dest, sorted(LANDING)[0])) == DATA

    down = tmp_path / "down"
    assert storage.download_tree(dest, str(down)) == 4
    got = {p.relative_to(down).as_posix(): p.read_bytes() for p in down.rglob("*") if p.is_file()}
    assert got == LANDING


def test_upload_tree_streams_a_multipart_sized_file(moto: object, tmp_path: pathlib.Path) -> None:
    big = bytes(range(256)) * (40 * 1024 * 4)  # 40 MiB: above boto3's 8 MiB multipart threshold
    (tmp_path / "src" / "store" / "commitlog").mkdir(parents=True)
    (tmp_path / "src" / "store" / "commitlog" / "00000000000000000000").write_bytes(big)
    dest = storage.join(moto.bucket_uri, f"big-{uuid.uuid4().hex[:8]}")  # type: ignore[attr-defined]
    assert storage.upload_tree(str(tmp_path / "src"), dest) == 1
    uri = storage.join(dest, "store/commitlog/00000000000000000000")
    assert _listing(dest) == [("store/commitlog/00000000000000000000", len(big))]
    assert storage.read_bytes(uri, 12_345_678, 12_345_690) == big[12_345_678:12_345_690]


# ------------------------------------------------------------------------------------------------ URIs


@pytest.mark.parametrize(
    "uri, parts, expected",
    [
        pytest.param("s3://b/root/", ("/cluster=c1", "a.json"), "s3://b/root/cluster=c1/a.json", id="s3_slashes"),
        pytest.param("s3://b", ("x",), "s3://b/x", id="bucket_root"),
        pytest.param("/data/landing", ("", "x/y"), "/data/landing/x/y", id="local_skips_empty_parts"),
        pytest.param("/", ("tmp",), "/tmp", id="filesystem_root"),
    ],
)
def test_join(uri: str, parts: tuple[str, ...], expected: str) -> None:
    assert storage.join(uri, *parts) == expected


@pytest.mark.parametrize(
    "uri, root, expected",
    [
        pytest.param("s3://b/land/c1/x.json", "s3://b/land", "c1/x.json", id="s3"),
        pytest.param("s3://b/land/c1/x.json", "s3://b/land/", "c1/x.json", id="s3_root_with_slash"),
        pytest.param("s3://b/x", "s3://b", "x", id="s3_bucket_root"),
        pytest.param("/data/land/c1/.hidden.", "/data/land", "c1/.hidden.", id="local_keeps_dots"),
        pytest.param("/data/land", "/data/land", "", id="root_itself"),
    ],
)
def test_relative(uri: str, root: str, expected: str) -> None:
    assert storage.relative(uri, root) == expected


def test_relative_outside_the_root_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"^s3://b/landing2/x is not below s3://b/landing$"):
        storage.relative("s3://b/landing2/x", "s3://b/landing")


def test_is_s3() -> None:
    assert [storage.is_s3(u) for u in ("s3://b/k", "s3a://b/k", "/tmp/s3://", "file:///x")] == [True, True, False, False]


# ------------------------------------------------------------------------------------------------ errors


def test_ensure_bucket_creates_a_missing_bucket_once(moto: object) -> None:
    uri = f"s3://fresh-{uuid.uuid4().hex[:8]}/reports"
    storage.ensure_bucket(uri)
    storage.ensure_bucket(uri)
    storage.write_bytes(storage.join(uri, "a"), b"1")
    assert storage.list_keys(uri) == [f"{uri}/a"]


@pytest.mark.parametrize(
    "op, call",
    [
        pytest.param("read", lambda u: storage.read_bytes(u), id="read"),
        pytest.param("read", lambda u: storage.read_bytes(u, 3, 9), id="ranged_read"),
        pytest.param("write", lambda u: storage.write_bytes(u, b"x"), id="write"),
        pytest.param("list", lambda u: storage.list_files(u), id="list"),
    ],
)
def test_missing_bucket_names_the_uri_and_what_to_set(moto: object, op: str, call: object) -> None:
    uri = "s3://no-such-bucket-rmq/landing/x"
    endpoint = moto.env["AWS_ENDPOINT_URL"]  # type: ignore[attr-defined]
    with pytest.raises(storage.BucketNotFoundError) as err:
        call(uri)  # type: ignore[operator]
    assert str(err.value) == (
        f"{op} {uri}: bucket 'no-such-bucket-rmq' does not exist at endpoint {endpoint}. "
        "Create it (jobs.lake.storage.ensure_bucket) or set AWS_ENDPOINT_URL to the store that holds it"
    )
    assert storage.exists(uri) is False


def test_unreachable_endpoint_names_the_endpoint_and_never_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-value")
    with pytest.raises(storage.S3EndpointError) as err:
        storage.list_files("s3://landing/cluster=c1")
    msg = str(err.value)
    assert msg.startswith(f"list s3://landing/cluster=c1: cannot reach endpoint http://127.0.0.1:{port}: ")
    assert msg.endswith(". Set AWS_ENDPOINT_URL to a running S3 endpoint (e.g. http://127.0.0.1:PORT for Ceph RGW "
                        "or moto; unset for AWS) and AWS_REGION")
    assert "very-secret-value" not in msg


def test_malformed_endpoint_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "127.0.0.1:9000")
    with pytest.raises(storage.S3EndpointError) as err:
        storage.read_bytes("s3://landing/x")
    assert str(err.value) == ("AWS_ENDPOINT_URL='127.0.0.1:9000' is not a URL: set it to http(s)://host:port "
                              "(or unset it for AWS)")


def test_prefetch_reads_nothing_back_leaves_no_descriptor_open_and_skips_what_it_cannot_open(
        tmp_path: pathlib.Path) -> None:
    import os

    (tmp_path / "a").write_bytes(b"x" * 100_000)
    (tmp_path / "d").mkdir()
    before = len(os.listdir("/proc/self/fd"))
    storage.prefetch([str(tmp_path / "a"), str(tmp_path / "missing"), str(tmp_path / "d"), "s3://bucket/key"] * 50)
    assert len(os.listdir("/proc/self/fd")) == before
    assert storage.read_bytes(str(tmp_path / "a")) == b"x" * 100_000
