"""The scale benchmark's corpus: one-chunk paragraphs with planted copies, a changed version, a reduced model.

A deterministic synthetic corpus (sentences of Python's own documentation,
`pydoc_data.topics`, reshuffled into paragraphs by a seeded RNG), 8
paragraphs per document, 500 documents per `.jsonl` file. Each paragraph
is cut to fit one chunk (between half and all of --chunk_size tokens, so
the recursive chunker neither merges nor splits it): N paragraphs are N
chunks, and paragraph i is chunk `doc{i // 8:07d}#{i % 8}`. A known
fraction of paragraphs are planted copies of an earlier paragraph: exact
copies (`exact_rate`) and near copies with one word replaced
(`near_rate`); the plan names them, so the filters' catch can be counted.
`change_corpus` writes the corpus of the next night: a seeded fraction of
the documents with one paragraph replaced by a new one.
"""

import json
import os
import random
import re

PARAGRAPHS_PER_DOC = 8
DOCS_PER_FILE = 500
REDUCED_SEQ_LENGTH = 64


def source_sentences() -> list[str]:
    """Distinct sentences (5+ words) of the pydoc topics, in a fixed order."""
    import pydoc_data.topics

    seen, out = set(), []
    for name in sorted(pydoc_data.topics.topics):
        for para in re.split(r'\n\s*\n', pydoc_data.topics.topics[name]):
            for s in re.split(r'(?<=[.!?])\s+', ' '.join(para.split())):
                if len(s.split()) >= 5 and s not in seen:
                    seen.add(s)
                    out.append(s)
    return out


