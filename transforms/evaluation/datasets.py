"""Evaluation datasets as Documents and Questions: Chroma's general set, SQuAD v1.1, BEIR-layout IR sets."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path
from typing import Sequence

from transforms.evaluation import beir
from transforms.hashing import stable_hash
from transforms.types import Document

Span = tuple[int, int]

CHROMA = 'chroma'
SQUAD = 'squad'
BEIR = 'beir'
DATASETS = (CHROMA, SQUAD, BEIR)
CHROMA_QUESTIONS = 'questions_df.csv'
CHROMA_COLUMNS = ('question', 'references', 'corpus_id')
PARAGRAPH_SEPARATOR = '\n\n'


@dataclasses.dataclass(frozen=True)
class Question:
    """A question with the passages that answer it.

    Attributes:
      question: The question text.
      doc_id: The document holding the answer (Chroma's `corpus_id`, a
        SQuAD article title).
      references: `(start, end)` character ranges of the reference passages
        in that document's text, end exclusive.
    """

    question: str
    doc_id: str
    references: tuple[Span, ...]

    @property
    def sample_key(self) -> str:
        """What `sample_questions` hashes."""
        return f'{self.doc_id}\x00{self.question}'


@dataclasses.dataclass(frozen=True)
class Rejected:
    """A question (or qrels row) left out of the scoring, and why.

    Attributes:
      where: `file:row` (a CSV row, counted from the header as 1), or a
        SQuAD file's `article N paragraph M question Q`.
      reason: A few words, e.g. `reference [30, 10) is reversed`.
    """

    where: str
    reason: str


def read_text_file(path: Path) -> str:
    """A UTF-8 text file's text; a file that is not UTF-8 is a ValueError naming it."""
    try:
        return path.read_text(encoding='utf-8')
    except UnicodeDecodeError as e:
        raise ValueError(f'{path}: not UTF-8 ({e.reason} at byte {e.start})') from None


def span_problem(span: Span, text: str) -> str | None:
    """Why a reference `(start, end)` cannot be scored against `text`, or None.

    An empty, reversed, negative or out-of-range span would give a recall
    that means nothing (a negative start slices from the end), so its
    question is rejected instead.
    """
    start, end = span
    if start < 0 or end < 0:
        return f'reference [{start}, {end}) is negative'
    if start > end:
        return f'reference [{start}, {end}) is reversed'
    if start == end:
        return f'reference [{start}, {end}) is empty'
    if end > len(text):
        return f'reference [{start}, {end}) ends past the document ({len(text)} characters)'
    return None


def question_problem(question, spans: Sequence[Span], text: str) -> str | None:
    """Why a question cannot be scored (no text, no reference, a bad span), or None."""
    if not isinstance(question, str) or not question.strip():
        return 'the question is empty'
    if not spans:
        return 'no reference'
    return next((p for p in (span_problem(s, text) for s in spans) if p), None)


def read_chroma(folder: str | Path) -> tuple[list[Document], list[Question], list[Rejected]]:
    """Reads the Chroma general evaluation set: `*.md` corpora and `questions_df.csv`.

    Each `.md` file is one document whose id is the file stem (the Chroma
    `corpus_id`); `questions_df.csv` has columns `question`, `references`
    (a JSON list of `{content, start_index, end_index}`) and `corpus_id`.

    Args:
      folder: The folder holding both.

    Returns:
      `(documents sorted by id, questions in file order, rejected rows)`: a
      row with an empty question or a reference span that is empty,
      reversed, negative or past its document is rejected, not scored.

    Raises:
      ValueError: naming the file (and row), if the folder, a corpus or the
        CSV is missing or not UTF-8, the CSV lacks a column, or a reference
        is malformed or does not match its corpus text.
    """
    root = Path(folder)
    csv_path = root / CHROMA_QUESTIONS
    if not root.is_dir() or not csv_path.is_file():
        raise ValueError(f'{root} is not a Chroma evaluation folder (needs *.md and {CHROMA_QUESTIONS})')
    documents = [
        Document(doc_id=p.stem, text=read_text_file(p), path=str(p))
        for p in sorted(root.glob('*.md'))
    ]
    texts = {d.doc_id: d.text for d in documents}
    questions, rejected = [], []
    reader = csv.DictReader(io.StringIO(read_text_file(csv_path), newline=''))
    missing = [c for c in CHROMA_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise ValueError(f'{csv_path}: no {", ".join(repr(c) for c in missing)} column '
                         f'(it has {list(reader.fieldnames or ())})')
    for row_number, row in enumerate(reader, start=2):
        where = f'{csv_path}:{row_number}'
        corpus_id = row.get('corpus_id')
        if corpus_id not in texts:
            raise ValueError(f'{where}: unknown corpus_id {corpus_id!r}; have {sorted(texts)}')
        try:
            references = json.loads(row['references'] or 'null')
            if not isinstance(references, list) or not all(isinstance(r, dict) for r in references):
                raise TypeError('not a JSON list of objects')
            spans = tuple((int(r['start_index']), int(r['end_index'])) for r in references)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f'{where}: bad references: {e}') from None
        text = texts[corpus_id]
        problem = question_problem(row['question'], spans, text)
        if problem:
            rejected.append(Rejected(where, problem))
            continue
        for (start, end), ref in zip(spans, references):
            if text[start:end] != ref.get('content', text[start:end]):
                raise ValueError(f'{where}: reference [{start}, {end}) does not match {corpus_id}')
        questions.append(Question(row['question'], corpus_id, spans))
    return documents, questions, rejected


