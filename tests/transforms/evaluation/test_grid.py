"""The evaluation grid: chunker and filter items, validated; labels and machine names."""

import pytest

from transforms.dedup.config import CASCADE
from transforms.evaluation import grid as eval_grid


def test_parse_chunkers():
    configs = eval_grid.parse_chunkers('recursive:400:200, fixed:200, cluster_semantic:400')
    assert [eval_grid.chunker_label(c) for c in configs] == [
        'recursive_400_200', 'fixed_200_0', 'cluster_semantic_400_0']
    for bad in ('recursive', 'fixed:a', 'fixed:400:400', 'nope:100', 'fixed:10,fixed:10:0'):
        with pytest.raises(ValueError):
            eval_grid.parse_chunkers(bad)


def test_parse_filter_grid():
    grid = eval_grid.parse_filter_grid('none,exact,minhash@0.7,random@0.4,cascade')
    assert [(g.method, g.threshold) for g in grid] == [
        ('No filtering', None), ('ExactNorm', None), ('MinHash-LSH', 0.7), ('random', 0.4),
        ('Cascade (exact, minhash, intra_doc)', None)]
    assert grid[0].specs == ()
    assert [s.name for s in grid[-1].specs] == list(CASCADE)
    assert len(eval_grid.parse_filter_grid(eval_grid.DEFAULT_FILTERS)) == 17
    for bad in ('exact,,none', 'bogus', 'exact@0.5', 'minhash@0.8,minhash@0.8'):
        with pytest.raises(ValueError):
            eval_grid.parse_filter_grid(bad)


def test_a_grid_row_can_run_filters_in_sequence():
    grid = eval_grid.parse_filter_grid('cascade+covered,minhash@0.7+covered,covered')
    assert [(g.name, g.method, g.threshold) for g in grid] == [
        ('cascade+covered', 'Cascade (exact, minhash, intra_doc), then Covered', None),
        ('minhash@0.7+covered', 'MinHash-LSH, then Covered', None),
        ('covered', 'Covered', None)]
    assert [s.name for s in grid[0].specs] == [*CASCADE, 'covered']
    assert grid[1].specs[0].threshold == 0.7
    assert eval_grid.grid_needs(grid) == {*CASCADE, 'covered'}
    [expanded] = eval_grid.parse_filter_grid('cascade+covered:expand')
    assert (expanded.name, expanded.method, expanded.expand) == (
        'cascade+covered:expand', 'Cascade (exact, minhash, intra_doc), then Covered, hits expanded', True)
    assert not grid[0].expand
    [both] = eval_grid.parse_filter_grid('covered:pool:expand')
    assert (both.method, both.pool, both.expand, both.threshold) == (
        'Covered, vectors pooled, hits expanded', True, True, None)
    for bad in ('none+covered', 'covered+', 'exact+cascade', 'covered+covered', 'cascade:expand',
                'covered:expand:pool'):
        with pytest.raises(ValueError):
            eval_grid.parse_filter_grid(bad)


def test_chunker_items_carry_the_chunkers_own_parameters():
    [config] = eval_grid.parse_chunkers('semantic_breakpoint:200:0:window=3')
    assert config.params == (('window', 3),) and config.param('window') == 3
    assert eval_grid.chunker_label(config) == 'semantic_breakpoint_200_0_window3'
    [config] = eval_grid.parse_chunkers('cluster_semantic:300:piece=40')
    assert (config.chunk_size, config.chunk_overlap, config.param('piece')) == (300, 0, 40)
    for bad in ('fixed:200:0:window=3', 'semantic_breakpoint:200:0:window=x',
                'semantic_breakpoint:200:0:window=0', 'semantic_breakpoint:200:window=3:0',
                'semantic_breakpoint:200:0:window=3:window=4'):
        with pytest.raises(ValueError):
            eval_grid.parse_chunkers(bad)


def test_grid_filters_have_machine_names():
    grid = eval_grid.parse_filter_grid('none,ner_exact,similarity_ner@0.8,cascade')
    assert [g.name for g in grid] == ['none', 'ner_exact', 'similarity_ner', 'cascade']
    assert eval_grid.grid_needs(grid) == {'ner_exact', 'similarity_ner', *CASCADE}
