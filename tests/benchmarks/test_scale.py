"""The scale benchmark's corpus generator: deterministic, N paragraphs, copies only where planted."""

import json

import pytest

from benchmarks.scale import generate_corpus


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
