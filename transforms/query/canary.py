"""The canary question set of the publish gates: questions retrieval must keep answering.

A canary file is JSONL, one question a line:

    {"question": "How long does sourdough rise?", "doc_id": "guides/sourdough.md"}
    {"question": "What pressure for road tyres?", "text": "between 80 and 100 psi"}

A question is found when one of the top k chunks comes from `doc_id`, or
holds `text` (compared NFKC-casefolded, whitespace collapsed). A passage
deduplicated into another document's chunk is found by its `text`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Optional, Sequence

from transforms.output.gates import CanaryResult
from transforms.query.retriever import Hit, Retriever
from transforms.text import normalize_text

# Missed questions named in the verdict.
MISSED_LISTED = 5


@dataclasses.dataclass(frozen=True)
class CanaryQuestion:
    question: str
    doc_id: Optional[str] = None
    text: Optional[str] = None


def parse_questions(lines: Sequence[str], path: str) -> list[CanaryQuestion]:
    """The questions of a canary file's lines.

    Raises:
      ValueError: Naming the file and line of a line that is no JSON object
        with a non-empty `question` and a `doc_id` or `text`, or when there is no question.
    """
    questions = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f'--gate_canary {path}:{number}: not JSON ({e.msg})') from None
        if not isinstance(record, dict):
            raise ValueError(f'--gate_canary {path}:{number}: a line must be a JSON object')
        question, doc_id, text = record.get('question'), record.get('doc_id'), record.get('text')
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f'--gate_canary {path}:{number}: needs a non-empty "question"')
        if not any(isinstance(v, str) and v.strip() for v in (doc_id, text)):
            raise ValueError(f'--gate_canary {path}:{number}: needs an expected "doc_id" or "text"')
        questions.append(CanaryQuestion(question, doc_id or None, text or None))
    if not questions:
        raise ValueError(f'--gate_canary {path} holds no question')
    return questions


def load_questions(path: str) -> list[CanaryQuestion]:
    """Reads a local canary file (see `parse_questions`)."""
    try:
        with open(path, encoding='utf-8') as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f'cannot read --gate_canary {path}: {e}') from None
    return parse_questions(lines, path)


def is_found(question: CanaryQuestion, hits: Sequence[Hit]) -> bool:
    """Whether a hit comes from the expected document or holds the expected text."""
    wanted = normalize_text(question.text) if question.text else None
    return any((question.doc_id is not None and h.doc_id == question.doc_id)
               or (wanted is not None and wanted in normalize_text(h.text)) for h in hits)


def run_canary(index: str, questions: Sequence[CanaryQuestion], k: int, model=None) -> CanaryResult:
    """Asks every question of the canary on the index at `index`, as a query would.

    Args:
      index: A run directory (or a plain index).
      questions: The canary.
      k: Chunks retrieved per question.
      model: The embedding model, when the caller has it loaded.
    """
    retriever = Retriever(index, model=model)
    missed = [q.question for q in questions if not is_found(q, retriever.search(q.question, k=k).hits)]
    return CanaryResult(found=len(questions) - len(missed), total=len(questions),
                        missed=tuple(missed[:MISSED_LISTED]))
