"""Nightly rebuild against a full build: time ratio and equality with a fresh build.

Copies the Chroma corpora into a work folder and builds them into a
versioned root (the full build: empty cache). Then rewrites about 1% of the
text (whole sentences, words reversed) at --edit_sites places spread over
every document in proportion to its size, adds one document, and rebuilds
into the same root (the rebuild: the cache holds yesterday's features).
How many chunks the edit touches depends on how scattered it is, which
--edit_sites sets: 10 places touch a few dozen chunks, 100 about one in eight. Finally builds the changed corpus
from scratch, without a cache, and checks that the rebuild's data files are
byte-identical to it. All builds run in this process with the build job's
defaults unless flags say otherwise; imports are paid before the first one.
Prints the wall times and the ratio rebuild / fresh build (target: <= 10%).
"""

import argparse
import glob
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTENCE = re.compile(r'[^.!?\n]{40,400}[.!?]')
DATA_DIRS = ['chunks', 'dropped', 'rejected', 'documents', 'index', 'bm25']


def edit_document(text: str, budget: int, sites: int) -> tuple[str, int]:
    """Rewrites runs of whole sentences (words reversed) at `sites` evenly spaced places.

    Each site rewrites consecutive sentences until it changed `budget / sites`
    characters, so `sites` sets how scattered the same amount of change is.

    Returns:
      The edited text and the number of characters rewritten.
    """
    sentences = list(SENTENCE.finditer(text))
    if not sentences or budget <= 0:
        return text, 0
    sites = max(1, min(sites, len(sentences)))
    picked = []
    for site in range(sites):
        first, changed = int(site * len(sentences) / sites), 0
        for m in sentences[first:]:
            if changed >= budget / sites or (picked and m.start() < picked[-1].end()):
                break
            picked.append(m)
            changed += len(m.group())
    for m in reversed(picked):
        rewritten = ' '.join(reversed(m.group()[:-1].split())) + m.group()[-1]
        text = text[: m.start()] + rewritten + text[m.end() :]
    return text, sum(len(m.group()) for m in picked)


def data_files(directory: str) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for d in DATA_DIRS for p in sorted(Path(directory, d).rglob('*')) if p.is_file()
    }


def timed_build(build_index, argv: list[str]) -> tuple[float, dict]:
    started = time.perf_counter()
    manifest = build_index.run(argv)
    return time.perf_counter() - started, manifest


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str, default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'),
                        help='Folder with the Chroma corpora (*.md).')
    parser.add_argument('--edit_fraction', type=float, default=0.01,
                        help='Fraction of the characters rewritten before the rebuild.')
    parser.add_argument('--edit_sites', type=int, default=10,
                        help='Places the rewritten text is spread over, shared among the '
                             'documents by size (at least one each); more sites, more chunks touched.')
    parser.add_argument('--added_chars', type=int, default=10_000,
                        help='Size of the added document.')
    parser.add_argument('--build_flags', type=str, default='',
                        help='Extra build flags for all three builds, e.g. "--filter exact,minhash".')
    args = parser.parse_args()

    from pipelines.build_index import job as build_index
    from transforms.features import cache as feature_cache

    corpora = sorted(glob.glob(os.path.join(args.data, '*.md')))
    if not corpora:
        parser.error(f'no *.md corpora under {args.data}')
    extra = args.build_flags.split()
    with tempfile.TemporaryDirectory() as tmp:
        corpus, root, fresh = (os.path.join(tmp, name) for name in ('corpus', 'root', 'fresh'))
        os.makedirs(corpus)
        for path in corpora:
            shutil.copy(path, corpus)
        full_time, full = timed_build(
            build_index, ['--input', corpus, '--output', root, '--versioned', '--run_id', 'full', *extra])

        texts = {p: Path(p).read_text() for p in sorted(glob.glob(os.path.join(corpus, '*.md')))}
        total = sum(map(len, texts.values()))
        changed = 0
        for path, text in texts.items():
            sites = max(1, round(args.edit_sites * len(text) / total))
            new, n = edit_document(text, round(args.edit_fraction * len(text)), sites)
            Path(path).write_text(new)
            changed += n
        # The added document: paragraphs of the smallest corpus, last first, up to --added_chars.
        smallest = min(texts.values(), key=len)
        added = '\n\n'.join(reversed(smallest.split('\n\n')))[: args.added_chars]
        Path(corpus, 'added_document.md').write_text(added)

        rebuild_time, rebuild = timed_build(
            build_index, ['--input', corpus, '--output', root, '--versioned', '--run_id', 'rebuild', *extra])
        fresh_time, _ = timed_build(
            build_index, ['--input', corpus, '--output', fresh, '--cache', feature_cache.NO_CACHE, *extra])
        identical = data_files(os.path.join(root, 'runs', 'rebuild')) == data_files(fresh)

    counts = rebuild['counts']
    print(f'corpora: {len(corpora)} files, {total} chars; chunker {full["config"]["chunker"]}, '
          f'filters {[s["name"] for s in full["filters"]]}')
    print(f'edit: {changed} chars rewritten ({changed / total:.2%}) at about {args.edit_sites} places in '
          f'{len(texts)} documents, plus one added document of {len(added)} chars')
    print(f'full build:  {full_time:7.2f} s  {full["counts"]["chunks_embedded"]} chunks embedded')
    print(f'rebuild:     {rebuild_time:7.2f} s  {counts["chunks_embedded"]} of '
          f'{counts["chunks_before_filters"]} chunks embedded; cache {rebuild["cache"]["features"]}')
    print(f'fresh build: {fresh_time:7.2f} s  (the changed corpus, no cache)')
    # The fresh build is the fairer floor: the same input, and like the rebuild it runs in a
    # warm process (the full build, first in the process, also pays one-time imports).
    print(f'ratio rebuild/fresh build: {rebuild_time / fresh_time:.3f}  (target <= 0.10); '
          f'rebuild/full build: {rebuild_time / full_time:.3f}')
    print(f'rebuild output identical to the fresh build: {identical}')
    if not identical:
        raise SystemExit('the rebuild differs from a fresh build of the same input')


if __name__ == '__main__':
    main()
