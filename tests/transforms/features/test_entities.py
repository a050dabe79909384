"""Entity extraction with the real en_core_web_sm model."""

import pytest

from transforms.features.entities import DEFAULT_LABELS, entity_names, extract_entities, load_ner, normalize_entity


@pytest.fixture(scope='module')
def nlp():
    return load_ner()


def test_only_ner_is_loaded(nlp):
    assert nlp.pipe_names == ['ner']
    assert nlp.disabled == []


def test_missing_model_is_a_clear_error():
    with pytest.raises(ValueError, match='not found'):
        load_ner('no_such_spacy_model')


def test_load_from_path(nlp):
    assert load_ner(str(nlp.path)).pipe_names == ['ner']


def test_normalize_entity():
    assert normalize_entity('  New\n  York   City ') == 'new york city'
    assert normalize_entity('ÉCOLE') == 'école'


def test_extract_entities_labels_sorted_unique(nlp):
    texts = [
        'Apple hired Tim Cook in Cupertino, California in 1998 for $5 million. Tim Cook stayed.',
        'the cat sat on the mat.',
        '',
    ]
    ents = extract_entities(nlp, texts)
    assert ents[0] == tuple(sorted(set(ents[0])))
    assert 'PERSON:tim cook' in ents[0]
    assert 'GPE:cupertino' in ents[0] and 'GPE:california' in ents[0]
    assert not any(e.startswith(('DATE:', 'MONEY:', 'CARDINAL:')) for e in ents[0])
    assert ents[1] == () and ents[2] == ()
    everything = extract_entities(nlp, texts[:1], labels=None)[0]
    assert 'DATE:1998' in everything and set(ents[0]) < set(everything)


def test_batching_does_not_change_results(nlp):
    texts = [f'Barack Obama met Angela Merkel in Berlin on day {i}.' for i in range(7)]
    assert extract_entities(nlp, texts, batch_size=2) == extract_entities(nlp, texts, batch_size=64)


def test_bad_arguments(nlp):
    with pytest.raises(ValueError, match='PERSONS'):
        extract_entities(nlp, ['x'], labels=['PERSONS'])
    with pytest.raises(ValueError):
        extract_entities(nlp, ['x'], batch_size=0)
    assert DEFAULT_LABELS <= set(nlp.get_pipe('ner').labels)


def test_entity_names_drop_labels():
    assert entity_names(('GPE:paris', 'ORG:paris', 'PERSON:a:b')) == frozenset({'paris', 'a:b'})
    assert entity_names(()) == frozenset()
    assert entity_names(None) == frozenset()
