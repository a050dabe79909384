"""The scale benchmark's corpus generator: deterministic, N paragraphs, copies only where planted, the next night."""

import json

import pytest

from benchmarks.scale_corpus import change_corpus, chunk_id, generate_corpus, read_documents


@pytest.fixture(scope='module')
def tokenizer(embedding_model):
    return embedding_model.tokenizer


def paragraphs(directory):
    out = []
    for path in sorted(directory.iterdir()):
        for line in path.read_text().splitlines():
            out.extend(json.loads(line)['text'].split('\n\n'))
    return out


def test_generated_corpus_is_deterministic_and_plants_its_copies(tmp_path, tokenizer):
    plan = generate_corpus(str(tmp_path / 'a'), 300, tokenizer, 48, seed=3, exact_rate=0.05, near_rate=0.05)
    generate_corpus(str(tmp_path / 'b'), 300, tokenizer, 48, seed=3, exact_rate=0.05, near_rate=0.05)
    assert [p.read_bytes() for p in sorted((tmp_path / 'a').iterdir())] == [
        p.read_bytes() for p in sorted((tmp_path / 'b').iterdir())]
    found = paragraphs(tmp_path / 'a')
    assert len(found) == plan['paragraphs'] == 300 and plan['documents'] == 300 // 8 + 1
    # Only the planted exact copies repeat.
    assert len(found) - len(set(found)) == plan['planted']['exact'] > 0
    for text in found:
        assert 25 <= len(tokenizer(text, add_special_tokens=False)['input_ids']) <= 44


def test_the_plan_names_the_planted_copies_by_the_chunk_ids_the_build_gives(tmp_path, tokenizer):
    plan = generate_corpus(str(tmp_path / 'a'), 300, tokenizer, 48, seed=3, exact_rate=0.05, near_rate=0.05)
    found = paragraphs(tmp_path / 'a')
    index = {chunk_id(i): text for i, text in enumerate(found)}
    assert len(plan['exact_ids']) == plan['planted']['exact'] and len(plan['near_ids']) == plan['planted']['near']
    for planted in plan['exact_ids']:  # an exact copy repeats an earlier paragraph
        position = found.index(index[planted])
        assert chunk_id(position) != planted and position < list(index).index(planted)
    assert chunk_id(9) == 'doc0000001#1'


def test_the_next_nights_corpus_changes_one_paragraph_of_a_share_of_the_documents(tmp_path, tokenizer):
    generate_corpus(str(tmp_path / 'a'), 800, tokenizer, 48, seed=3, exact_rate=0.05, near_rate=0.05)
    change = change_corpus(str(tmp_path / 'a'), str(tmp_path / 'b'), 0.1, tokenizer, 48, seed=4)
    before, after = read_documents(str(tmp_path / 'a')), read_documents(str(tmp_path / 'b'))
    changed = [f'doc{d:07d}' for d, (x, y) in enumerate(zip(before, after)) if x != y]
    assert changed == change['doc_ids'] and change['documents'] == 10
    old = set(paragraphs(tmp_path / 'a'))
    for d, (x, y) in enumerate(zip(before, after)):
        new = [p for p in y.split('\n\n') if p not in old]
        assert len(new) == (1 if x != y else 0) and len(y.split('\n\n')) == len(x.split('\n\n'))
    change_corpus(str(tmp_path / 'a'), str(tmp_path / 'c'), 0.1, tokenizer, 48, seed=4)
    assert read_documents(str(tmp_path / 'c')) == after


def measured(n, runner, wall, cpu, peaks):
    """A row as scale.py records it (made up here: the subject is the targets' arithmetic, not a build)."""
    found = {'planted': 10, 'found': 1.0, 'by': {}}
    return {'n': n, 'runner': runner, 'chunks': n, 'kept': n, 'wall': wall, 'cpu': cpu, 'spill_mib': 0.0,
            'kinds': {k: {'count': 1, 'peak_mib': v, 'cpu_s': 0.0} for k, v in peaks.items()},
            'stages': {}, 'planted': {'exact': found, 'near': found}, 'identical': None}


def test_the_targets_compare_the_second_size_with_the_last_and_the_engine_with_the_direct_slope():
    from benchmarks.scale import targets

    rows = [measured(10_000, 'direct', 20, 30, {'launcher': 1000}),
            measured(100_000, 'direct', 200, 300, {'launcher': 3000}),
            measured(10_000, 'flink', 60, 90, {'sdk worker': 1000}),
            measured(100_000, 'flink', 400, 600, {'sdk worker': 2000}),
            measured(1_000_000, 'flink', 2600, 6600, {'sdk worker': 2600})]
    lines = targets(rows)
    assert 'flink: 100000 -> 1000000 chunks (10.0x): CPU 11.00x (1.10x linear; target <= 1.15x)' in lines
    assert '  sdk worker: peak 2000 -> 2600 MiB (1.30x; target <= 1.25x)' in lines
    # The DirectRunner's 10k -> 100k slope, 2 s per 1,000 chunks, gives 2000 s at 1M.
    assert any(line.startswith('  wall at 1000000: 2600 s') and line.endswith('1.30x (target <= 1.3x)')
               for line in lines), lines
