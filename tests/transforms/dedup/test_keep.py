"""The keep rule (`keep_order_key`): which of several equal chunks is kept."""

from tests.helpers import make
from transforms.dedup.keep import keep_order_key


def test_keep_order_key():
    a = make('b', 3, salience=0.9)
    b = make('a', 0, salience=None)
    c = make('a', 1, salience=0.0)
    d = make('a', 2, salience=0.9)
    assert sorted([a, b, c, d], key=keep_order_key) == [d, a, b, c]
