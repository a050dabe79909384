"""The build's settings: flags and config files into the validated config (filters, gates, shards, kernels)."""

import pytest

from pipelines.build_index import options as build_options
from pipelines.build_index.command_line import parse_args


def test_filter_settings_from_config_file(tmp_path):
    config = tmp_path / 'build.yaml'
    config.write_text(
        'input: in\noutput: out\nfilter: exact,minhash@0.7,random@0.2\nminhash_num_perm: 64\n'
        'minhash_shingle_size: 2\nentity_labels: [ORG, PERSON]\nintra_doc_boost_mode: linear\n'
        'warn_doc_loss: 0.3\n')
    options = parse_args(['--config', str(config), '--random_seed', '9'])
    filters = build_options.BuildConfig.from_options(options.view_as(build_options.BuildIndexOptions)).filters
    assert [(s.name, s.threshold) for s in filters.specs] == [('exact', None), ('minhash', 0.7), ('random', 0.2)]
    features = filters.features
    assert (features.minhash_num_perm, features.minhash_shingle_size, filters.random_seed) == (64, 2, 9)
    assert features.entity_labels == ('ORG', 'PERSON') and filters.intra_doc_boost_mode == 'linear'
    assert filters.warn_doc_loss == 0.3 and filters.needs_minhash and not filters.needs_entities


def test_scope_and_delta_settings_from_flags_and_config_file(tmp_path):
    config = tmp_path / 'build.yaml'
    config.write_text('input: in\noutput: out\ndedup_scope: [tenant, release]\ndeltas: off\n')
    options = parse_args(['--config', str(config)])
    filters = build_options.BuildConfig.from_options(options.view_as(build_options.BuildIndexOptions)).filters
    assert (filters.scope, filters.deltas, filters.semantic_deltas) == (('release', 'tenant'), False, False)
    options = parse_args(['--input', 'in', '--output', 'out', '--semantic_deltas', 'on'])
    filters = build_options.BuildConfig.from_options(options.view_as(build_options.BuildIndexOptions)).filters
    assert (filters.scope, filters.deltas, filters.semantic_deltas) == ((), True, True)
    with pytest.raises(ValueError, match='semantic_deltas'):
        options = parse_args(['--input', 'in', '--output', 'out', '--deltas', 'off',
                                            '--semantic_deltas', 'on'])
        build_options.BuildConfig.from_options(options.view_as(build_options.BuildIndexOptions))


def parse(*argv):
    options = parse_args(['--input', 'in', '--output', 'out', *argv])
    return build_options.BuildConfig.from_options(options.view_as(build_options.BuildIndexOptions))


def test_num_shards_above_the_maximum_is_refused():
    assert parse('--num_shards', '1024').num_shards == 1024
    with pytest.raises(ValueError, match=r'--num_shards must be 0 \(from the input size\) to 1024, got 100000'):
        parse('--num_shards', '100000')


def config_of(argv):
    options = parse_args(argv)
    return build_options.BuildConfig.from_options(options.view_as(build_options.BuildIndexOptions))


def test_gate_settings_from_flags_and_config_file(tmp_path):
    from transforms.output.gates import GateConfig

    assert config_of(['--input', 'in', '--output', 'out']).gates == GateConfig()
    config = tmp_path / 'build.yaml'
    config.write_text('input: in\noutput: out\ngates: off\ngate_max_kept_drop: 0.5\n'
                      'gate_canary: examples/sample_canary.jsonl\n')
    gates = config_of(['--config', str(config), '--gate_canary_k', '3']).gates
    assert (gates.enforce, gates.max_kept_drop, gates.canary, gates.canary_k) == (
        False, 0.5, 'examples/sample_canary.jsonl', 3)


@pytest.mark.parametrize('flags,message', [
    (['--gate_max_documents_drop', '2'], r'--gate_max_documents_drop must be in \[0, 1\]'),
    (['--gate_canary', 'no/such.jsonl'], 'cannot read --gate_canary no/such.jsonl'),
    (['--gates', 'maybe'], None),
])
def test_bad_gate_settings_are_refused(flags, message):
    with pytest.raises((ValueError, SystemExit), match=message):
        config_of(['--input', 'in', '--output', 'out', *flags])


def test_a_canary_with_a_bad_line_is_refused_before_any_work(tmp_path):
    canary = tmp_path / 'canary.jsonl'
    canary.write_text('{"question": "q", "doc_id": "d"}\n{"question": "no expectation"}\n')
    with pytest.raises(ValueError, match=r'canary.jsonl:2: needs an expected "doc_id" or "text"'):
        config_of(['--input', 'in', '--output', 'out', '--gate_canary', str(canary)])


def test_the_cpu_familys_kernels_are_the_default_and_bf16_refuses_portable_ones():
    from transforms.features import kernels
    from transforms.features.precision import check_kernels

    assert parse().embedding.kernels == kernels.DEFAULT_MODE == kernels.default_mode()
    assert parse('--embed_kernels', 'portable').embedding.kernels == 'portable'
    assert parse('--embed_kernels', 'native').embedding.kernels == 'native'
    assert [check_kernels('bf16', None), check_kernels('bf16', 'native'), check_kernels('fp32', None),
            check_kernels('fp32', 'portable')] == ['native', 'native', kernels.DEFAULT_MODE, 'portable']
    # Dataflow's workers are never the launcher's CPU: portable unless asked otherwise (runners.default_kernels).
    dataflow = ('--runner', 'DataflowRunner', '--setup_file', './setup.py')
    assert parse(*dataflow).embedding.kernels == 'portable'
    assert parse(*dataflow, '--embed_kernels', 'native').embedding.kernels == 'native'
    assert parse('--runner', 'FlinkRunner').embedding.kernels == kernels.DEFAULT_MODE
    # Refused before anything looks at the CPU's bf16 units (this one may have none).
    with pytest.raises(ValueError, match='^--embed_kernels portable cannot run --embed_precision bf16'):
        parse('--embed_precision', 'bf16', '--embed_kernels', 'portable')


@pytest.mark.parametrize('family, kernels_mode, backend', [
    (('AuthenticAMD', 'avx512'), 'native', 'openvino'),  # measured faster there (precision.FASTEST_FP32)
    (('AuthenticAMD', 'avx2'), 'portable', 'torch'),  # portable bits, which OpenVINO's are not
    (('GenuineIntel', 'amx'), 'native', 'torch'),  # OpenVINO fp32 not measured there
])
def test_a_build_naming_no_embedding_flag_takes_its_cpu_familys_fastest_fp32(monkeypatch, family, kernels_mode,
                                                                             backend):
    from transforms.features import kernels, precision

    # Pure: the tables, whatever CPU runs the test.
    monkeypatch.setattr(kernels, 'cpu_family', lambda vendor=None, flags=None: family)
    monkeypatch.setattr(kernels, 'DEFAULT_MODE', kernels.default_mode(family))
    default = parse().embedding
    assert (default.precision, default.kernels, default.backend) == ('fp32', kernels_mode, backend)
    # Any embedding flag is taken as given: fp32 named alone, or its kernels, is torch's (the bytes before
    # issue 56); Dataflow's portable default and another device keep torch.
    for flags in (('--embed_precision', 'fp32'), ('--embed_kernels', 'native'), ('--embed_backend', 'torch'),
                  ('--runner', 'DataflowRunner', '--setup_file', './setup.py')):
        assert parse(*flags).embedding.backend == 'torch', flags
    assert parse('--embed_precision', 'fp32', '--embed_backend', 'openvino').embedding.backend == 'openvino'
    assert precision.fastest_fp32_backend('native', 'cuda', family) == 'torch'
