"""Evaluation datasets as Documents and Questions: Chroma's general set and SQuAD v1.1."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Sequence

from transforms.hashing import stable_hash
from transforms.types import Document

Span = tuple[int, int]

CHROMA = 'chroma'
SQUAD = 'squad'
DATASETS = (CHROMA, SQUAD)
CHROMA_QUESTIONS = 'questions_df.csv'
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


def read_chroma(folder: str | Path) -> tuple[list[Document], list[Question]]:
    """Reads the Chroma general evaluation set: `*.md` corpora and `questions_df.csv`.

    Each `.md` file is one document whose id is the file stem (the Chroma
    `corpus_id`); `questions_df.csv` has columns `question`, `references`
    (a JSON list of `{content, start_index, end_index}`) and `corpus_id`.

    Args:
      folder: The folder holding both.

    Returns:
      `(documents sorted by id, questions in file order)`.

    Raises:
      ValueError: If the folder, a corpus or the CSV is missing, or a
        reference does not match its corpus text.
    """
    root = Path(folder)
    csv_path = root / CHROMA_QUESTIONS
    if not root.is_dir() or not csv_path.is_file():
        raise ValueError(f'{root} is not a Chroma evaluation folder (needs *.md and {CHROMA_QUESTIONS})')
    documents = [
        Document(doc_id=p.stem, text=p.read_text(encoding='utf-8'), path=str(p))
        for p in sorted(root.glob('*.md'))
    ]
    texts = {d.doc_id: d.text for d in documents}
    questions = []
    with csv_path.open(newline='', encoding='utf-8') as f:
        for row_number, row in enumerate(csv.DictReader(f), start=2):
            where = f'{csv_path}:{row_number}'
            corpus_id = row.get('corpus_id')
            if corpus_id not in texts:
                raise ValueError(f'{where}: unknown corpus_id {corpus_id!r}; have {sorted(texts)}')
            try:
                references = json.loads(row['references'])
                spans = tuple((int(r['start_index']), int(r['end_index'])) for r in references)
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f'{where}: bad references: {e}') from None
            for (start, end), ref in zip(spans, references):
                if texts[corpus_id][start:end] != ref.get('content', texts[corpus_id][start:end]):
                    raise ValueError(f'{where}: reference [{start}, {end}) does not match {corpus_id}')
            questions.append(Question(row['question'], corpus_id, spans))
    return documents, questions


def read_squad(path: str | Path) -> tuple[list[Document], list[Question]]:
    """Reads SQuAD v1.1 JSON: one document per article, a question's reference is its paragraph.

    An article's text is its paragraphs' contexts joined by a blank line, so
    the recursive chunker's first separator falls between paragraphs.
    Repeated titles get `#2`, `#3`... so document ids stay unique.

    Args:
      path: A SQuAD-format JSON file (`data[].title`, `data[].paragraphs[]`
        with `context` and `qas[].question`).

    Returns:
      `(documents in file order, questions in file order)`.

    Raises:
      ValueError: If the file is missing or not in SQuAD format.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f'SQuAD file {path} not found')
    try:
        articles = json.loads(path.read_text(encoding='utf-8'))['data']
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f'{path} is not SQuAD JSON: {e}') from None
    documents, questions = [], []
    seen: dict[str, int] = {}
    for number, article in enumerate(articles):
        try:
            title = str(article['title'])
            paragraphs = article['paragraphs']
            contexts = [p['context'] for p in paragraphs]
        except (KeyError, TypeError) as e:
            raise ValueError(f'{path}: article {number} is not SQuAD format: {e}') from None
        seen[title] = seen.get(title, 0) + 1
        doc_id = title if seen[title] == 1 else f'{title}#{seen[title]}'
        offset = 0
        for paragraph, context in zip(paragraphs, contexts):
            span = (offset, offset + len(context))
            for qa in paragraph.get('qas', []):
                questions.append(Question(qa['question'], doc_id, (span,)))
            offset = span[1] + len(PARAGRAPH_SEPARATOR)
        documents.append(
            Document(doc_id=doc_id, text=PARAGRAPH_SEPARATOR.join(contexts), path=str(path), position=number + 1)
        )
    return documents, questions


def read_dataset(name: str, path: str | Path) -> tuple[list[Document], list[Question]]:
    """Reads `chroma` (a folder) or `squad` (a JSON file).

    Raises:
      ValueError: For an unknown dataset name or unreadable data.
    """
    if name == CHROMA:
        return read_chroma(path)
    if name == SQUAD:
        return read_squad(path)
    raise ValueError(f'unknown dataset {name!r}; choose one of {list(DATASETS)}')


def sample_questions(questions: Sequence[Question], n: int | None, seed: int = 0) -> list[Question]:
    """A deterministic sample of `n` questions, kept in their original order.

    Questions are ranked by a seeded blake2b hash of their document id and
    text, so the sample is the same on every machine and a larger `n` only
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
        q = questions[i]
        return stable_hash(f'{q.doc_id}\x00{q.question}', key=key)

    chosen = sorted(sorted(range(len(questions)), key=lambda i: (rank(i), i))[:n])
    return [questions[i] for i in chosen]
