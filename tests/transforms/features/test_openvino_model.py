"""A model converted once is read back without torch's copy: the same bits, or loaded whole where anything differs."""

import dataclasses
import json
import subprocess
import sys

import pytest

from tests.helpers import REPO
from tests.transforms.features.test_precision import needs_openvino
from transforms.features import openvino_cache, openvino_model
from transforms.features.models import resolve_model_path

# A machine's first load converts: each test starts from an empty OpenVINO cache.
pytestmark = [pytest.mark.usefixtures('fresh_openvino_cache'), needs_openvino]

# Each load in a process of its own, as builds and SDK workers load: what it imported is what a build pays.
CHILD = '''
import json, sys
import openvino as ov
from transforms.features import openvino_model, precision
from transforms.features.embedding import embed_texts, kernel_probe
from tests.helpers import TEXTS
ov.convert_model = lambda *a, **k: sys.exit('converted again') if sys.argv[1] == 'saved' else convert(*a, **k)
model = openvino_model.load('all-MiniLM-L6-v2', 'fp32')
out = {'kind': type(model).__name__, 'hex': embed_texts(model, TEXTS).tobytes().hex(), 'probe': kernel_probe(model),
       'weights': precision.weights_of(model), 'dimension': model.get_embedding_dimension(),
       'max_seq_length': model.max_seq_length, 'sentence_transformers': 'sentence_transformers' in sys.modules}
with precision.fp32_forward(model):  # the precision check's torch half
    out['fp32'] = embed_texts(model, TEXTS).tobytes().hex()
print(json.dumps(out))
'''.replace('ov.convert_model =', 'convert = ov.convert_model\nov.convert_model =')


def load(mode: str) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, '-c', CHILD, mode], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def record_key() -> str:
    return openvino_model.load_key(resolve_model_path('all-MiniLM-L6-v2'))


def test_a_model_converted_once_is_read_back_with_the_same_bits_without_sentence_transformers():
    whole, _ = load('first')
    saved, _ = load('saved')
    assert (whole['kind'], saved['kind']) == ('SentenceTransformer', 'SavedModel')
    assert whole['sentence_transformers'] and not saved['sentence_transformers']
    # The bits, the probe (the feature cache's key) and the weights' hash (the checks' key) of the whole model.
    assert {k: v for k, v in saved.items() if k not in ('kind', 'sentence_transformers')} == \
        {k: v for k, v in whole.items() if k not in ('kind', 'sentence_transformers')}
    assert (saved['dimension'], saved['max_seq_length']) == (384, 256)


def test_a_damaged_record_or_another_tokenizer_loads_the_model_whole_and_the_next_load_reads_it_back():
    whole, _ = load('first')
    entry = openvino_cache.root() / openvino_model.LOADS / record_key() / 'check.json'
    stored = json.loads(entry.read_text())
    entry.write_text(json.dumps({**stored, 'check': {**stored['check'], 'max_seq_length': 512}}))  # edited
    reloaded, stderr = load('first')
    assert reloaded['kind'] == 'SentenceTransformer' and 'checksum does not match' in stderr, stderr[-2000:]
    assert load('saved')[0]['hex'] == whole['hex']  # the whole load wrote the record again
    # A tokenizer that loads alone otherwise than in sentence-transformers (say, a lower-casing model):
    # recorded with a valid checksum, so only the comparison of states can catch it.
    record = openvino_model.Loaded.from_json(json.loads(entry.read_text())['check'])
    openvino_cache.remember(openvino_model.LOADS, record_key(), dataclasses.asdict(
        dataclasses.replace(record, tokenizer='0' * 32)))
    other, _ = load('first')
    assert other['kind'] == 'SentenceTransformer' and other['hex'] == whole['hex']


def test_a_record_is_verified_field_by_field():
    good = {'weights': 'w', 'inputs': ['input_ids'], 'max_seq_length': 256, 'dimension': 384, 'tokenizer': 't'}
    assert openvino_model.Loaded.from_json(good).dimension == 384
    for bad in ({**good, 'dimension': '384'}, {**good, 'inputs': 'input_ids'}, {**good, 'max_seq_length': 0},
                {k: v for k, v in good.items() if k != 'weights'}, {**good, 'extra': 1}):
        with pytest.raises(ValueError):
            openvino_model.Loaded.from_json(bad)


def test_the_files_digest_follows_names_and_contents(tmp_path):
    (tmp_path / 'a').write_text('x')
    first = openvino_model.files_digest(str(tmp_path))
    (tmp_path / 'a').write_text('y')
    assert openvino_model.files_digest(str(tmp_path)) != first
    (tmp_path / 'a').rename(tmp_path / 'b')
    (tmp_path / 'b').write_text('x')
    assert openvino_model.files_digest(str(tmp_path)) != first
