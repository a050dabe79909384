"""Cache specs: the settings id that names a feature's cache directory."""

import pytest

from transforms.features.cache_settings import CacheSpec


def test_settings_id_depends_on_every_setting_not_on_order():
    a = CacheSpec('embedding', {'model': 'm', 'weights': 'w1'})
    assert a.settings_id == CacheSpec('embedding', {'weights': 'w1', 'model': 'm'}).settings_id
    assert a.settings_id != CacheSpec('embedding', {'model': 'm', 'weights': 'w2'}).settings_id
    assert a.directory('/c') == f'/c/embedding/{a.settings_id}'
    with pytest.raises(ValueError, match='unknown cached feature'):
        CacheSpec('topic', {})
