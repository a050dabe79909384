"""IR datasets in the BEIR layout: corpus.jsonl, queries.jsonl, qrels/<split>.tsv.

The layout of Thakur et al. (2021), read as their `GenericDataLoader` reads
it, so any public BEIR set runs unchanged: `corpus.jsonl` lines
`{"_id", "title", "text"}`, `queries.jsonl` lines `{"_id", "text"}`,
`qrels/<split>.tsv` with a header and `query-id, corpus-id, score` rows.
One optional extension: a fourth column `group` names the fact a relevant
passage carries, so several passages holding the same fact form one group
(a multi-hop question has one group per hop). BEIR's loader reads the
first three columns only, so such a file stays a BEIR file.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from pathlib import Path
from typing import Iterable, Optional

from transforms.types import Document

CORPUS = 'corpus.jsonl'
QUERIES = 'queries.jsonl'
QRELS_DIR = 'qrels'
QRELS_HEADER = ('query-id', 'corpus-id', 'score')
GROUP_COLUMN = 'group'
# BEIR's separator of title and text (its SentenceBERT model, its BM25 fields).
TITLE_SEPARATOR = ' '
# A relevance grade beyond this is no grade (TREC's run 0-4): its row is rejected, never scored.
MAX_SCORE = 1_000_000
# Characters of an id shown in a rejected row's reason.
SHOWN_ID_CHARS = 80
# A score as BEIR's files write it: ASCII digits, a sign at most (not `1_0`, `1.0` or `١`).
_SCORE = re.compile(r'[+-]?[0-9]+')


@dataclasses.dataclass(frozen=True)
class Query:
    """A query with its judged passages.

    Attributes:
      query_id: Its `_id`.
      text: The query.
      relevant: Graded relevance (> 0) per corpus id.
      groups: The relevant passages grouped by the fact they carry (empty
        without a `group` column).
    """

    query_id: str
    text: str
    relevant: dict
    groups: tuple = ()

    @property
    def sample_key(self) -> str:
        """What `datasets.sample_questions` hashes."""
        return self.query_id


@dataclasses.dataclass(frozen=True)
class IRDataset:
    """A BEIR set read for evaluation.

    Attributes:
      documents: One per corpus line, in file order; text is title and text
        joined as BEIR joins them.
      queries: The queries of the split with at least one relevant passage, in file order.
      rejected: `(where, reason)` of each qrels row or query left out, e.g. a
        qrels row naming a passage the corpus lacks.
    """

    documents: list
    queries: list
    rejected: list


def _json_lines(path: Path, fields: tuple[str, ...]) -> Iterable[tuple[str, dict]]:
    """`(file:line, object)` of each non-blank line; a line that is not an object with `fields` is an error."""
    if not path.is_file():
        raise ValueError(f'{path} not found (a BEIR folder holds {CORPUS}, {QUERIES} and {QRELS_DIR}/SPLIT.tsv)')
    seen = set()
    with path.open('rb') as f:
        for number, raw in enumerate(f, start=1):
            where = f'{path}:{number}'
            try:
                line = raw.decode('utf-8')
            except UnicodeDecodeError as e:
                raise ValueError(f'{where}: not UTF-8 ({e.reason} at byte {e.start})') from None
            if number == 1:
                line = line.removeprefix('\ufeff')  # a BOM some editors write
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError as e:
                raise ValueError(f'{where}: not JSON ({e})') from None
            except RecursionError:
                raise ValueError(f'{where}: not JSON (nested too deeply to read)') from None
            if not isinstance(item, dict):
                raise ValueError(f'{where}: not a JSON object')
            for field in fields:
                if not isinstance(item.get(field, ''), str) or (field == '_id' and not item.get(field)):
                    raise ValueError(f'{where}: {field!r} must be a non-empty string' if field == '_id'
                                     else f'{where}: {field!r} must be a string')
            if item['_id'] in seen:
                raise ValueError(f'{where}: _id {item["_id"]!r} repeats an earlier line')
            seen.add(item['_id'])
            yield where, item


def shown(text: str) -> str:
    """An id as a reason shows it: quoted, and cut to `SHOWN_ID_CHARS` (a field may be megabytes)."""
    return repr(text) if len(text) <= SHOWN_ID_CHARS else repr(text[:SHOWN_ID_CHARS]) + f'... ({len(text):,} characters)'


def read_qrels(path: Path, rejected: Optional[list] = None) -> Iterable[tuple[str, str, str, int, Optional[str]]]:
    """`(file:line, query id, corpus id, score, group or None)` per row of a qrels file.

    A row is one line, split at tabs: no quoting, so a `"` in a field is a
    character of it and never joins lines; no field is too long to read.
    A BOM before the header is skipped.

    Args:
      path: The qrels file.
      rejected: Where a row whose score is out of range (`MAX_SCORE`) goes
        as `(file:line, reason)`; without it such a row is an error.

    Raises:
      ValueError: naming file and line, for a missing file, a header that
        is not BEIR's, a short row or a score that is not an integer.
    """
    if not path.is_file():
        raise ValueError(f'{path} not found (a BEIR folder holds {QRELS_DIR}/SPLIT.tsv)')
    try:
        text = path.read_bytes().decode('utf-8-sig')
    except UnicodeDecodeError as e:
        raise ValueError(f'{path}: not UTF-8 ({e.reason} at byte {e.start})') from None
    rows = [line.removesuffix('\r').split('\t') for line in text.split('\n')]
    if text.endswith('\n'):
        rows.pop()
    if not rows or tuple(c.strip() for c in rows[0][:3]) != QRELS_HEADER:
        raise ValueError(f'{path}:1: the header must start with {chr(9).join(QRELS_HEADER)}')
    grouped = len(rows[0]) > 3 and rows[0][3].strip() == GROUP_COLUMN
    for number, row in enumerate(rows[1:], start=2):
        where = f'{path}:{number}'
        if not any(c.strip() for c in row):
            continue
        if len(row) < 3 or not row[0] or not row[1]:
            raise ValueError(f'{where}: a row is query-id, corpus-id, score; got {shown(chr(9).join(row))}')
        cell = row[2].strip()
        if not _SCORE.fullmatch(cell):
            raise ValueError(f'{where}: score {shown(row[2])} is not an integer')
        score = int(cell) if len(cell) <= len(str(MAX_SCORE)) + 1 else None  # no int of 4,300 digits
        if score is None or abs(score) > MAX_SCORE:
            reason = f'score {shown(cell)} is out of range (a grade of -{MAX_SCORE:,} to {MAX_SCORE:,})'
            if rejected is None:
                raise ValueError(f'{where}: {reason}')
            rejected.append((where, reason))
            continue
        group = row[3] if grouped and len(row) > 3 and row[3] else None
        yield where, row[0], row[1], score, group


def read_beir(folder: str | Path, split: str = 'test') -> IRDataset:
    """Reads a BEIR folder: its corpus, and the queries judged in `qrels/<split>.tsv`.

    A qrels row with score <= 0 judges a passage not relevant; a row naming
    a query or passage absent from the files, and a query with empty text,
    are rejected (counted in `IRDataset.rejected`), never scored.

    Raises:
      ValueError: naming file and line, for a file that is missing or not
        in the layout, a repeated `_id`, a passage without text.
    """
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f'{root} is not a BEIR folder ({CORPUS}, {QUERIES}, {QRELS_DIR}/{split}.tsv)')
    documents = []
    for where, item in _json_lines(root / CORPUS, ('_id', 'title', 'text')):
        text = TITLE_SEPARATOR.join(p for p in (item.get('title', '').strip(), item.get('text', '').strip()) if p)
        if not text:
            raise ValueError(f'{where}: passage {item["_id"]!r} has no title and no text')
        documents.append(Document(doc_id=item['_id'], text=text, path=str(root / CORPUS), position=len(documents) + 1))
    known = {d.doc_id for d in documents}
    texts = {item['_id']: item.get('text', '') for _, item in _json_lines(root / QUERIES, ('_id', 'text'))}
    rejected = []
    relevant: dict[str, dict[str, int]] = collections.defaultdict(dict)
    groups: dict[str, dict[str, set]] = collections.defaultdict(lambda: collections.defaultdict(set))
    for where, query_id, corpus_id, score, group in read_qrels(root / QRELS_DIR / f'{split}.tsv', rejected):
        if query_id not in texts:
            rejected.append((where, f'query {shown(query_id)} is not in {QUERIES}'))
        elif corpus_id not in known:
            rejected.append((where, f'passage {shown(corpus_id)} is not in {CORPUS}'))
        elif score > 0:
            relevant[query_id][corpus_id] = score
            if group is not None:
                groups[query_id][group].add(corpus_id)
    queries = []
    for query_id, text in texts.items():
        if query_id not in relevant:
            continue
        if not text.strip():
            rejected.append((f'{root / QUERIES}', f'query {shown(query_id)} has no text'))
            continue
        queries.append(Query(query_id, text, dict(relevant[query_id]),
                             tuple(frozenset(g) for _, g in sorted(groups[query_id].items()))))
    return IRDataset(documents, queries, rejected)


def write_beir(folder: str | Path, corpus: Iterable[tuple[str, str, str]], queries: Iterable[tuple[str, str]],
               qrels: Iterable[tuple[str, str, int, Optional[str]]], split: str = 'test') -> None:
    """Writes a BEIR folder (the converters of `benchmarks/studies/beir_sets.py` and the tests use it).

    Args:
      folder: Created if missing.
      corpus: `(id, title, text)` per passage.
      queries: `(id, text)` per query.
      qrels: `(query id, corpus id, score, group or None)`; the `group`
        column is written when any row has one.
      split: The qrels file's name.
    """
    root = Path(folder)
    (root / QRELS_DIR).mkdir(parents=True, exist_ok=True)
    with (root / CORPUS).open('w', encoding='utf-8') as f:
        for doc_id, title, text in corpus:
            f.write(json.dumps({'_id': doc_id, 'title': title, 'text': text}, ensure_ascii=False) + '\n')
    with (root / QUERIES).open('w', encoding='utf-8') as f:
        for query_id, text in queries:
            f.write(json.dumps({'_id': query_id, 'text': text}, ensure_ascii=False) + '\n')
    rows = list(qrels)
    grouped = any(r[3] is not None for r in rows)
    with (root / QRELS_DIR / f'{split}.tsv').open('w', encoding='utf-8', newline='') as f:
        f.write('\t'.join(QRELS_HEADER + ((GROUP_COLUMN,) if grouped else ())) + '\n')
        for query_id, corpus_id, score, group in rows:
            cells = (query_id, corpus_id, str(score)) + ((group or '',) if grouped else ())
            if any(c != c.translate({9: None, 10: None, 13: None}) for c in cells):
                raise ValueError(f'qrels row {cells!r}: a tab or line break cannot be written in a qrels field')
            f.write('\t'.join(cells) + '\n')