def read_squad(path: str | Path) -> tuple[list[Document], list[Question], list[Rejected]]:
    """Reads SQuAD v1.1 JSON: one document per article, a question's reference is its paragraph.

    An article's text is its paragraphs' contexts joined by a blank line, so
    the recursive chunker's first separator falls between paragraphs.
    Repeated titles get `#2`, `#3`... so document ids stay unique.

    Args:
      path: A SQuAD-format JSON file (`data[].title`, `data[].paragraphs[]`
        with `context` and `qas[].question`).

    Returns:
      `(documents in file order, questions in file order, rejected)`: a qa
      without a question (or an empty one) and a question of an empty
      paragraph are rejected, not scored.

    Raises:
      ValueError: naming the file and article (and paragraph), if the file
        is missing, not UTF-8 or not in SQuAD format (a context that is not
        a string, `qas` that is not a list).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f'SQuAD file {path} not found')
    try:
        articles = json.loads(read_text_file(path))['data']
        if not isinstance(articles, list):
            raise TypeError('data is not a list')
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f'{path} is not SQuAD JSON: {e}') from None
    documents, questions, rejected = [], [], []
    seen: dict[str, int] = {}
    for number, article in enumerate(articles):
        where = f'{path}: article {number}'
        try:
            title = str(article['title'])
            paragraphs = article['paragraphs']
            if not isinstance(paragraphs, list) or not all(isinstance(p, dict) for p in paragraphs):
                raise TypeError('paragraphs is not a list of objects')
            contexts = [p['context'] for p in paragraphs]
        except (KeyError, TypeError) as e:
            raise ValueError(f'{where} is not SQuAD format: {e}') from None
        for i, (paragraph, context) in enumerate(zip(paragraphs, contexts)):
            if not isinstance(context, str):
                raise ValueError(f'{where} paragraph {i}: context is {type(context).__name__}, not a string')
            if not isinstance(paragraph.get('qas', []), list):
                raise ValueError(f'{where} paragraph {i}: qas is {json.dumps(paragraph["qas"])[:40]}, not a list')
        seen[title] = seen.get(title, 0) + 1
        doc_id = title if seen[title] == 1 else f'{title}#{seen[title]}'
        text = PARAGRAPH_SEPARATOR.join(contexts)
        offset = 0
        for i, (paragraph, context) in enumerate(zip(paragraphs, contexts)):
            span = (offset, offset + len(context))
            for j, qa in enumerate(paragraph.get('qas', [])):
                question = qa.get('question') if isinstance(qa, dict) else None
                problem = question_problem(question, (span,), text)
                if problem:
                    rejected.append(Rejected(f'{where} paragraph {i} question {j}', problem))
                else:
                    questions.append(Question(question, doc_id, (span,)))
            offset = span[1] + len(PARAGRAPH_SEPARATOR)
        documents.append(Document(doc_id=doc_id, text=text, path=str(path), position=number + 1))
    return documents, questions, rejected


def read_dataset(name: str, path: str | Path, split: str = 'test') -> tuple[list[Document], list, list[Rejected]]:
    """Reads `chroma` (a folder), `squad` (a JSON file) or `beir` (a folder; its `split`).

    Returns:
      `(documents, questions, rejected)`; BEIR's questions are `beir.Query`s.

    Raises:
      ValueError: For an unknown dataset name or unreadable data.
    """
    if name == CHROMA:
        return read_chroma(path)
    if name == SQUAD:
        return read_squad(path)
    if name == BEIR:
        found = beir.read_beir(path, split)
        return found.documents, found.queries, [Rejected(w, r) for w, r in found.rejected]
    raise ValueError(f'unknown dataset {name!r}; choose one of {list(DATASETS)}')


def sample_questions(questions: Sequence, n: int | None, seed: int = 0) -> list:
    """A deterministic sample of `n` questions, kept in their original order.

    Questions are ranked by a seeded blake2b hash of their `sample_key`
    (document id and text; a BEIR query's id), so the sample is the same on every machine and a larger `n` only
    adds questions.

    Args:
      questions: All questions.
      n: Questions wanted; None (or more than there are) keeps all.
      seed: Hash key.

    Raises:
      ValueError: If `n` is not positive.
    """
    if n is None or n >= len(questions):
        return list(questions)
    if n <= 0:
        raise ValueError(f'max_questions must be > 0, got {n}')
    key = str(seed).encode('utf-8')

    def rank(i: int) -> int:
        return stable_hash(questions[i].sample_key, key=key)

    chosen = sorted(sorted(range(len(questions)), key=lambda i: (rank(i), i))[:n])
    return [questions[i] for i in chosen]
