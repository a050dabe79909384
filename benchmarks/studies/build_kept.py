"""The build's distributed filters against the evaluation's in-memory ones, on the Chroma corpora.

For each chunker, the chunks and their features come from the evaluation's
stages (`evaluation.features`, with a feature cache if given: an evaluation run
over the same chunkers fills it). Each filter at its default threshold then
runs twice: in memory (`in_memory.apply_filter`, what the evaluation grid
scores; the build's behaviour before the filters were scaled out) and as the
build's Beam stage (`dedup.stages.filter_transform`: keys, candidate pairs,
keyed rounds) on the DirectRunner. Prints per chunker and filter both kept
counts, whether the kept sets and each dropped chunk's keeper are
identical, and the counters the Beam stage reported (verified_edges,
capped_chunks, residual_edges, ...).

    python benchmarks/studies/build_kept.py --data ../shared/data/chroma --cache DIR \\
        [--chunkers recursive:400:200,...] [--filters similarity,ner_half,...]
"""

import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def beam_kept(chunks, specs, settings) -> tuple[dict, dict]:
    """`({filter: (kept ids, dropped 'id\\tkeeper' lines)}, {filter: counters})`: each filter alone, one pipeline."""
    import glob
    import tempfile

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms.dedup.stage_parts import DROPPED, KEPT, counter_namespace
    from transforms.dedup.stages import filter_transform

    folder = tempfile.mkdtemp(prefix='build-kept-')
    pipeline = beam.Pipeline(options=PipelineOptions(['--direct_running_mode=in_memory']))
    source = pipeline | beam.Create(chunks, reshuffle=False)
    for spec in specs:
        out = source | f'Filter_{spec.name}' >> filter_transform(0, spec, settings)
        _ = (out[KEPT] | f'Ids_{spec.name}' >> beam.Map(lambda c: c.chunk_id)
             | f'Write_{spec.name}' >> beam.io.WriteToText(os.path.join(folder, spec.name)))
        _ = (out[DROPPED] | f'Keepers_{spec.name}' >> beam.Map(lambda d: f'{d.chunk.chunk_id}\t{d.duplicate_of}')
             | f'WriteDropped_{spec.name}' >> beam.io.WriteToText(os.path.join(folder, 'dropped-' + spec.name)))
    result = pipeline.run()
    result.wait_until_finish()
    def lines(prefix):
        out = set()
        for path in glob.glob(os.path.join(folder, prefix + '-*')):
            with open(path) as f:
                out.update(line.rstrip('\n') for line in f)
        return out

    kept = {spec.name: (lines(spec.name), lines('dropped-' + spec.name)) for spec in specs}
    counters = {spec.name: {} for spec in specs}
    for r in result.metrics().query()['counters']:
        for spec in specs:
            name = r.key.metric.name
            if r.key.metric.namespace == counter_namespace(0, spec.name) and name not in ('in', 'kept', 'dropped'):
                counters[spec.name][name] = counters[spec.name].get(name, 0) + r.committed
    return kept, counters


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'))
    parser.add_argument('--cache', default=None, help='Feature cache folder (the evaluation\'s --cache).')
    parser.add_argument('--chunkers', default='recursive:400:200,fixed:400:200')
    parser.add_argument('--filters', default='exact,minhash,intra_doc,random,ner_exact,ner_half,similarity,similarity_topics,'
                                             'similarity_ner,similarity_topics_ner')
    args = parser.parse_args()
    sys.path.insert(0, REPO)
    from transforms.dedup.config import FilterConfig, FilterSpec
    from transforms.dedup.in_memory import apply_filter
    from transforms.evaluation.datasets import read_chroma
    from transforms.evaluation.features import FeatureStore, chunk_corpus, open_cache, with_features
    from transforms.evaluation.grid import chunker_label, parse_chunkers
    from transforms.features.embedding import EmbeddingConfig
    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model

    settings = FilterConfig()
    specs = [FilterSpec(name) for name in args.filters.split(',')]
    names = {s.name for s in specs}
    model = load_embedding_model(DEFAULT_EMBEDDING_MODEL)
    store = FeatureStore(model, 64, settings.features, open_cache(
        args.cache, EmbeddingConfig(DEFAULT_EMBEDDING_MODEL), model, settings.features, names))
    documents, _, _ = read_chroma(args.data)
    print('| chunker | filter | chunks | kept (in memory) | kept (Beam) | same kept | same keepers | Beam counters |')
    print('|---|---|---|---|---|---|---|---|')
    for chunker in parse_chunkers(args.chunkers):
        chunks = with_features(chunk_corpus(documents, chunker, store), names, store)
        beam_out, counters = beam_kept(chunks, specs, settings)
        for spec in specs:
            kept, dropped = apply_filter(chunks, spec, settings)
            memory = {c.chunk_id for c in kept}
            keepers = {f'{d.chunk.chunk_id}\t{d.duplicate_of}' for d in dropped}
            beam_ids, beam_keepers = beam_out[spec.name]
            shown = ', '.join(f'{k} {v}' for k, v in sorted(counters[spec.name].items())) or '-'
            print(f'| {chunker_label(chunker)} | {spec.name}@{spec.threshold} | {len(chunks)} | {len(memory)} | '
                  f'{len(beam_ids)} | {"yes" if memory == beam_ids else "NO"} | '
                  f'{"yes" if keepers == beam_keepers else "NO"} | {shown} |', flush=True)


if __name__ == '__main__':
    main()
