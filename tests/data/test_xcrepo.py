"""xc-repo source end to end against a real HTTP server on 127.0.0.1: download, checksum, resume.

The server runs in a thread for one test only; it answers `Range: bytes=N-` with 206 and
Content-Range (honouring If-Range), and records every Range header it receives.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.data.xcrepo import fetch_archive
from raexmc.errors import ChecksumError, SourceError, UnsafeArchiveError

LABELS = [{"uid": "L0", "title": "python", "content": "a language"},
          {"uid": "L1", "title": "unix", "content": "an operating system"},
          {"uid": "L2", "title": "linux", "content": "a kernel"},
          {"uid": "L3", "title": "gcc", "content": "a compiler"}]
TRAIN = [{"uid": "T0", "title": "cpython", "content": "reference python", "target_ind": [0, 3],
          "target_rel": [1.0, 0.5]},
         {"uid": "T1", "title": "bsd", "content": "a unix", "target_ind": [1], "target_rel": [1.0]},
         {"uid": "T2", "title": "debian", "content": "a distribution", "target_ind": [1, 2], "target_rel": [1.0, 1.0]}]
TEST = [{"uid": "S0", "title": "pypy", "content": "another python", "target_ind": [0], "target_rel": [1.0]},
        {"uid": "S1", "title": "minix", "content": "a small unix", "target_ind": [1, 2], "target_rel": [1.0, 1.0]}]
FILTER_TEST = "0 3\n1 1\n"


def _jsonl_gz(records: list[dict]) -> bytes:
    return gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode("utf-8"), mtime=0)


def lf_tiny_zip(extra: dict[str, str] | None = None) -> bytes:
    """A small LF-layout archive as the Extreme Classification Repository ships them, plus `extra`
    members (name -> text)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("LF-Tiny/trn.json.gz", _jsonl_gz(TRAIN))
        archive.writestr("LF-Tiny/tst.json.gz", _jsonl_gz(TEST))
        archive.writestr("LF-Tiny/lbl.json.gz", _jsonl_gz(LABELS))
        archive.writestr("LF-Tiny/filter_labels_test.txt", FILTER_TEST)
        # padding so "the first half" is a meaningful partial download
        archive.writestr("LF-Tiny/README.txt", "tiny LF dataset for tests\n" * 400)
        for name, text in (extra or {}).items():
            archive.writestr(name, text)
    return buffer.getvalue()


ARCHIVE = lf_tiny_zip()
ARCHIVE_SHA256 = hashlib.sha256(ARCHIVE).hexdigest()
ETAG = f'"{ARCHIVE_SHA256[:16]}"'


