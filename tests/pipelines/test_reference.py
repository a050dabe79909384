"""The generated tables of docs/: fresh, complete, and made only from the code."""

from pipelines import reference
from transforms.output import tables


def test_every_generated_table_in_docs_is_fresh():
    assert reference.stale_pages() == [], 'regenerate them: python -m pipelines.reference'


def test_every_flag_of_each_job_is_in_its_table():
    for generate, flags in ((reference.build_flags, ('--input', '--embed_kernels', '--minhash_seed', '--topic_seed',
                                                     '--random_seed', '--intra_doc_min_salience')),
                            (reference.query_flags, ('--index', '--where', '--weight_recency')),
                            (reference.evaluate_flags, ('--chunkers', '--cache_max_bytes'))):
        table = generate()
        for flag in flags:
            assert f'`{flag}`' in table


def test_every_output_column_has_a_description():
    for spec in (tables.CHUNKS_TABLE, tables.DROPPED_TABLE, tables.REJECTED_TABLE, tables.DOCUMENTS_TABLE):
        assert set(tables.COLUMN_DOCS[spec.directory]) == set(spec.schema.names), spec.directory
