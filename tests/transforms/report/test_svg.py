"""The report's inline SVG bars."""

import xml.etree.ElementTree as ET

from transforms.report.svg import bar_chart, number


def test_bars_scale_to_the_largest_and_escape_labels():
    svg = bar_chart([('a <b>', 10), ('c', 5), ('zero', 0)], 'T & t')
    root = ET.fromstring(svg)  # well-formed XML
    ns = '{http://www.w3.org/2000/svg}'
    assert root.find(f'{ns}title').text == 'T & t'
    widths = [float(r.get('width')) for r in root.iter(f'{ns}rect')]
    assert widths[0] == 2 * widths[1] and widths[2] == 0
    assert [t.text for t in root.iter(f'{ns}text')][:2] == ['a <b>', '10']


def test_numbers_and_decimals():
    assert number(1234) == '1,234' and number(1.5) == '1.50'
    assert '0.00 s' in bar_chart([('x', 0.0)], 't', unit=' s', decimals=2)
    assert bar_chart([], 'empty').startswith('<svg')
