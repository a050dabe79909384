"""Digests of the files a build wrote, held by its manifest, and the check that a run still holds them.

A build records the size and SHA-256 of every file of its data directories
(`DIGESTED_DIRS`) in `manifest.json` under `files`; `ragsieve query`, the
Retriever and `ragsieve sync` call `check_files` before they read a run, so
that a damaged `index.faiss`, a BM25 vocabulary edited or a `bm25/` copied
in from another build is refused with one line naming the file, never served.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
from typing import Optional


from transforms import storage
from transforms.output import tables

LOG = logging.getLogger('ragsieve.index')

# What a build writes and what readers read: every file under these, at any depth.
DIGESTED_DIRS = (tables.CHUNKS_DIR, tables.DROPPED_DIR, tables.REJECTED_DIR, tables.DOCUMENTS_DIR,
                 tables.INDEX_DIR, tables.BM25_DIR)
# The manifest's key: `{relative path: {'bytes': size, 'sha256': hex digest}}`.
FILES_KEY = 'files'
# The manifest's format number, written beside `files`: from DIGESTS_FROM on, a manifest without
# `files` was edited, not written by an older build. Manifests written before formats were
# numbered have none: without `files` they are read unverified, with a warning.
FORMAT_KEY = 'format'
FORMAT = 2
DIGESTS_FROM = 2
_BLOCK = 1 << 20


def _listed(directory: str) -> dict[str, int]:
    """`{relative path: size}` of every file under the data directories of a run, on any filesystem."""
    found = {}
    for name in DIGESTED_DIRS:
        for f in storage.list_files(posixpath.join(directory, name)):
            found[posixpath.relpath(f.path, directory)] = f.size
    return found


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with storage.open_read(path) as f:  # read in blocks: a run's index may not fit in memory twice
        for block in iter(lambda: f.read(_BLOCK), b''):
            digest.update(block)
    return digest.hexdigest()


def file_digests(directory: str) -> dict[str, dict]:
    """The manifest's `files`: size and SHA-256 of every file of the run's data directories."""
    return {path: {'bytes': size, 'sha256': _sha256(posixpath.join(directory, path))}
            for path, size in sorted(_listed(directory).items())}


def recorded(directory: str) -> dict:
    """What a build adds to its manifest for readers to check the run by: its format and its files' digests."""
    return {FORMAT_KEY: FORMAT, FILES_KEY: file_digests(directory)}


def check_files(directory: str, manifest: Optional[dict] = None) -> None:
    """Refuses a run whose data files are not those its build wrote, in one line naming the file.

    Sizes are compared first (a listing), then every file's SHA-256. A
    manifest of a format that records digests (`DIGESTS_FROM`) must hold
    them; `"files": null` no build ever wrote. Only a manifest written
    before formats were numbered and digests recorded, with neither, is
    read unverified, with a warning.

    Args:
      directory: The run's directory (local or any Beam filesystem).
      manifest: Its manifest, when already read; read from the directory otherwise.

    Raises:
      ValueError: Naming the first file that is missing, extra, or differs,
        or a manifest whose format or digests were edited away.
    """
    manifest_path = posixpath.join(directory, tables.MANIFEST_FILE)
    if manifest is None:
        def load(path):
            return json.loads(storage.read_bytes(path).decode('utf-8'))

        manifest = tables.load_file(manifest_path, load)
    if not isinstance(manifest, dict):
        raise ValueError(f'{manifest_path} is corrupt: it is not a JSON object')
    number = manifest.get(FORMAT_KEY)
    if number is not None and (type(number) is not int or number < 1):
        raise ValueError(f'{manifest_path} is corrupt: its "{FORMAT_KEY}" is {number!r}, not a format number')
    written = manifest.get(FILES_KEY)
    if written is None and (FILES_KEY in manifest or number is not None and number >= DIGESTS_FROM):
        rebuilt = 'the manifest was edited since it was built; rebuild the index'
        if FILES_KEY in manifest:
            raise ValueError(f'{manifest_path} is corrupt: its "{FILES_KEY}" is null, which no build writes; {rebuilt}')
        raise ValueError(f'{manifest_path} is format {number}, whose builds record the digests of their files, '
                         f'but it holds no "{FILES_KEY}"; {rebuilt}')
    if written is None:
        LOG.warning('%s holds no digests of its files (built before they were recorded): they are not verified',
                    manifest_path)
        return
    if not isinstance(written, dict) or not all(
            isinstance(v, dict) and isinstance(v.get('bytes'), int) and isinstance(v.get('sha256'), str)
            for v in written.values()):
        raise ValueError(f'{manifest_path} is corrupt: its "{FILES_KEY}" is not {{path: {{bytes, sha256}}}}')
    listed = _listed(directory)
    advice = 'the index was damaged or mixed with files of another build since it was built; rebuild it'
    for path in sorted(set(written) | set(listed)):
        full = posixpath.join(directory, path)
        if path not in listed:
            raise ValueError(f'{full} is missing: {tables.MANIFEST_FILE} lists it; {advice}')
        if path not in written:
            raise ValueError(f'{full} was not written by this build ({tables.MANIFEST_FILE} does not list it); {advice}')
        if listed[path] != written[path]['bytes']:
            raise ValueError(f'{full} is {listed[path]} bytes, its build wrote {written[path]["bytes"]}; {advice}')
    for path in sorted(written):
        if _sha256(posixpath.join(directory, path)) != written[path]['sha256']:
            raise ValueError(f'{posixpath.join(directory, path)} does not match the SHA-256 in '
                             f'{tables.MANIFEST_FILE}; {advice}')
