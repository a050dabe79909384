"""Text normalization and content hashing shared by chunking and dedup."""

import hashlib
import re
import unicodedata

_WHITESPACE = re.compile(r'\s+')


def normalize_text(text: str) -> str:
    """NFKC, casefold and collapse whitespace, so trivially different copies match."""
    text = unicodedata.normalize('NFKC', text).casefold()
    return _WHITESPACE.sub(' ', text).strip()


def content_hash(text: str) -> str:
    """Returns a hex digest of the normalized text (stable across runs and workers)."""
    return hashlib.blake2b(normalize_text(text).encode('utf-8'), digest_size=16).hexdigest()


def text_key(text: str) -> str:
    """Hex digest of the exact text, for what depends on every character (features, changes)."""
    return hashlib.blake2b(text.encode('utf-8'), digest_size=16).hexdigest()
