"""The greedy rule decided in keyed rounds equals the greedy pass over all edges.

The edges here are random graphs, not model output: the unit under test is
the resolution of given edges, which no model takes part in.
"""

import random

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.dedup.greedy import ResolveGreedy, greedy_keep_first


def random_edges(n_nodes: int, n_edges: int, seed: int) -> list[tuple]:
    """Edges `(later, later_key, earlier, earlier_key, score)` with tied scores and long chains."""
    rng = random.Random(seed)
    keys = {f'c{i:03d}': (rng.randrange(5), f'c{i:03d}') for i in range(n_nodes)}
    ids = sorted(keys, key=lambda i: (keys[i], i))
    edges = set()
    for i in range(1, n_nodes):  # a chain through keep order, then random shortcuts
        edges.add((ids[i], keys[ids[i]], ids[i - 1], keys[ids[i - 1]], 0.9))
    while len(edges) < n_edges:
        a, b = sorted(rng.sample(range(n_nodes), 2))
        edges.add((ids[b], keys[ids[b]], ids[a], keys[ids[a]], rng.choice([0.8, 0.85, 0.9])))
    return sorted(edges)


@pytest.mark.parametrize('rounds', [0, 1, 3])
def test_rounds_give_the_greedy_decisions(rounds):
    edges = random_edges(60, 150, seed=rounds) + random_edges(30, 30, seed=7)  # two components
    edges = [(f'x{a}', ka, f'x{b}', kb, s) if i >= 150 else (a, ka, b, kb, s)
             for i, (a, ka, b, kb, s) in enumerate(edges)]
    expected = sorted(greedy_keep_first(edges).items())
    assert expected
    with TestPipeline() as p:
        decisions = p | beam.Create(edges) | ResolveGreedy('test', rounds=rounds)
        assert_that(decisions, equal_to(expected))


def test_a_long_chain_is_left_to_the_residual_and_still_exact():
    # c0 - c1 - ... - c9: kept, dropped, kept, ...; one round decides only c0 and c1.
    edges = [(f'c{i}', (i,), f'c{i - 1}', (i - 1,), 0.95) for i in range(1, 10)]
    expected = sorted(greedy_keep_first(edges).items())
    assert [d for d, _ in expected] == ['c1', 'c3', 'c5', 'c7', 'c9']
    with TestPipeline() as p:
        decisions = p | beam.Create(edges) | ResolveGreedy('test', rounds=1)
        assert_that(decisions, equal_to(expected))


def test_negative_rounds_are_refused():
    with pytest.raises(ValueError, match='rounds'):
        ResolveGreedy('test', rounds=-1)
