"""Publishing a plain index: an index caught between the two renames is put back."""

import json

from transforms.output import publish


def test_clean_staging_puts_back_an_index_caught_between_the_two_renames(tmp_path):
    out = tmp_path / 'out'
    old = tmp_path / 'out.staging-1-2.old'  # the previous index, moved aside by publish
    old.mkdir()
    (old / 'manifest.json').write_text(json.dumps({'run_id': 'previous'}))
    (tmp_path / 'out.staging-1-2').mkdir()  # the new one, not yet renamed
    assert publish.clean_staging(str(out)) == [str(tmp_path / 'out.staging-1-2')]
    assert json.loads((out / 'manifest.json').read_text()) == {'run_id': 'previous'}
