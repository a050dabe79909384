"""The build's settings: flags and config files into the filter configuration."""

import pytest

from pipelines import build_options


def test_filter_settings_from_config_file(tmp_path):
    config = tmp_path / 'build.yaml'
    config.write_text(
        'input: in\noutput: out\nfilter: exact,minhash@0.7,random@0.2\nminhash_num_perm: 64\n'
        'minhash_shingle_size: 2\nentity_labels: [ORG, PERSON]\nintra_doc_boost_mode: linear\n'
        'warn_doc_loss: 0.3\n')
    options = build_options.parse_args(['--config', str(config), '--random_seed', '9'])
    filters = build_options.BuildConfig.from_options(options.view_as(build_options.BuildIndexOptions)).filters
    assert [(s.name, s.threshold) for s in filters.specs] == [('exact', None), ('minhash', 0.7), ('random', 0.2)]
    features = filters.features
    assert (features.minhash_num_perm, features.minhash_shingle_size, filters.random_seed) == (64, 2, 9)
    assert features.entity_labels == ('ORG', 'PERSON') and filters.intra_doc_boost_mode == 'linear'
    assert filters.warn_doc_loss == 0.3 and filters.needs_minhash and not filters.needs_entities


def test_scope_and_delta_settings_from_flags_and_config_file(tmp_path):
    config = tmp_path / 'build.yaml'
    config.write_text('input: in\noutput: out\ndedup_scope: [tenant, release]\ndeltas: off\n')
    options = build_options.parse_args(['--config', str(config)])
    filters = build_options.BuildConfig.from_options(options.view_as(build_options.BuildIndexOptions)).filters
    assert (filters.scope, filters.deltas, filters.semantic_deltas) == (('release', 'tenant'), False, False)
    options = build_options.parse_args(['--input', 'in', '--output', 'out', '--semantic_deltas', 'on'])
    filters = build_options.BuildConfig.from_options(options.view_as(build_options.BuildIndexOptions)).filters
    assert (filters.scope, filters.deltas, filters.semantic_deltas) == ((), True, True)
    with pytest.raises(ValueError, match='semantic_deltas'):
        options = build_options.parse_args(['--input', 'in', '--output', 'out', '--deltas', 'off',
                                            '--semantic_deltas', 'on'])
        build_options.BuildConfig.from_options(options.view_as(build_options.BuildIndexOptions))
