"""What a machine keeps between bf16 builds: whole entries or none, a damaged one redone, `none` for no cache."""

import json
import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers import REPO, TEXTS
from tests.transforms.features.test_precision import needs_bf16
from transforms.features import openvino_cache
from transforms.features.precision import QualityCheck


# A machine's first build converts and checks: each test starts from an empty OpenVINO cache.
pytestmark = pytest.mark.usefixtures('fresh_openvino_cache')


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    assert openvino_cache.root() == tmp_path / 'xdg_cache' / 'ragsieve' / 'openvino'
    monkeypatch.setenv(openvino_cache.ENV, str(tmp_path / 'elsewhere'))
    assert openvino_cache.root() == tmp_path / 'elsewhere'
    monkeypatch.setenv(openvino_cache.ENV, 'none')
    assert openvino_cache.root() is None
    openvino_cache.remember_check('k', {'min_cosine': 1.0})
    assert openvino_cache.remembered_check('k', QualityCheck.from_json) is None


CHECK = {'precision': 'bf16', 'sample': 3, 'min_cosine': 0.9999, 'mean_cosine': 0.99995, 'remembered': False}


def test_a_check_is_remembered_whole_and_a_damaged_one_is_redone(caplog):
    read = QualityCheck.from_json
    assert openvino_cache.remembered_check('k', read) is None
    openvino_cache.remember_check('k', CHECK)
    assert openvino_cache.remembered_check('k', read) == QualityCheck(**CHECK)
    folder = openvino_cache.root() / 'checks'
    assert sorted(p.name for p in folder.iterdir()) == ['k']  # nothing left aside
    # Fields of another version are not read as this one's.
    assert openvino_cache.remembered_check('k', lambda values: QualityCheck.from_json({**values, 'x': 1})) is None
    (folder / 'k' / 'check.json').write_text('{"precision": "bf')  # a torn write of some other tool
    with caplog.at_level(logging.WARNING):
        assert openvino_cache.remembered_check('k', read) is None
    assert 'checking the precision again' in caplog.text
    openvino_cache.remember_check('k', CHECK)
    assert openvino_cache.remembered_check('k', read) == QualityCheck(**CHECK)


def test_an_edited_check_is_a_damaged_entry_not_a_verdict_on_bf16(caplog):
    openvino_cache.remember_check('k', CHECK)
    path = openvino_cache.root() / 'checks' / 'k' / 'check.json'
    stored = json.loads(path.read_text())
    stored['check']['min_cosine'] = 0.2  # would refuse every bf16 build, blaming bf16
    path.write_text(json.dumps(stored))
    with caplog.at_level(logging.WARNING):
        assert openvino_cache.remembered_check('k', QualityCheck.from_json) is None
    assert 'its checksum does not match: edited or damaged' in caplog.text
    # Another key's check copied here fails the checksum too (the key is in it).
    openvino_cache.remember_check('other', CHECK)
    path.write_text((openvino_cache.root() / 'checks' / 'other' / 'check.json').read_text())
    assert openvino_cache.remembered_check('k', QualityCheck.from_json) is None


@pytest.mark.parametrize('field,value', [
    ('min_cosine', 'high'), ('min_cosine', float('nan')), ('min_cosine', True), ('mean_cosine', 2.0),
    ('sample', 2.5), ('sample', 0), ('precision', 'int4'), ('remembered', 'yes'), ('min_cosine', 0.99999),
])
def test_a_check_whose_values_are_not_numbers_of_their_range_is_refused(field, value):
    with pytest.raises(ValueError):
        QualityCheck.from_json({**CHECK, field: value})
    # Even stored with a valid checksum, it is a miss.
    openvino_cache.remember_check('k', {**CHECK, field: value})
    assert openvino_cache.remembered_check('k', QualityCheck.from_json) is None


def test_a_failing_remembered_check_says_it_was_remembered():
    with pytest.raises(ValueError, match=r'as an earlier build on this machine measured it.*RAGSIEVE_OPENVINO_CACHE'):
        QualityCheck(**{**CHECK, 'min_cosine': 0.5, 'remembered': True}).enforce()