class _RangeHandler(BaseHTTPRequestHandler):
    """Serves `server.files` (path -> bytes); supports `Range: bytes=N-` / `bytes=N-M`."""

    def log_message(self, format, *args):  # keep pytest output quiet
        pass

    def do_GET(self):
        server = self.server
        server.requests.append((self.path, self.headers.get("Range")))
        body = server.files.get(self.path)
        if body is None:
            self.send_error(404, "Not Found")
            return
        status, start, end = 200, 0, len(body) - 1
        requested = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if requested and (if_range is None or if_range == ETAG):
            spec = requested.strip()
            if not spec.startswith("bytes=") or "," in spec:
                self.send_error(416)
                return
            first, _, last = spec[len("bytes="):].partition("-")
            start = int(first)
            end = min(int(last), len(body) - 1) if last else len(body) - 1
            if start >= len(body) or start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        chunk = body[start:end + 1]
        self.send_response(status)
        self.send_header("Content-Type", "application/zip")
        self.send_header("Content-Length", str(len(chunk)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", ETAG)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
        self.end_headers()
        try:
            self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client closed a response it only needed the headers of


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _RangeHandler)
    httpd.daemon_threads = True
    httpd.files = {"/tiny.zip": ARCHIVE}
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def base_url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("RAEXMC_CACHE", str(folder))
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    return folder


def spec(sha256: str | None = ARCHIVE_SHA256) -> dict:
    return {"source": "xc-repo", "archive_id": "tiny.zip", "sha256": sha256}


def test_build_dataset_from_xc_repo(server, base_url, cache, tmp_path):
    out = tmp_path / "data" / "LF-Tiny"
    stats = build_dataset("LF-Tiny", spec(), out, base_url)

    saved = json.loads((out / "stats.json").read_text())
    assert saved == stats
    assert (stats["N_train"], stats["N_test"], stats["L"]) == (3, 2, 4)
    assert stats["avg_labels_per_input"] == pytest.approx(5 / 3, abs=1e-4)
    assert stats["test_labels_unseen_in_train"] == 0

    dataset = Dataset(out)
    Y = dataset.label_matrix("train")
    assert Y.shape == (3, 4) and Y.nnz == 5
    assert Y.toarray().tolist() == [[1.0, 0.0, 0.0, 0.5], [0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0]]
    assert dataset.label_matrix("test").toarray().tolist() == [[1, 0, 0, 0], [0, 1, 1, 0]]
    filt = dataset.filter_matrix("test")
    assert filt.shape == (2, 4)
    rows, cols = filt.nonzero()
    assert sorted(zip(rows.tolist(), cols.tolist())) == [(0, 3), (1, 1)]
    assert dataset.filter_matrix("train").nnz == 0
    assert [t.uid for t in dataset.texts("labels")] == [r["uid"] for r in LABELS]
    first = next(dataset.texts("train"))
    assert (first.uid, first.title, first.content) == ("T0", "cpython", "reference python")

    source = json.loads((out / "source.json").read_text())
    assert source["source"] == "xc-repo"
    assert source["url"] == base_url + "tiny.zip"
    assert source["sha256"] == ARCHIVE_SHA256
    assert source["layout"] == "xc-lf"

    cached = cache / "xc-repo" / "LF-Tiny.zip"
    assert cached.read_bytes() == ARCHIVE
    assert [p.name for p in cached.parent.iterdir()] == ["LF-Tiny.zip"]  # no partial file left
    assert server.requests == [("/tiny.zip", None)]

    # a second build reuses the verified cached archive without touching the network
    build_dataset("LF-Tiny", spec(), tmp_path / "again", base_url)
    assert len(server.requests) == 1
    assert np.array_equal(Dataset(tmp_path / "again").label_matrix("train").toarray(), Y.toarray())


def test_wrong_pinned_sha256_raises_and_removes_the_download(server, base_url, cache, tmp_path):
    out = tmp_path / "data" / "LF-Tiny"
    wrong = "0" * 64
    with pytest.raises(ChecksumError) as info:
        build_dataset("LF-Tiny", spec(wrong), out, base_url)
    assert wrong in str(info.value) and ARCHIVE_SHA256 in str(info.value)
    assert "LF-Tiny.zip" in str(info.value)
    assert not out.exists()
    assert not out.parent.exists() or list(out.parent.iterdir()) == []
    assert list((cache / "xc-repo").iterdir()) == []  # neither the bad archive nor a partial file
    assert len(server.requests) == 1

    # the next run downloads again and succeeds with the right checksum
    build_dataset("LF-Tiny", spec(), out, base_url)
    assert (out / "stats.json").is_file()
    assert len(server.requests) == 2


def test_bad_cached_archive_is_removed_then_fetched_again(server, base_url, cache, tmp_path):
    cached = cache / "xc-repo" / "LF-Tiny.zip"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(ARCHIVE[:-10] + b"corrupted!")
    with pytest.raises(ChecksumError):
        build_dataset("LF-Tiny", spec(), tmp_path / "out", base_url)
    assert not cached.exists()
    assert server.requests == []  # a cached file is checked, not re-downloaded blindly
    build_dataset("LF-Tiny", spec(), tmp_path / "out", base_url)
    assert cached.read_bytes() == ARCHIVE


def test_unsafe_archive_is_not_kept_in_the_cache(server, base_url, cache, tmp_path):
    server.files["/tiny.zip"] = lf_tiny_zip({"../escaped.txt": "pwned\n"})
    out = tmp_path / "data" / "LF-Tiny"
    with pytest.raises(UnsafeArchiveError, match="LF-Tiny.zip:../escaped.txt"):
        build_dataset("LF-Tiny", spec(None), out, base_url)
    assert list((cache / "xc-repo").iterdir()) == [], "a rejected archive must not stay cached"
    assert not out.exists() and not (tmp_path / "data" / "escaped.txt").exists()

    # the next run downloads again (the server now has the good archive) instead of reusing the bad one
    server.files["/tiny.zip"] = ARCHIVE
    build_dataset("LF-Tiny", spec(None), out, base_url)
    assert (out / "stats.json").is_file()
    assert server.requests == [("/tiny.zip", None), ("/tiny.zip", None)]


def test_resume_sends_a_range_request_from_the_partial_file(server, base_url, cache, tmp_path):
    target = tmp_path / "downloads" / "tiny.zip"
    target.parent.mkdir(parents=True)
    half = len(ARCHIVE) // 2
    # gdown's partial file: NamedTemporaryFile(prefix=<basename>, suffix=".part", dir=<target's folder>),
    # i.e. <basename> + 8 random characters + ".part"; a resumed run picks up the single such file.
    partial = target.parent / f"{target.name}abcd1234.part"
    partial.write_bytes(ARCHIVE[:half])

    archive = fetch_archive(base_url + "tiny.zip", target, ARCHIVE_SHA256)

    assert archive.path == target and archive.url == base_url + "tiny.zip"
    assert archive.sha256 == ARCHIVE_SHA256
    assert hashlib.sha256(target.read_bytes()).hexdigest() == ARCHIVE_SHA256
    ranges = [r for _, r in server.requests if r is not None]
    assert ranges == [f"bytes={half}-"]
    assert not partial.exists()
    assert [p.name for p in target.parent.iterdir()] == ["tiny.zip"]


def test_404_raises_source_error_naming_the_url(server, base_url, cache, tmp_path):
    out = tmp_path / "data" / "LF-Missing"
    missing = {"source": "xc-repo", "archive_id": "missing.zip", "sha256": ARCHIVE_SHA256}
    with pytest.raises(SourceError) as info:
        build_dataset("LF-Missing", missing, out, base_url)
    assert base_url + "missing.zip" in str(info.value)
    assert "404" in str(info.value)
    assert not out.exists()
    assert not (cache / "xc-repo" / "LF-Missing.zip").exists()
    assert list((cache / "xc-repo").iterdir()) == []
    assert server.requests == [("/missing.zip", None)]
