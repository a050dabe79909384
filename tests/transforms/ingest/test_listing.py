"""Listing the input: directories, globs and single files; special files and symbolic links, each accounted for."""

import os
import socket

from tests.helpers import outcome
from transforms.ingest import read
from transforms.ingest.listing import expand_input, relative_id
from transforms.ingest.reasons import BROKEN_LINK, REPEATED_DIRECTORY, SPECIAL_FILE


def test_expand_input_directory_is_recursive_and_sorted(corpus_dir):
    root, _ = corpus_dir
    got_root, paths = expand_input(str(root))
    assert got_root == str(root)
    assert [relative_id(p, got_root) for p in paths] == sorted(
        ['blank.md', 'latin1.txt', 'pasta.txt', 'records.jsonl', 'rows.parquet', 'slides.pdf', 'sub/orbits.md']
    )


def test_expand_input_glob_and_single_file(corpus_dir):
    root, _ = corpus_dir
    got_root, paths = expand_input(f'{root}/*.txt')
    assert got_root == str(root)
    assert [p.rsplit('/', 1)[-1] for p in paths] == ['latin1.txt', 'pasta.txt']
    got_root, paths = expand_input(f'{root}/sub/orbits.md')
    assert relative_id(paths[0], got_root) == 'orbits.md'


def test_fifo_socket_and_device_are_rejected_without_being_opened(tmp_path, monkeypatch):
    corpus = tmp_path / 'corpus'
    corpus.mkdir()
    os.mkfifo(corpus / 'pipe.txt')
    server = socket.socket(socket.AF_UNIX)
    monkeypatch.chdir(corpus)  # a relative name: socket paths are limited to ~100 bytes
    server.bind('sock.md')
    os.symlink('/dev/zero', corpus / 'zero.txt')
    (corpus / 'ok.txt').write_text('A regular file.')
    try:
        root, paths = expand_input(str(corpus))
        got = {p.rsplit('/', 1)[-1]: outcome(read.read_file(p, root)) for p in paths}  # would hang on the FIFO
    finally:
        server.close()
    assert got == {'ok.txt': [('', 'ok.txt')], 'pipe.txt': [('', SPECIAL_FILE)],
                   'sock.md': [('', SPECIAL_FILE)], 'zero.txt': [('', SPECIAL_FILE)]}


def test_every_symlink_the_listing_meets_is_accounted_for(tmp_path):
    corpus, elsewhere = tmp_path / 'corpus', tmp_path / 'elsewhere'
    (corpus / 'real').mkdir(parents=True)
    elsewhere.mkdir()
    (corpus / 'real' / 'a.txt').write_text('A file in a real directory.')
    (elsewhere / 'b.txt').write_text('A file reachable only through a linked directory.')
    os.symlink(elsewhere, corpus / 'linked')
    os.symlink(tmp_path / 'missing.txt', corpus / 'dangling.txt')
    os.symlink(corpus / 'loop2.txt', corpus / 'loop1.txt')
    os.symlink(corpus / 'loop1.txt', corpus / 'loop2.txt')
    os.symlink(corpus, corpus / 'real' / 'up')  # a directory loop
    root, paths = expand_input(str(corpus))
    got = {relative_id(p, root): outcome(read.read_file(p, root))[0][1] for p in paths}
    assert got == {
        'real/a.txt': 'real/a.txt', 'linked/b.txt': 'linked/b.txt',
        'dangling.txt': BROKEN_LINK, 'loop1.txt': BROKEN_LINK, 'loop2.txt': BROKEN_LINK,
        'real/up': REPEATED_DIRECTORY,
    }


def test_an_existing_path_with_glob_characters_is_a_path(tmp_path):
    folder = tmp_path / 'dir[1]'
    folder.mkdir()
    (folder / 'a.txt').write_text('Inside a folder with brackets in its name.')
    (tmp_path / 'dir1').mkdir()  # what the glob would match
    root, paths = expand_input(str(folder))
    assert root == str(folder) and [relative_id(p, root) for p in paths] == ['a.txt']
    root, paths = expand_input(str(folder / 'a.txt'))
    assert paths == [str(folder / 'a.txt')]


def test_hidden_files_and_directories_are_listed_and_read_like_any_other(tmp_path):
    # Decided and documented (docs/inputs.md): nothing the listing meets is skipped unseen.
    (tmp_path / '.drafts').mkdir()
    (tmp_path / '.drafts' / 'plan.txt').write_text('A hidden draft.')
    (tmp_path / '.notes.md').write_text('A hidden note.')
    (tmp_path / 'seen.txt').write_text('A plain file.')
    root, paths = expand_input(str(tmp_path))
    assert [relative_id(p, root) for p in paths] == ['.drafts/plan.txt', '.notes.md', 'seen.txt']
    assert [d.doc_id for p in paths for d in read.read_file(p, root)] == ['.drafts/plan.txt', '.notes.md', 'seen.txt']
