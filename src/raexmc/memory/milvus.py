"""The memory on Milvus: Milvus Lite in the process, or a server (`index.uri`) past one machine. Every process
searches a private copy of a Lite folder, so stage outputs and the DVC cache are only read; a server's index folder
holds only the reference (a collection named by the keys' sha256 and graph settings, so equal builds share it).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import positive_int
from ..errors import PARAMS_FILE, ConfigError, DataError, first_line
from .search import Index, empty_result, key_blocks, keys_to_index, sort_rows

LITE_FOLDER = "milvus.db"  # pymilvus starts Milvus Lite for a URI ending in .db
FIELD, HASH_PROPERTY = "key", "raexmc.sha256"
INSERT_BATCH, QUERY_BATCH, MAX_TOP_K = 5_000, 256, 16_384  # a request's rows, queries (Milvus: 16,384), depth
# pymilvus pings every 10 s, which Lite's server answers with GOAWAY (too many pings): Lite's clients ping rarely
LITE_GRPC = {"grpc.keepalive_time_ms": 3_600_000, "grpc.keepalive_permit_without_calls": False}
# Keys asked for beyond k: Milvus returns any of the keys tied at the k-th similarity, every backend the smallest ids.
TIE_MARGIN = 16
# Connecting is tried 3 times, 10 s each; a request may take 10 minutes (the client's own default is the connection's).
CONNECT_TRIES, CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S = 3, 10.0, 600.0


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def keys_hash(keys: np.ndarray) -> str:
    """sha256 of the keys' shape and float32 bytes, a block of rows at a time (no copy of a memmap)."""
    digest = hashlib.sha256(repr(keys.shape).encode())
    for _, block in key_blocks(keys, INSERT_BATCH, "", progress=False):
        digest.update(np.ascontiguousarray(block, dtype=np.float32).tobytes())
    return digest.hexdigest()


def reason(exc: BaseException) -> str:
    """What a Milvus failure says: a MilvusException's message (its str wraps it in its code and type)."""
    return getattr(exc, "message", None) or first_line(exc)


def copy_lite(source: Path, target: Path) -> Path:
    """Copy a Lite folder (not its LOCK) a file at a time: a full disk is then one file's OSError (copytree's
    shutil.Error keeps neither errno nor path)."""
    target.mkdir(parents=True)
    for path in sorted(source.rglob("*")):
        copied = target / path.relative_to(source)
        if path.is_dir():
            copied.mkdir()
        elif path.name != "LOCK":
            try:
                shutil.copy2(path, copied)
            except OSError as exc:  # named by the file it reads from
                raise OSError(exc.errno, exc.strerror, str(copied)) from None
    return target


def connect(uri: str, token_env: str = "", where: Any = PARAMS_FILE, key: str | None = "index.uri",
            shown: str | None = None):
    """A MilvusClient for `uri`, tried CONNECT_TRIES times; else one DataError naming `where`:`key`."""
    from pymilvus import MilvusClient

    for library in ("pymilvus", "milvus_lite"):  # their retries and Lite's failed requests log tracebacks; ours is
        logging.getLogger(library).setLevel(logging.CRITICAL)  # one line
    if token_env and token_env not in os.environ:
        raise ConfigError(f"the Milvus token's environment variable {token_env} is not set", where, "token_env")
    token = os.environ[token_env] if token_env else ""
    tries = CONNECT_TRIES if is_server(uri) else 1
    for attempt in range(tries):
        try:
            return MilvusClient(uri=uri, token=token, timeout=CONNECT_TIMEOUT_S,
                                **({} if is_server(uri) else {"grpc_options": LITE_GRPC}))
        except Exception as exc:  # pymilvus raises its own and grpc's types
            if attempt == tries - 1:
                raise DataError(f"cannot open Milvus at {shown or uri} ({tries} tries, {CONNECT_TIMEOUT_S:g} s each): "
                                f"{reason(exc)}", where, key) from None
            time.sleep(1.0)


