"""Sentences as a reader sees them: wrapped lines joined, structure kept, exact offsets."""

import pytest

from transforms.lineage.sentences import DocumentSentences, block_spans, line_kinds, sentence_spans, soft_break

WRAPPED = (
    'This release follows the Unicode Standard, version 15.1.0, for every\n'
    'property it reports, and a non-normative HTML file listing all valid\n'
    'identifier characters for Unicode 15.1.0 can be found at\n'
    'https://www.unicode.org/Public/15.1.0/ucd/DerivedCoreProperties.txt. Older\n'
    'releases are listed on the download page.'
)


def sentences(text):
    spans = sentence_spans(text)
    for (s, e), following in zip(spans, spans[1:] + [(len(text), len(text))]):
        assert text[s:e] == text[s:e].strip() and text[s:e] and e <= following[0]
    return [text[s:e] for s, e in spans]


def test_a_line_break_inside_a_paragraph_is_a_space():
    assert sentences(WRAPPED) == [WRAPPED[:WRAPPED.index(' Older')], 'Older\nreleases are listed on the download page.']
    # The second sentence starts at the end of a line, the break after "Older" is a space too.
    assert sentences('One sentence ends here. The next one\nwraps onto the next line.') == [
        'One sentence ends here.', 'The next one\nwraps onto the next line.']


def test_blank_lines_headings_and_short_lines_are_boundaries():
    text = ('# Installing\n\nThe archive needs a compiler\n\nand some disk space\n'
            'Known problems\n'
            'Reading a file larger than 2 GB on a 32-bit system fails with an error message.\n'
            ' = = Reception = = \n'
            'Setext title\n============\n')
    assert sentences(text) == [
        '# Installing', 'The archive needs a compiler', 'and some disk space', 'Known problems',
        'Reading a file larger than 2 GB on a 32-bit system fails with an error message.',
        '= = Reception = =', 'Setext title', '============']


def test_each_list_item_is_a_sentence_and_a_wrapped_item_stays_whole():
    text = ('Changes in this release:\n'
            '- Grapheme cluster boundaries follow the extended rules of the annex, so\n'
            '  an emoji with a modifier is one cluster.\n'
            '- East Asian widths come from the data file.\n'
            '* Case folding uses the full tables. Simple folding is an option.\n'
            '2. Unpack the archive.\n'
            '10) Run the tests.')
    assert sentences(text) == [
        'Changes in this release:',
        '- Grapheme cluster boundaries follow the extended rules of the annex, so\n  an emoji with a modifier is one cluster.',
        '- East Asian widths come from the data file.',
        '* Case folding uses the full tables.', 'Simple folding is an option.',
        '2. Unpack the archive.', '10) Run the tests.']
    # A numbered item inside a paragraph: "2." is no sentence of its own.
    assert sentences('Bake the dough. 2. Let it cool before cutting.') == [
        'Bake the dough.', '2. Let it cool before cutting.']


def test_table_rows_and_code_lines_are_sentences_of_their_own():
    text = ('| option | default |\n|---|---|\n| --prefix | /usr/local |\n'
            '- | amount (in thousands)\n2014 | $385373\n\n'
            'Run it:\n\n```sh\n./configure --prefix=/opt/toolkit\nmake -j4 install\n```\n\n'
            '    --with-icu    link against the system library\n'
            '    --without-docs    skip the manual\n')
    assert sentences(text) == [
        '| option | default |', '|---|---|', '| --prefix | /usr/local |', '- | amount (in thousands)',
        '2014 | $385373', 'Run it:', '```sh', './configure --prefix=/opt/toolkit', 'make -j4 install', '```',
        '--with-icu    link against the system library', '--without-docs    skip the manual']
    kinds = line_kinds(['```', 'x = 1', '```', '', '    y = 2', '- item', '', '    continued item'])
    assert kinds == ['fence', 'code', 'fence', 'blank', 'code', 'item', 'blank', 'prose']


def test_abbreviations_initials_and_numbers_end_no_sentence():
    text = ('Mr. Speaker, Dr. Rivera and P. falciparum met at St. Edmund, e.g. on Tuesday '
            '(Fernando et al. 2001). Version 2.3.1 is out! Is it? "Yes." (See Box 3.) Done')
    assert sentences(text) == [
        'Mr. Speaker, Dr. Rivera and P. falciparum met at St. Edmund, e.g. on Tuesday (Fernando et al. 2001).',
        'Version 2.3.1 is out!', 'Is it?', '"Yes."', '(See Box 3.)', 'Done']


def test_quotes_join_their_wrapped_lines():
    text = '> A note for packagers: the test suite writes temporary files into the\n> build directory.'
    assert sentences(text) == [text]


@pytest.mark.parametrize('line,next_line,width,soft', [
    ('a' * 70, 'wordy', 75, True),        # the next word would not have fit
    ('a' * 40, 'b', 75, False),           # room left on the line: it ended on purpose
    ('a' * 60, 'b', 75, True),            # a ragged margin, within a quarter of the width
    ('Introduction', 'Malaria is', 2000, False),
])
def test_soft_break(line, next_line, width, soft):
    assert soft_break(line, next_line, width) is soft


def test_spans_are_exact_and_linear_on_any_input():
    assert sentence_spans('') == [] and sentence_spans(' \n\n \t') == []
    text = ('Line one of a list\r\n- item\r\n\r\n' + WRAPPED + '\n\n') * 200
    spans = sentence_spans(text)
    assert len(spans) == 200 * 4
    assert all(text[s:e].strip() == text[s:e] for s, e in spans)
    assert block_spans('a\n\nb') == [(0, 1), (3, 4)]


def test_a_chunk_is_read_with_its_documents_sentences():
    document = DocumentSentences('Intro line.\n\n```\nx = 1\ny = 2\n```\n\n' + WRAPPED)
    text = document.text
    # A chunk starting inside the fence still reads its lines as code; one cut inside a sentence says so.
    start = text.index('y = 2')
    end = text.index('identifier') + 10
    spans, cut_start, cut_end = document.clip(start, end)
    chunk = text[start:end]
    assert [chunk[s:e] for s, e in spans] == ['y = 2', '```', chunk[chunk.index('This release'):]]
    assert chunk.endswith('listing all valid\nidentifier')
    assert (cut_start, cut_end) == (False, True)
    assert document.clip(text.index('= 1'), text.index('= 1') + 3) == ([(0, 3)], True, False)
    assert document.around(text.index('= 1')) == (text.index('x = 1'), text.index('x = 1') + 5)
    assert document.around(0) is None
