"""The exit statuses of every command, and the table of them in the README and docs."""

from pipelines.common import exits


def test_every_exit_status_is_documented_in_the_readme_and_docs():
    from pipelines import reference

    assert set(exits.EXIT_CODES) == {exits.OK, exits.UNEXPECTED, exits.FAILED, exits.DRIFT, exits.SYNC_FAILED,
                                     exits.REFUSED, exits.JOB_FAILED, exits.INTERRUPTED, exits.TERMINATED}
    table = exits.exit_codes_table()
    for page in ('README.md', 'docs/cli.md'):
        with open(f'{reference.DOCS}/../{page}', encoding='utf-8') as f:
            assert table in f.read(), page
