"""The build's command line: config files as flags, bad values and runners refused in one line."""

import pytest

from pipelines.build_index import options as build_options
from pipelines.build_index.command_line import config_flags, parse_args


def parse(*argv):
    options = parse_args(['--input', 'in', '--output', 'out', *argv])
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
            parse_args(['--config', str(config)]).view_as(build_options.BuildIndexOptions))
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
        parse_args(['--config', str(tmp_path / name)])


def test_a_config_file_that_is_not_utf8_is_named(tmp_path):
    config = tmp_path / 'build.yaml'
    config.write_bytes('input: in\noutput: caf\xe9\n'.encode('latin-1'))
    with pytest.raises(ValueError, match=rf'^--config {config} is not UTF-8 text \(invalid byte at offset 21\)$'):
        parse_args(['--config', str(config)])


SECRET = 'wJalrXUtnFEMI-K7MDENG-bPxRfiCY'


@pytest.mark.parametrize('setting,message', [
    (f's3_secret_access_key: [{SECRET}, x]', r's3_secret_access_key must be one value, not a list \(\*\*\*\)$'),
    (f's3_secret_access_key: [[{SECRET}]]', r's3_secret_access_key must be one value, not a list \(\*\*\*\)$'),
    (f's3_session_token: [{SECRET}]', r's3_session_token must be one value, not a list \(\*\*\*\)$'),
    (f's3_secret_access_key: {{key: {SECRET}}}', 's3_secret_access_key must be a value or a list, not a mapping$'),
    (f'sync: [postgresql://ragsieve:{SECRET}@db/rag, x]', r'sync must be one value, not a list \(\*\*\*\)$'),
    (f'spark_master_url: [spark://ragsieve:{SECRET}@master:7077]',
     r"spark_master_url must be one value, not a list \(\['spark://ragsieve:\*\*\*@master:7077'\]\)$"),
    (f's3_secret_access_key: "{SECRET}', r'cannot read --config .*: while scanning a quoted scalar: found unexpected '
                                          r'end of stream \(line 4, column 1\)$'),
])
def test_a_config_file_error_never_shows_a_secret_whatever_its_type(tmp_path, setting, message):
    config = tmp_path / 'build.yaml'
    config.write_text(f'input: in\noutput: out\n{setting}\n')
    with pytest.raises(ValueError, match=message) as e:
        parse_args(['--config', str(config)])
    assert SECRET not in str(e.value)


def test_list_settings_take_yaml_lists_and_beams_comma_lists_too(tmp_path):
    config = tmp_path / 'build.yaml'
    config.write_text('input: in\noutput: out\nfilter: [exact, minhash]\nexperiments: [a, b]\n')
    assert config_flags(str(config)) == [
        '--input=in', '--output=out', '--filter=exact,minhash', '--experiments=a,b']


def test_a_config_file_naming_another_is_refused(tmp_path):
    (tmp_path / 'other.yaml').write_text('chunk_size: 32\n')
    config = tmp_path / 'build.yaml'
    config.write_text(f'input: in\noutput: out\nconfig: {tmp_path / "other.yaml"}\n')
    with pytest.raises(ValueError, match='build.yaml: config: a config file cannot name another config file'):
        parse_args(['--config', str(config)])


def test_good_config_values_still_become_flags(tmp_path):
    config = tmp_path / 'build.yaml'
    config.write_text('input: in\noutput: out\nversioned: true\nallow_empty: false\ndeltas: off\nchunk_size: 32\n'
                      'filter: [exact, minhash@0.7]\n')
    assert config_flags(str(config)) == [
        '--input=in', '--output=out', '--versioned', '--deltas=off', '--chunk_size=32', '--filter=exact,minhash@0.7']


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
