"""The build's settings: flags and config files into the filter configuration."""

import pytest

from pipelines.build_index import options as build_options


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


def parse(*argv):
    options = build_options.parse_args(['--input', 'in', '--output', 'out', *argv])
    return build_options.BuildConfig.from_options(options.view_as(build_options.BuildIndexOptions))


@pytest.mark.parametrize('flags,message', [
    (['--chunk_size', 'abc'], "^--chunk_size: invalid int value: 'abc'$"),
    (['--chunk_size', '1e9'], "^--chunk_size: invalid int value: '1e9'$"),
    (['--chunker', 'bogus'], "^--chunker: invalid choice: 'bogus' "),
    (['--deltas', 'maybe'], "^--deltas: invalid choice: 'maybe' "),
    (['--direct_num_workers', 'two'], "^--direct_num_workers: invalid int value: 'two'$"),  # Beam's own flags too
])
def test_a_bad_flag_value_is_one_line_naming_the_flag(flags, message, capsys):
    with pytest.raises(ValueError, match=message):
        parse(*flags)
    assert capsys.readouterr() == ('', '')  # no usage printed


@pytest.mark.parametrize('setting,message', [
    ('chunk_size: null', r'build.yaml: chunk_size has no value \(null\)'),
    ('chunk_size: abc', "build.yaml: chunk_size: invalid int value: 'abc'$"),
    ('chunk_size: true', 'build.yaml: chunk_size must be a value, not true/false'),
    ('chunker: {name: fixed}', 'build.yaml: chunker must be a value or a list, not a mapping'),
    ('deltas: maybe', "build.yaml: deltas: invalid choice: 'maybe'"),
    ('versioned: yes please', "build.yaml: versioned must be true or false, not 'yes please'"),
    ('runner: DaskRunner', "Dask runner ignores tagged outputs"),
])
def test_a_bad_config_value_names_the_file_and_the_key(tmp_path, setting, message, capsys):
    config = tmp_path / 'build.yaml'
    config.write_text(f'input: in\noutput: out\n{setting}\n')
    with pytest.raises(ValueError, match=message):
        build_options.BuildConfig.from_options(
            build_options.parse_args(['--config', str(config)]).view_as(build_options.BuildIndexOptions))
    assert capsys.readouterr() == ('', '')


@pytest.mark.parametrize('name,text,message', [
    ('build.yaml', 'input: in\noutput: out\nchunk_size: 200\nchunk_size: 300\n',
     r"build.yaml: 'chunk_size' is given twice \(line 3 column 1 and line 4 column 1\): keep one$"),
    ('build.json', '{"input": "in", "output": "out", "chunk_size": 200, "chunk_size": 300}',
     r"build.json: 'chunk_size' is given twice \(line 1 column 34 and line 1 column 53\)"),
    ('build.yaml', 'input: in\noutput: out\nchunk_size: [200]\n',
     r'build.yaml: chunk_size must be one value, not a list \(\[200\]\)$'),
    ('build.yaml', 'input: in\noutput: out\nfilter: [exact, [minhash]]\n', 'build.yaml: filter must be a list of values'),
])
def test_a_config_file_that_is_not_one_value_per_setting_is_refused(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        build_options.parse_args(['--config', str(tmp_path / name)])


def test_a_config_file_that_is_not_utf8_is_named(tmp_path):
    config = tmp_path / 'build.yaml'
    config.write_bytes('input: in\noutput: caf\xe9\n'.encode('latin-1'))
    with pytest.raises(ValueError, match=rf'^--config {config} is not UTF-8 text \(invalid byte at offset 21\)$'):
        build_options.parse_args(['--config', str(config)])


def test_list_settings_take_yaml_lists_and_beams_comma_lists_too(tmp_path):
    config = tmp_path / 'build.yaml'
    config.write_text('input: in\noutput: out\nfilter: [exact, minhash]\nexperiments: [a, b]\n')
    assert build_options.config_flags(str(config)) == [
        '--input=in', '--output=out', '--filter=exact,minhash', '--experiments=a,b']


def test_a_config_file_naming_another_is_refused(tmp_path):
    (tmp_path / 'other.yaml').write_text('chunk_size: 32\n')
    config = tmp_path / 'build.yaml'
    config.write_text(f'input: in\noutput: out\nconfig: {tmp_path / "other.yaml"}\n')
    with pytest.raises(ValueError, match='build.yaml: config: a config file cannot name another config file'):
        build_options.parse_args(['--config', str(config)])


def test_good_config_values_still_become_flags(tmp_path):
    config = tmp_path / 'build.yaml'
    config.write_text('input: in\noutput: out\nversioned: true\nallow_empty: false\ndeltas: off\nchunk_size: 32\n'
                      'filter: [exact, minhash@0.7]\n')
    assert build_options.config_flags(str(config)) == [
        '--input=in', '--output=out', '--versioned', '--deltas=off', '--chunk_size=32', '--filter=exact,minhash@0.7']


def test_num_shards_above_the_maximum_is_refused():
    assert parse('--num_shards', '1024').num_shards == 1024
    with pytest.raises(ValueError, match=r'--num_shards must be 0 \(from the input size\) to 1024, got 100000'):
        parse('--num_shards', '100000')


@pytest.mark.parametrize('runner,message', [
    ('DaskRunner', "Beam's Dask runner ignores tagged outputs and runs only one branch of a graph.*"
                   'use one of DirectRunner, PortableRunner, FlinkRunner, SparkRunner, DataflowRunner'),
    ('apache_beam.runners.dask.dask_runner.DaskRunner', 'Dask runner ignores tagged outputs'),
    ('BogusRunner', "--runner 'BogusRunner' is not a Beam runner; ragsieve runs on DirectRunner, "),
])
def test_runners_that_cannot_run_a_build_are_refused_up_front(runner, message):
    with pytest.raises(ValueError, match=message):
        parse('--runner', runner)


@pytest.mark.parametrize('runner', ['DirectRunner', 'direct', 'PortableRunner', 'FlinkRunner', 'SparkRunner'])
def test_runners_that_work_pass(runner):
    parse('--runner', runner)


def test_dataflow_passes_with_a_way_for_workers_to_get_ragsieve():
    parse('--runner', 'DataflowRunner', '--setup_file', './setup.py')


def config_of(argv):
    options = build_options.parse_args(argv)
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


def test_bf16_runs_on_native_kernels_and_refuses_portable_ones():
    from transforms.features.precision import check_kernels

    assert parse().embedding.kernels == 'portable'
    assert parse('--embed_kernels', 'native').embedding.kernels == 'native'
    assert [check_kernels('bf16', None), check_kernels('bf16', 'native'), check_kernels('fp32', None)] == [
        'native', 'native', 'portable']
    # Refused before anything looks at the CPU's bf16 units (this one may have none).
    with pytest.raises(ValueError, match='^--embed_kernels portable cannot run --embed_precision bf16'):
        parse('--embed_precision', 'bf16', '--embed_kernels', 'portable')
