"""What the launcher checks of the models before any worker starts: sizes, a reduced precision, entity labels."""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

from pipelines.build_index.options import BuildConfig
from transforms.dedup.config import FilterConfig
from transforms.features import precision as precisions
from transforms.features.embedding import precision_check
from transforms.ingest import read

LOG = logging.getLogger('ragsieve.build')


def check_model(config: BuildConfig, model) -> tuple[int, int]:
    """Checks the model loaded on the launcher, before any worker starts.

    Returns:
      `(dim, max_seq_length)` of the model.
    """
    if config.chunker.chunk_size > model.max_seq_length:
        LOG.warning(
            'chunk_size %d exceeds the model max_seq_length %d: longer chunks are truncated '
            'when embedded', config.chunker.chunk_size, model.max_seq_length)
    return model.get_embedding_dimension(), model.max_seq_length


def sample_chunk_texts(config: BuildConfig, model, n: int = precisions.SAMPLE) -> list[str]:
    """A fixed, seeded sample of this corpus's chunk texts, read on the launcher before the pipeline.

    Reads the input's files in listing order until it has four times `n`
    chunks (or the files end), so a large corpus costs a few files.
    """
    from transforms.chunking.chunk_documents import document_spans
    from transforms.ingest.listing import expand_input
    from transforms.types import Document

    root, paths = expand_input(config.input)
    texts: list[str] = []
    for path in paths:
        for record in read.read_file(path, root, config.max_doc_chars, config.max_file_bytes,
                                     config.max_metadata_bytes):
            if isinstance(record, Document):
                spans = document_spans(record, config.chunker, model, config.embedding.batch_size)
                texts.extend(record.text[start:end] for start, end, _ in spans)
        if len(texts) >= 4 * n:
            break
    return precisions.sample_texts(texts, n)


def check_precision(config: BuildConfig, model) -> Optional[dict]:
    """On OpenVINO, checks its vectors against torch's fp32 on a sample: of the corpus's chunks in bf16 and
    int8, of the calibration set that ships with ragsieve in fp32.

    fp32 on OpenVINO differs from torch only in the order of its sums, whatever
    the text, so a fixed sample spanning every padded length checks its
    conversion: the check is then remembered per machine (`openvino_cache`),
    and a nightly build on the default backend never embeds a sample twice.

    Returns:
      The manifest's `embedding.precision_check` (`sampled`: `corpus` or `calibration set`), or None on torch.

    Raises:
      ValueError: When the minimum cosine is below `precision.min_cosine`.
    """
    if config.embedding.backend == precisions.TORCH:
        return None
    if config.embedding.precision == precisions.FP32:
        from transforms.features.quantize import calibration_texts

        sampled, texts = 'calibration set', precisions.sample_texts(calibration_texts())
    else:
        sampled, texts = 'corpus', sample_chunk_texts(config, model)
    check = precision_check(model, texts, config.embedding.batch_size)
    LOG.info('%s: min cosine %.6f, mean %.6f to fp32 on %d sampled texts of the %s',
             precisions.flag_of(check.precision, config.embedding.backend), check.min_cosine, check.mean_cosine,
             check.sample, sampled)
    return {**dataclasses.asdict(check), 'sampled': sampled}


def check_ner(config: FilterConfig) -> Optional[dict]:
    """Loads the spaCy model on the launcher when a filter needs entities.

    Returns:
      The model's meta.json (name, version, ...), or None when no filter needs entities.

    Raises:
      ValueError: If the model cannot be loaded or a label is one it never predicts.
    """
    if not config.needs_entities:
        return None
    from transforms.features.entities import load_ner

    settings = config.features
    nlp = load_ner(settings.spacy_model)
    if settings.entity_labels is not None:
        unknown = set(settings.entity_labels) - set(nlp.get_pipe('ner').labels)
        if unknown:
            raise ValueError(
                f'--entity_labels {sorted(unknown)} are not predicted by {settings.spacy_model!r} '
                f'(it predicts {sorted(nlp.get_pipe("ner").labels)})')
    return dict(nlp.meta)
