"""xc-repo source end to end against a real HTTP server on 127.0.0.1: download, checksum, resume.

The server runs in a thread for one test only; it answers `Range: bytes=N-` with 206 and Content-Range
(honouring If-Range), and records every Range header it receives.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from raexmc.data.sources import build_dataset, fetch_archive
from raexmc.errors import ChecksumError, SourceError, UnsafeArchiveError
from tests.helpers import make_lf_folder


def lf_tiny_zip(folder: Path, extra: dict[str, str] | None = None) -> bytes:
    """The tiny LF dataset (tests/helpers.py) as the Extreme Classification Repository ships an archive, padded
    so that "the first half" is a meaningful partial download, plus `extra` members (name -> text)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(folder.iterdir()):
            archive.write(path, f"LF-Tiny/{path.name}")
        archive.writestr("LF-Tiny/README.txt", "tiny LF dataset for tests\n" * 400)
        for name, text in (extra or {}).items():
            archive.writestr(name, text)
    return buffer.getvalue()


class _RangeHandler(BaseHTTPRequestHandler):
    """Serves `server.files` (path -> bytes), `Range: bytes=N-` as 206 unless If-Range names another ETag."""

    def log_message(self, format, *args):  # keep pytest output quiet
        pass

    def do_GET(self):
        requested = self.headers.get("Range")
        self.server.requests.append((self.path, requested))
        body = self.server.files.get(self.path)
        if body is None:
            return self.send_error(404, "Not Found")
        etag = f'"{hashlib.sha256(body).hexdigest()[:16]}"'
        resume = requested and self.headers.get("If-Range") in (None, etag)
        start = int(requested.removeprefix("bytes=").partition("-")[0]) if resume else 0
        self.send_response(206 if resume else 200)
        headers = {"Content-Type": "application/zip", "Content-Length": str(len(body) - start),
                   "Accept-Ranges": "bytes", "ETag": etag}
        if resume:
            headers["Content-Range"] = f"bytes {start}-{len(body) - 1}/{len(body)}"
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client that needed the headers only
            self.wfile.write(body[start:])


@pytest.fixture
def lf(tmp_path) -> Path:
    return make_lf_folder(tmp_path / "lf")


@pytest.fixture
def archive(lf) -> bytes:
    return lf_tiny_zip(lf)


@pytest.fixture
def server(archive):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _RangeHandler)
    httpd.daemon_threads, httpd.files, httpd.requests = True, {"/tiny.zip": archive}, []
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RAEXMC_CACHE", str(tmp_path / "cache"))
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    return tmp_path / "cache" / "xc-repo"


def spec(sha256: str | None) -> dict:
    return {"source": "xc-repo", "archive_id": "tiny.zip", "sha256": sha256}


def test_build_dataset_from_xc_repo(server, cache, tmp_path, lf, archive):
    """The dataset is the one the same files give as a local folder (test_layouts.py checks that one by hand);
    source.json says where it came from; a second build reuses the verified cached archive, off the network."""
    sha256 = hashlib.sha256(archive).hexdigest()
    stats = build_dataset("LF-Tiny", spec(sha256), tmp_path / "xc", server.url)
    assert stats == build_dataset("LF-Tiny", {"source": "local", "path": str(lf)}, tmp_path / "local", "")
    for path in (tmp_path / "local").iterdir():
        if path.name != "source.json":
            assert (tmp_path / "xc" / path.name).read_bytes() == path.read_bytes(), path.name
    source = json.loads((tmp_path / "xc" / "source.json").read_text())
    assert (source["source"], source["url"], source["sha256"], source["layout"]) == (
        "xc-repo", server.url + "tiny.zip", sha256, "xc-lf")
    assert [(p.name, p.read_bytes()) for p in cache.iterdir()] == [("LF-Tiny.zip", archive)]  # no partial file
    assert server.requests == [("/tiny.zip", None)]
    build_dataset("LF-Tiny", spec(sha256), tmp_path / "again", server.url)
    assert len(server.requests) == 1
    assert (tmp_path / "again" / "Y_train.npz").read_bytes() == (tmp_path / "xc" / "Y_train.npz").read_bytes()


