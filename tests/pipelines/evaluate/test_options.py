"""The evaluation's flags and config: validation, defaults, and errors in one line."""

import pytest

from pipelines import cli
from pipelines.evaluate import options
from tests.helpers import CHROMA
from transforms.evaluation import grid as eval_grid


def test_config_validation():
    kwargs = dict(dataset='chroma', data=str(CHROMA), output='out',
                  chunkers=tuple(eval_grid.parse_chunkers('fixed:100')),
                  filters=tuple(eval_grid.parse_filter_grid('none')))
    options.EvaluateConfig(**kwargs)
    for change, message in [({'k': 0}, 'k must be'), ({'max_questions': 0}, 'max_questions'),
                            ({'variants': ('stemmed',)}, 'variants'), ({'dataset': 'x'}, 'dataset'),
                            ({'chunkers': ()}, 'chunker'), ({'batch_size': 0}, 'batch_size')]:
        with pytest.raises(ValueError, match=message):
            options.EvaluateConfig(**{**kwargs, **change})


def test_default_cache_is_the_users_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
    config = options.config_from_args(options.parse_args(['--output', str(tmp_path / 'out')]))
    assert config.cache == str(tmp_path / 'ragsieve' / 'evaluate')
    config = options.config_from_args(options.parse_args(['--output', str(tmp_path), '--cache', 'none']))
    assert config.cache is None


def test_cli_errors(tmp_path, capsys):
    assert cli.main(['evaluate', '--output', str(tmp_path), '--chunkers', 'fixed:400:400']) == 2
    assert 'ragsieve evaluate: error: chunk_overlap' in capsys.readouterr().err
    assert cli.main(['evaluate', '--dataset', 'squad', '--output', str(tmp_path)]) == 2
    assert '--data is required' in capsys.readouterr().err


def test_more_than_one_retrieval_is_for_beir_only():
    with pytest.raises(ValueError, match='--retrieval takes one of'):
        options.config_from_args(options.parse_args(['--output', 'o', '--retrieval', 'dense,hybrid']))
    with pytest.raises(ValueError, match='retrievals must be distinct'):
        options.config_from_args(options.parse_args(['--dataset', 'beir', '--data', 'd', '--output', 'o',
                                                       '--retrieval', 'dense,splade']))