def near_copy(paragraph: str, rng: random.Random) -> str:
    """The paragraph with one word in its middle half replaced: estimated Jaccard ~0.8+."""
    words = paragraph.split(' ')
    i = rng.randrange(len(words) // 4, max(len(words) // 4 + 1, 3 * len(words) // 4))
    words[i] = 'zebra' if words[i] != 'zebra' else 'quokka'
    return ' '.join(words)


def chunk_id(paragraph: int) -> str:
    """The chunk_id the build gives paragraph `paragraph` (its document's id, its index there)."""
    return f'{doc_id(paragraph // PARAGRAPHS_PER_DOC)}#{paragraph % PARAGRAPHS_PER_DOC}'


def doc_id(document: int) -> str:
    return f'doc{document:07d}'


class Paragraphs:
    """Draws new paragraphs of one chunk each: two or more sentences, never one drawn before.

    Args:
      tokenizer: The embedding model's tokenizer (paragraph sizes are in its tokens).
      chunk_size: The build's --chunk_size.
      rng: The seeded generator that decides everything drawn.
    """

    def __init__(self, tokenizer, chunk_size: int, rng: random.Random):
        sentences = source_sentences()
        lengths = [len(ids) for ids in tokenizer(sentences, add_special_tokens=False)['input_ids']]
        self._tokenizer = tokenizer
        self._rng = rng
        # Spaces make no tokens: a paragraph's tokens are about the sum of its sentences'.
        # Over half the size, two paragraphs never fit in one chunk.
        self.low, self.high = chunk_size // 2 + 1, chunk_size - 4
        # Short enough that every paragraph joins two or more: a one-sentence paragraph
        # would repeat by chance (2,728 sentences), and only planted copies may repeat.
        self._usable = [(s, n) for s, n in zip(sentences, lengths) if n <= self.high // 2]
        self.seen: set[str] = set()

    def fits(self, paragraph: str) -> bool:
        return self.low <= len(self._tokenizer(paragraph, add_special_tokens=False)['input_ids']) <= self.high

    def attempt(self) -> str | None:
        """One try at a new paragraph: it, added to `seen`, or None where it came out drawn before or off size."""
        picked, total = [], 0
        while total < self.low:
            s, n = self._usable[self._rng.randrange(len(self._usable))]
            if total + n <= self.high:
                picked.append(s)
                total += n
            else:
                break
        paragraph = ' '.join(picked)
        if paragraph in self.seen or not self.fits(paragraph):
            return None
        self.seen.add(paragraph)
        return paragraph

    def draw(self) -> str:
        """A paragraph never drawn (nor `seen`) before; it is added to `seen`."""
        while True:
            paragraph = self.attempt()
            if paragraph is not None:
                return paragraph


def generate_corpus(
    directory: str, n_chunks: int, tokenizer, chunk_size: int, seed: int,
    exact_rate: float, near_rate: float,
) -> dict:
    """Writes `n_chunks` paragraphs as .jsonl documents under `directory`; returns the plan.

    Every paragraph holds between chunk_size/2 + 1 and chunk_size - 4 tokens, so
    each is one chunk of the recursive chunker, and joins two or more
    sentences; paragraphs are distinct but for the planted copies. Same
    arguments, same bytes.

    Returns:
      `{'paragraphs', 'documents', 'planted': {'exact': n, 'near': n}, 'exact_ids', 'near_ids'}`, the last two
      the chunk ids of the planted copies.
    """
    rng = random.Random(seed)
    draw = Paragraphs(tokenizer, chunk_size, rng)
    paragraphs: list[str] = []
    planted: dict[str, list[str]] = {'exact': [], 'near': []}
    while len(paragraphs) < n_chunks:
        roll = rng.random()
        if paragraphs and roll < exact_rate:
            planted['exact'].append(chunk_id(len(paragraphs)))
            paragraphs.append(paragraphs[rng.randrange(len(paragraphs))])
            continue
        if paragraphs and roll < exact_rate + near_rate:
            copy = near_copy(paragraphs[rng.randrange(len(paragraphs))], rng)
            if copy not in draw.seen and draw.fits(copy):
                draw.seen.add(copy)
                planted['near'].append(chunk_id(len(paragraphs)))
                paragraphs.append(copy)
            continue
        paragraph = draw.attempt()  # a failed try draws its roll again, as the corpora measured were made
        if paragraph is not None:
            paragraphs.append(paragraph)
    docs = [paragraphs[i : i + PARAGRAPHS_PER_DOC] for i in range(0, len(paragraphs), PARAGRAPHS_PER_DOC)]
    write_documents(directory, ['\n\n'.join(paras) for paras in docs])
    return {'paragraphs': len(paragraphs), 'documents': len(docs),
            'planted': {kind: len(ids) for kind, ids in planted.items()},
            'exact_ids': planted['exact'], 'near_ids': planted['near']}


def write_documents(directory: str, texts: list[str]) -> None:
    """Writes documents `doc{i}` as .jsonl files of DOCS_PER_FILE each."""
    os.makedirs(directory, exist_ok=True)
    for f in range(0, len(texts), DOCS_PER_FILE):
        with open(os.path.join(directory, f'part-{f // DOCS_PER_FILE:05d}.jsonl'), 'w') as out:
            for d, text in enumerate(texts[f : f + DOCS_PER_FILE], start=f):
                out.write(json.dumps({'id': doc_id(d), 'text': text}) + '\n')


def read_documents(directory: str) -> list[str]:
    """The texts of a corpus `write_documents` wrote, in document order."""
    texts = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            texts.extend(json.loads(line)['text'] for line in f)
    return texts


def change_corpus(source: str, directory: str, fraction: float, tokenizer, chunk_size: int, seed: int) -> dict:
    """Writes the next night's corpus: `fraction` of `source`'s documents with one paragraph replaced by a new one.

    The documents and the paragraph in each are drawn by a seeded RNG; the
    new paragraphs are distinct from every paragraph of `source`. Each
    changed document then has one new chunk (the others keep their text,
    ids and offsets up to the replaced one; those after it move).

    Returns:
      `{'documents': changed documents, 'doc_ids': their ids}`.
    """
    texts = read_documents(source)
    rng = random.Random(seed)
    draw = Paragraphs(tokenizer, chunk_size, rng)
    for text in texts:
        draw.seen.update(text.split('\n\n'))
    changed = sorted(rng.sample(range(len(texts)), max(1, round(fraction * len(texts)))))
    for d in changed:
        paragraphs = texts[d].split('\n\n')
        paragraphs[rng.randrange(len(paragraphs))] = draw.draw()
        texts[d] = '\n\n'.join(paragraphs)
    write_documents(directory, texts)
    return {'documents': len(changed), 'doc_ids': [doc_id(d) for d in changed]}


def reduced_model(directory: str) -> str:
    """Saves all-MiniLM-L6-v2 cut to its first layer and max_seq_length 64; returns the path (made once)."""
    path = os.path.join(directory, 'minilm-1layer-64')
    if os.path.isdir(path):
        return path
    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model

    model = load_embedding_model(DEFAULT_EMBEDDING_MODEL)
    bert = model[0].auto_model
    bert.encoder.layer = bert.encoder.layer[:1]
    bert.config.num_hidden_layers = 1
    model.max_seq_length = REDUCED_SEQ_LENGTH
    model.save(path)
    return path
