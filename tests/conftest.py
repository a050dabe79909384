"""Shared fixtures: the real embedding model, a small input corpus on disk, the sample corpus built once."""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import ORBITS, PASTA, REPO
from transforms.features import kernels
from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model

# Before any test can run a torch kernel: every in-process model then
# computes with the kernels a build pins (see transforms/features/kernels.py).
kernels.pin(kernels.DEFAULT_MODE)


@pytest.fixture(autouse=True)
def private_cache_home(tmp_path, monkeypatch):
    """Keeps what jobs cache by default (the evaluation's features) out of the user's home."""
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg_cache'))


@pytest.fixture(scope='session')
def embedding_model():
    """The real all-MiniLM-L6-v2, loaded once for the whole session."""
    return load_embedding_model(DEFAULT_EMBEDDING_MODEL)


@pytest.fixture
def corpus_dir(tmp_path):
    """A folder with every input kind, good and bad; returns (path, expectations)."""
    root = tmp_path / 'corpus'
    (root / 'sub').mkdir(parents=True)
    (root / 'pasta.txt').write_text(PASTA * 20)
    (root / 'sub' / 'orbits.md').write_text('# Orbits\n\n' + ORBITS * 8)
    (root / 'latin1.txt').write_bytes('caf\xe9 au lait'.encode('latin-1'))
    (root / 'blank.md').write_text('  \n\n ')
    (root / 'slides.pdf').write_bytes(b'%PDF-1.4')
    records = [
        {'id': 'j1', 'text': 'Jupiter is the largest planet of the Solar System.', 'metadata': {'lang': 'en'}},
        {'id': 'j2', 'text': ''},
        {'text': 'no id here'},
        {'id': 'j3', 'text': 'Metadata must be an object.', 'metadata': [1, 2]},
        {'id': 'pasta.txt', 'text': 'A second document claiming an id already used by pasta.txt.'},
        {'id': 7, 'text': 'Integer ids are accepted and kept as strings.'},
    ]
    lines = [json.dumps(r) for r in records] + ['{not json']
    (root / 'records.jsonl').write_text('\n'.join(lines) + '\n')
    pq.write_table(
        pa.table({'id': ['p1', 'p2'], 'text': ['Saturn has rings of ice and rock.', None]}),
        root / 'rows.parquet',
    )
    expected = {
        'documents': {'pasta.txt', 'sub/orbits.md', 'j1', '7', 'p1'},
        'rejected': {
            'latin1.txt': 'not_utf8',
            'blank.md': 'empty_text',
            'slides.pdf': 'pdf_corrupt',  # a PDF header and nothing else
            'records.jsonl:2': 'empty_text',
            'records.jsonl:3': 'missing_id',
            'records.jsonl:4': 'invalid_metadata',
            'records.jsonl:5': 'duplicate_doc_id',
            'records.jsonl:7': 'invalid_record',
            'rows.parquet:2': 'missing_text',
        },
    }
    return root, expected


@pytest.fixture(scope='session')
def sample_root(tmp_path_factory):
    """sample_corpus/ copied and built once as `make demo` builds it, into a versioned root, run r1.

    Returns `(corpus copy, root)`. Read it only: a test that rebuilds or
    edits copies the root first (`shutil.copytree`).
    """
    from pipelines import build_index

    base = tmp_path_factory.mktemp('sample')
    corpus = base / 'corpus'
    shutil.copytree(REPO / 'sample_corpus', corpus)
    build_index.run(['--input', str(corpus), '--output', str(base / 'root'), '--versioned', '--run_id', 'r1',
                     '--chunk_size', '64'])
    return corpus, base / 'root'