def test_a_bad_cached_archive_or_a_wrong_pinned_sha256_is_removed_and_fetched_again(server, cache, tmp_path, archive):
    out, wrong, right = tmp_path / "data" / "LF-Tiny", "0" * 64, hashlib.sha256(archive).hexdigest()
    cache.mkdir(parents=True)
    (cache / "LF-Tiny.zip").write_bytes(archive[:-10] + b"corrupted!")
    with pytest.raises(ChecksumError):
        build_dataset("LF-Tiny", spec(right), tmp_path / "out", server.url)
    assert not (cache / "LF-Tiny.zip").exists()
    assert server.requests == []  # a cached file is checked, not re-downloaded blindly
    with pytest.raises(ChecksumError) as info:
        build_dataset("LF-Tiny", spec(wrong), out, server.url)
    assert wrong in str(info.value) and right in str(info.value) and "LF-Tiny.zip" in str(info.value)
    assert not out.exists() and (not out.parent.exists() or list(out.parent.iterdir()) == [])
    assert list(cache.iterdir()) == [] and len(server.requests) == 1  # neither the bad archive nor a partial file
    build_dataset("LF-Tiny", spec(right), out, server.url)  # the next run downloads again and succeeds
    assert (out / "stats.json").is_file() and len(server.requests) == 2
    assert (cache / "LF-Tiny.zip").read_bytes() == archive


def test_unsafe_archive_is_not_kept_in_the_cache(server, cache, tmp_path, lf, archive):
    server.files["/tiny.zip"] = lf_tiny_zip(lf, {"../escaped.txt": "pwned\n"})
    out = tmp_path / "data" / "LF-Tiny"
    with pytest.raises(UnsafeArchiveError, match="LF-Tiny.zip:../escaped.txt"):
        build_dataset("LF-Tiny", spec(None), out, server.url)
    assert list(cache.iterdir()) == [], "a rejected archive must not stay cached"
    assert not out.exists() and not (tmp_path / "data" / "escaped.txt").exists()
    server.files["/tiny.zip"] = archive  # the next run downloads the good archive instead of reusing the bad one
    build_dataset("LF-Tiny", spec(None), out, server.url)
    assert (out / "stats.json").is_file() and server.requests == [("/tiny.zip", None), ("/tiny.zip", None)]


def test_resume_sends_a_range_request_from_the_partial_file(server, cache, tmp_path, archive):
    target = tmp_path / "downloads" / "tiny.zip"
    target.parent.mkdir(parents=True)
    half = len(archive) // 2
    # gdown's partial file: NamedTemporaryFile(prefix=<basename>, suffix=".part", dir=<target's folder>),
    # i.e. <basename> + 8 random characters + ".part"; a resumed run picks up the single such file.
    partial = target.parent / f"{target.name}abcd1234.part"
    partial.write_bytes(archive[:half])
    assert fetch_archive(server.url + "tiny.zip", target, hashlib.sha256(archive).hexdigest()) == (
        hashlib.sha256(archive).hexdigest())
    assert target.read_bytes() == archive
    assert [r for _, r in server.requests if r is not None] == [f"bytes={half}-"]
    assert [p.name for p in target.parent.iterdir()] == ["tiny.zip"]


def test_404_raises_source_error_naming_the_url(server, cache, tmp_path):
    out = tmp_path / "data" / "LF-Missing"
    with pytest.raises(SourceError) as info:
        build_dataset("LF-Missing", {"source": "xc-repo", "archive_id": "missing.zip", "sha256": None}, out, server.url)
    assert server.url + "missing.zip" in str(info.value) and "404" in str(info.value)
    assert not out.exists() and list(cache.iterdir()) == []
    assert server.requests == [("/missing.zip", None)]
