"""Covered chunks at query time (`query.expand`): which chunks a hit holds, and its grown span."""

from tests.helpers import make
from transforms.query.expand import covered_held, expanded_span
from transforms.types import Dropped


def test_only_covered_drops_are_held_in_chunk_order():
    dropped = [
        Dropped(make('d', 3), 'covered_split', 'd#2', 0.5),
        Dropped(make('d', 1), 'covered_whole', 'd#2', 1.0),
        Dropped(make('e', 0), 'exact', 'd#2', 1.0),
        Dropped(make('d', 5), 'covered_split', 'd#4', 0.5),
        Dropped(make('d', 6), 'random', None, 0.1),
    ]
    assert covered_held(dropped) == {'d#2': ['d#1', 'd#3'], 'd#4': ['d#5']}


def test_a_hit_grows_over_the_spans_it_holds():
    assert expanded_span((100, 200), []) == (100, 200)
    assert expanded_span((100, 200), [(150, 260), (40, 120)]) == (40, 260)