class MilvusIndex(Index):
    """One Milvus collection of keys (ids 0..n-1, inner product); `lite`: the Lite folder, None for a server."""

    backend = "milvus"

    def __init__(self, meta: dict[str, Any], lite: Path | None = None, ef_search: int = 300, client: Any = None):
        self.meta, self.lite, self.ef_search, self._client = dict(meta), lite, int(ef_search), client

    count = property(lambda self: int(self.meta["count"]))
    dim = property(lambda self: int(self.meta["dim"]))
    query_block = QUERY_BATCH

    @property
    def where(self) -> str:
        return f"{self.meta['uri'] or self.lite}: collection {self.meta['collection']}"

    def __repr__(self) -> str:
        return f"MilvusIndex({self.where}, count={self.count}, dim={self.dim}, ef_search={self.ef_search})"

    def client(self):
        """The open client: for Lite, over a private copy of its folder (removed with this index)."""
        if self._client is None:
            if self.lite is None:
                self._client = connect(self.meta["uri"], self.meta["token_env"], self.source, "uri")
            else:
                scratch = Path(tempfile.mkdtemp(prefix="raexmc-milvus-"))
                weakref.finalize(self, release_lite, str(scratch / LITE_FOLDER), scratch)  # a copy cut short too
                copy = copy_lite(self.lite, scratch / LITE_FOLDER)
                self._client = connect(str(copy), where=self.lite, key=None, shown="this Milvus Lite folder")
            self.check(self._client)
        return self._client

    def check(self, client) -> None:
        """The collection is there and holds this index's keys: their count, dimension and content hash."""
        name = self.meta["collection"]
        try:
            if not client.has_collection(name):
                raise DataError(f"collection {name} not found at {self.meta['uri'] or self.lite}: rebuild the index",
                                self.source, "collection")
            about = client.describe_collection(name)
            count = int(client.get_collection_stats(name)["row_count"])
        except DataError:
            raise
        except Exception as exc:
            raise DataError(f"cannot read {self.where} ({reason(exc)})", self.source, "uri") from None
        dim = next((int(f["params"]["dim"]) for f in about["fields"] if f["name"] == FIELD), None)
        held = (count, dim, about.get("properties", {}).get(HASH_PROPERTY))
        if held != (self.count, self.dim, self.meta["sha256"]):
            raise DataError(f"collection {name} holds {count} keys of dimension {dim} (sha256 {held[2]}), the index "
                            f"was built on {self.count} of {self.dim} (sha256 {self.meta['sha256']}): rebuild it",
                            self.source, "collection")
        client.load_collection(name, timeout=REQUEST_TIMEOUT_S)

    def search(self, queries: np.ndarray, k: int, progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if positive_int(k, "k") > MAX_TOP_K:
            raise ConfigError(f"Milvus returns at most {MAX_TOP_K} keys a query, asked for {k}")
        self.client()
        return super().search(queries, k, progress)

    def _block(self, queries, width, k):
        limit = min(k + TIE_MARGIN, self.count, MAX_TOP_K)
        ids, sims = empty_result(len(queries), limit)
        params = {"metric_type": "IP", "params": {"ef": max(self.ef_search, limit)}}
        try:
            found = self.client().search(self.meta["collection"], data=queries, limit=limit, anns_field=FIELD,
                                         output_fields=[], search_params=params, timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:
            raise DataError(f"search failed at {self.where} ({reason(exc)})", self.source, "uri") from None
        for row, hits in enumerate(found):
            ids[row, :len(hits)] = [hit["id"] for hit in hits]
            sims[row, :len(hits)] = [hit["distance"] for hit in hits]
        ids, sims = sort_rows(ids, sims)
        return ids[:, :width], sims[:, :width]


def release_lite(path: str, scratch: Path | None = None) -> None:
    """Stop the in-process Lite server of `path` (and remove `scratch`)."""
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(path)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def build_milvus(keys: np.ndarray, uri: str = LITE_FOLDER, token_env: str = "", index_type: str = "HNSW",
                 M: int = 64, ef_construction: int = 500, ef_search: int = 300, progress: bool = True,
                 progress_label: str = "keys") -> MilvusIndex:
    """Every key in a collection at `uri` (a server) or a new Lite folder; a server's equal build is reused."""
    server = is_server(uri)
    if not server and uri != LITE_FOLDER:
        raise ConfigError(f"must be {LITE_FOLDER} (Milvus Lite, in the index folder) or http(s)://host:port, got "
                          f"{uri!r}", PARAMS_FILE, "index.uri")
    keys = keys_to_index(keys)
    sha = keys_hash(keys)
    graph = {"M": int(M), "efConstruction": int(ef_construction)} if index_type == "HNSW" else {}
    name = "raexmc_" + hashlib.sha256(f"{sha}{index_type}{graph}".encode()).hexdigest()[:24]
    meta = {"backend": "milvus", "dim": keys.shape[1], "count": len(keys), "M": int(M),
            "ef_construction": int(ef_construction), "index_type": index_type, "collection": name, "sha256": sha,
            "uri": uri if server else "", "token_env": token_env if server else ""}
    scratch = None if server else Path(tempfile.mkdtemp(prefix="raexmc-milvus-build-")) / LITE_FOLDER
    client = connect(uri if server else str(scratch), token_env)
    index = MilvusIndex(meta, ef_search=ef_search, client=client)
    if server and client.has_collection(name):
        try:
            index.check(client)
            return index
        except DataError:
            client.drop_collection(name)  # a build cut short: its keys again
    try:
        fill(client, name, keys, index_type, graph, sha, progress, progress_label)
    except Exception as exc:  # pymilvus raises its own and grpc's types, and the in-process Lite server its OSErrors
        if not server:
            client.close()
            release_lite(str(scratch), scratch.parent)
        raise DataError(f"building collection {name} at {uri if server else 'Milvus Lite (in TMPDIR)'} failed: "
                        f"{reason(exc)}", PARAMS_FILE, "index.uri") from None
    if not server:  # closed and kept as the folder a save copies; searched through a copy like a loaded one
        client.close()
        release_lite(str(scratch))
        index = MilvusIndex(meta, lite=scratch, ef_search=ef_search)
        weakref.finalize(index, shutil.rmtree, scratch.parent, True)
    return index


def fill(client, name: str, keys: np.ndarray, index_type: str, graph: dict, sha: str, progress: bool,
         progress_label: str) -> None:
    """Create collection `name` (its index by inner product, the keys' hash a property), insert `keys`, load it."""
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field(FIELD, DataType.FLOAT_VECTOR, dim=keys.shape[1])
    index_params = client.prepare_index_params()
    # as one JSON "params" pair, the wire form pymilvus 2 sent: Milvus Lite 3.2 reads the graph's settings only there
    # (pymilvus 3 sends them as pairs of their own, which Lite ignores for its defaults, M 16 and efConstruction 200)
    index_params.add_index(field_name=FIELD, index_type=index_type, metric_type="IP", params={"params": graph})
    client.create_collection(name, schema=schema, index_params=index_params, properties={HASH_PROPERTY: sha})
    for start, block in key_blocks(keys, INSERT_BATCH, f"milvus insert ({progress_label})", progress):
        client.insert(name, [{"id": start + i, FIELD: row} for i, row in enumerate(block)], timeout=REQUEST_TIMEOUT_S)
    client.flush(name, timeout=REQUEST_TIMEOUT_S)
    client.load_collection(name, timeout=REQUEST_TIMEOUT_S)


def open_milvus(folder: Path, meta: dict[str, Any], ef_search: int) -> MilvusIndex:
    """The index saved in `folder`, its collection opened and checked (count, dimension, content hash)."""
    lite = None if is_server(meta["uri"]) else folder / LITE_FOLDER
    if lite is not None and not lite.is_dir():
        raise DataError(f"{LITE_FOLDER} is missing", folder)
    index = MilvusIndex(meta, lite=lite, ef_search=ef_search)
    index.source = folder
    index.client()
    return index
