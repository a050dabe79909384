"""Fuzz: a seeded corpus of every kind of malformed record and random bytes builds, and accounts for all.

The test computes the accounting itself from the bytes it wrote: every record
(a non-blank .jsonl line, a Parquet row, a whole file otherwise, every path the
listing meets) must come out exactly once, either indexed (documents/) or
rejected with a reason and a detail (rejected/).
"""

import datetime
import decimal
import json
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import cli
from transforms.chunking.chunkers import max_chunk_chars

SEED = 15
CHUNK_SIZE = 64
WORDS = ('pasta orbit saturn ring water planet sauce salt boil rocket moon cheese tomato basil '
         'engine launch comet garlic olive bread').split()


def sentence(rng):
    return ' '.join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))).capitalize() + '.'


def jsonl_line(rng, i, kind):
    """One .jsonl line (bytes, no newline) of the given kind."""
    good = {'id': f'{kind}-{i}', 'text': sentence(rng)}
    if kind == 'good':
        return json.dumps({**good, 'metadata': {'n': i, 'updated_at': '2024-05-01'}}).encode()
    if kind == 'deep':
        depth = rng.choice([2_000, 100_000])
        return ('{"id": "d", "text": "x", "metadata": ' + '[' * depth + ']' * depth + '}').encode()
    if kind == 'deep_metadata':
        return ('{"id": "dm%d", "text": "fine", "metadata": ' % i + '{"a":' * 300 + '1' + '}' * 301).encode()
    if kind == 'surrogate_text':
        return b'{"id": "st%d", "text": "bad \\ud800 text"}' % i
    if kind == 'surrogate_id':
        return b'{"id": "bad\\udc00%d", "text": "fine text"}' % i
    if kind == 'surrogate_metadata':
        return b'{"id": "sm%d", "text": "fine text", "metadata": {"\\ud801k": "\\udfff"}}' % i
    if kind == 'huge_int':
        return b'{"id": "hi%d", "text": "fine", "metadata": {"n": %s}}' % (i, b'7' * rng.randint(4301, 9000))
    if kind == 'nan':
        return b'{"id": "nan%d", "text": "Not a number in metadata.", "metadata": {"x": NaN, "y": -Infinity}}' % i
    if kind == 'separators':
        text = f'one\u2028two\u2029three\u0085four {sentence(rng)}'
        return json.dumps({'id': f'sep{i}', 'text': text}, ensure_ascii=False).encode()
    if kind == 'bad_byte':
        return b'{"id": "bb%d", "text": "caf\xe9 \xff"}' % i
    if kind == 'invisible':
        text = ''.join(rng.choice('\u200b\u200c\u202e\u2066\x00\x07\u0301\ufeff \t') for _ in range(rng.randint(1, 40)))
        return json.dumps({'id': f'inv{i}', 'text': text}).encode()
    if kind == 'big_metadata':
        return json.dumps({**good, 'metadata': {'blob': 'm' * 5000}}).encode()
    if kind == 'recency':
        return b'{"id": "rec%d", "text": "fine", "metadata": {"updated_at": 1%s}}' % (i, b'0' * 400)
    if kind == 'missing_id':
        return json.dumps({'text': sentence(rng)}).encode()
    if kind == 'missing_text':
        return json.dumps({'id': f'mt{i}', 'text': rng.choice([None, 3, ['a']])}).encode()
    if kind == 'not_object':
        return rng.choice([b'[1, 2]', b'"text"', b'42', b'null'])
    if kind == 'not_json':
        return rng.choice([b'{oops', b'{"id": "x", "text": }', b'{"id": 1e999999999999999999'])
    if kind == 'random':
        data = rng.randbytes(rng.randint(1, 200)).replace(b'\n', b'')
        return data if data.strip() else b'garbage'
    if kind == 'duplicate':
        return json.dumps({'id': 'good-0', 'text': 'Claims an id already used.'}).encode()
    if kind == 'long_word':
        return json.dumps({'id': f'lw{i}', 'text': 'Start ' + 'z' * rng.randint(5_000, 50_000)}).encode()
    if kind == 'bad_metadata':
        return json.dumps({**good, 'metadata': rng.choice([[1], 'not json {', 7])}).encode()
    raise AssertionError(kind)


KINDS = ['good'] * 12 + ['deep', 'deep_metadata', 'surrogate_text', 'surrogate_id', 'surrogate_metadata',
                         'huge_int', 'nan', 'separators', 'bad_byte', 'invisible', 'big_metadata', 'recency',
                         'missing_id', 'missing_text', 'not_object', 'not_json', 'random', 'random',
                         'duplicate', 'bad_metadata']