def test_an_entry_written_meanwhile_by_another_process_is_kept_and_a_killed_ones_leftover_removed():
    folder = openvino_cache.root() / 'models' / 'k'
    left = folder.parent / '.k.killed'
    left.mkdir(parents=True)
    os.utime(left, (time.time() - 2 * openvino_cache.STALE_SECONDS,) * 2)
    openvino_cache._write_whole(folder, lambda tmp: (tmp / 'model.xml').write_text('first'))
    openvino_cache._write_whole(folder, lambda tmp: (tmp / 'model.xml').write_text('second'))
    assert (folder / 'model.xml').read_text() == 'first' and [p.name for p in folder.parent.iterdir()] == ['k']
    openvino_cache._write_whole(folder, lambda tmp: (tmp / 'model.xml').write_text('repaired'), replace=True)
    assert (folder / 'model.xml').read_text() == 'repaired'


def test_a_write_that_fails_leaves_no_entry_and_does_not_fail_the_build(caplog):
    def fail(tmp):
        (tmp / 'model.xml').write_text('<half')
        raise OSError(28, 'No space left on device')

    with caplog.at_level(logging.WARNING):
        openvino_cache._write_whole(openvino_cache.root() / 'models' / 'k', fail)
    assert list((openvino_cache.root() / 'models').iterdir()) == []
    assert 'not written (' in caplog.text and 'No space left on device' in caplog.text


def test_the_check_key_names_the_sample_and_what_decides_its_vectors():
    key = openvino_cache.sample_key(['a', 'b'], weights='w', precision='bf16')
    assert key == openvino_cache.sample_key(['a', 'b'], weights='w', precision='bf16')
    assert key != openvino_cache.sample_key(['ab'], weights='w', precision='bf16')  # texts are delimited
    assert key != openvino_cache.sample_key(['a', 'b'], weights='v', precision='bf16')


CHILD = '''
import json, sys
import openvino as ov
from transforms.features import precision
from transforms.features.embedding import embed_texts
from transforms.features.models import load_embedding_model
from tests.helpers import TEXTS
if sys.argv[1] == 'cached':  # the saved conversion must be read, never converted again
    ov.convert_model = lambda *a, **k: sys.exit('converted again')
model = precision.set_precision(load_embedding_model('all-MiniLM-L6-v2', kernel_mode='native'), 'bf16')
print(json.dumps({'hex': embed_texts(model, TEXTS).tobytes().hex()}))
'''


@needs_bf16
def test_a_saved_conversion_gives_the_same_bits_and_a_damaged_one_is_converted_again(tmp_path):
    def child(mode):
        done = subprocess.run([sys.executable, '-c', CHILD, mode], cwd=REPO, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return np.frombuffer(bytes.fromhex(json.loads(done.stdout.strip().splitlines()[-1])['hex']), np.float32), done

    converted, _ = child('fresh')
    [entry] = (tmp_path / 'xdg_cache' / 'ragsieve' / 'openvino' / 'models').iterdir()
    assert sorted(p.name for p in entry.iterdir()) == ['blake2b.json', 'model.bin', 'model.xml']
    cached, _ = child('cached')
    assert np.array_equal(cached, converted) and len(cached) == len(TEXTS) * 384
    weights = bytearray((entry / 'model.bin').read_bytes())
    weights[len(weights) // 2] ^= 0x40  # one flipped bit: a model that reads, with one wrong weight
    (entry / 'model.bin').write_bytes(bytes(weights))
    repaired, done = child('fresh')
    assert np.array_equal(repaired, converted) and 'do not match their hashes' in done.stderr
    (entry / 'model.bin').write_bytes(bytes(weights[:1000]))  # torn by a full disk
    repaired, done = child('fresh')
    assert np.array_equal(repaired, converted) and 'converting the model again' in done.stderr
    again, _ = child('cached')
    assert np.array_equal(again, converted)