def make_corpus(root, rng):
    """Writes the corpus; returns the sources the build must account for, and the number of paths."""
    expected, paths = [], 0

    def jsonl(path, lines, bom=False):
        nonlocal paths
        data = b'\n'.join(lines) + b'\n'
        path.write_bytes((b'\xef\xbb\xbf' if bom else b'') + data)
        paths += 1
        expected.extend(f'{path}:{n}' for n, line in enumerate(data.split(b'\n'), 1) if line.strip())

    def whole(path, data=None):
        nonlocal paths
        if data is not None:
            path.write_bytes(data)
        paths += 1
        expected.append(str(path))

    root.mkdir()
    for f in range(3):
        kinds = [rng.choice(KINDS) for _ in range(100)]
        if f == 0:
            kinds[:3] = ['good', 'long_word', 'deep']  # the duplicate's target and the costly kinds, once
        lines = [jsonl_line(rng, f * 1000 + i, kind) for i, kind in enumerate(kinds)]
        lines.insert(rng.randint(0, len(lines)), b'   ')  # a blank line holds no record
        jsonl(root / f'part{f}.jsonl', lines, bom=f == 1)
    jsonl(root / 'noise.jsonl', [rng.randbytes(300).replace(b'\n', b'') + b'x' for _ in range(5)])

    when = datetime.datetime(2024, 5, 1, tzinfo=datetime.timezone.utc)
    meta_type = pa.struct([('ts', pa.timestamp('us', tz='UTC')), ('raw', pa.binary()), ('price', pa.decimal128(8, 2))])
    n = 30
    table = pa.table({
        'id': [None if i % 7 == 3 else f'pq{i}' for i in range(n)],
        'text': [None if i % 5 == 4 else sentence(rng) for i in range(n)],
        'metadata': pa.array([{'ts': when, 'raw': rng.randbytes(4), 'price': decimal.Decimal(f'{i}.25')}
                              for i in range(n)], type=meta_type),
    })
    pq.write_table(table, root / 'rows.parquet')
    paths += 1
    expected.extend(f'{root / "rows.parquet"}:{i}' for i in range(1, n + 1))

    for i in range(4):
        whole(root / f'random{i}.txt', rng.randbytes(rng.randint(1, 400)))
    whole(root / 'random.md', rng.randbytes(100))
    whole(root / 'random.parquet', rng.randbytes(500))
    whole(root / 'blob.bin', rng.randbytes(50))
    whole(root / 'empty.txt', b'')
    whole(root / 'blank.jsonl', b'\n   \n\t\n')  # no record, yet one row: no_records
    pq.write_table(table.slice(0, 0), root / 'zero-rows.parquet')
    whole(root / 'zero-rows.parquet')
    whole(root / 'invisible.md', '\u200b\u202e\x00\ufeff'.encode())
    whole(root / 'good.md', ('# Title\n\n' + sentence(rng)).encode())
    os.mkfifo(root / 'pipe.txt')
    whole(root / 'pipe.txt')
    os.symlink(root / 'nowhere.txt', root / 'dangling.txt')
    whole(root / 'dangling.txt')
    os.symlink(root / 'loop-b.txt', root / 'loop-a.txt')
    os.symlink(root / 'loop-a.txt', root / 'loop-b.txt')
    whole(root / 'loop-a.txt')
    whole(root / 'loop-b.txt')
    elsewhere = root.parent / 'elsewhere'
    elsewhere.mkdir()
    (elsewhere / 'linked.txt').write_text(sentence(rng))
    os.symlink(elsewhere, root / 'linked')
    whole(root / 'linked' / 'linked.txt')
    os.symlink(root, root / 'linked-again')  # a loop back to the root
    whole(root / 'linked-again')
    return expected, paths


def test_fuzzed_corpus_builds_and_every_record_is_accounted_for(tmp_path):
    expected, n_paths = make_corpus(tmp_path / 'corpus', random.Random(SEED))
    assert len(expected) > 300
    out = tmp_path / 'out'
    code = cli.main(['build', '--input', str(tmp_path / 'corpus'), '--output', str(out), '--filter', 'none',
                     '--chunk_size', str(CHUNK_SIZE), '--max_metadata_bytes', '2000'])
    assert code == 0

    documents = pq.read_table(out / 'documents').to_pylist()
    rejected = pq.read_table(out / 'rejected').to_pylist()
    seen = [d['source'] for d in documents] + [r['source'] for r in rejected]
    assert sorted(seen) == sorted(expected)  # each record exactly once
    assert all(r['reason'] and r['detail'] for r in rejected)

    manifest = json.loads((out / 'manifest.json').read_text())
    counts = manifest['counts']
    assert counts['files'] == n_paths
    assert counts['documents_indexed'] == len(documents) and counts['rejected'] == len(rejected)
    chunks = pq.read_table(out / 'chunks').to_pylist()
    assert {c['doc_id'] for c in chunks} == {d['doc_id'] for d in documents}  # every indexed document has chunks
    assert all(c['n_tokens'] > 0 and len(c['text']) <= max_chunk_chars(CHUNK_SIZE) for c in chunks)
    for c in chunks:
        if c['metadata'] is not None:
            json.loads(c['metadata'], parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
            assert len(c['metadata'].encode()) <= 2000
    reasons = set(counts['rejected_by_reason'])
    assert {'invalid_record', 'invalid_unicode', 'invalid_metadata', 'metadata_too_large', 'not_utf8',
            'empty_text', 'missing_id', 'missing_text', 'duplicate_doc_id', 'special_file', 'broken_link',
            'repeated_directory', 'unsupported_type', 'unreadable', 'no_records'} <= reasons
