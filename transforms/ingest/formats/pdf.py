"""PDF files: the text layer of every page (pypdf), pages separated by a blank line."""

from __future__ import annotations

import io
import logging
import re
from typing import Optional, Union

from transforms.ingest.formats.base import FILE_TOO_LARGE, Extracted, Format, document_metadata
from transforms.ingest.layout import TextBuilder
from transforms.types import Layout, Rejected

# Reason codes of this format.
PDF_ENCRYPTED = 'pdf_encrypted'
PDF_NO_TEXT = 'pdf_no_text'
PDF_CORRUPT = 'pdf_corrupt'

PAGE_SEPARATOR = '\n\n'
# A complete PDF ends with %%EOF, possibly followed by padding (NULs, blanks, junk a mailer added).
_EOF_MARKER = b'%%EOF'
# What after the last %%EOF shows a revision that was cut before its own %%EOF (an incremental update).
_REVISION = re.compile(rb'\bobj\b|\bxref\b|\btrailer\b|\bstartxref\b')


def truncation(data: bytes) -> Optional[str]:
    """Why a PDF looks cut short, or None: no `%%EOF`, or a revision begun after the last one.

    Bytes after the last `%%EOF` that start no revision (NUL or blank
    padding, a mailer's junk) are ignored, as pypdf ignores them.
    """
    end = data.rfind(_EOF_MARKER)
    if end < 0:
        return 'truncated: no %%EOF marker'
    if _REVISION.search(data, end + len(_EOF_MARKER)):
        return 'truncated: a revision after the last %%EOF marker has none of its own'
    return None


def extract(data: bytes, path: str) -> Union[Extracted, Rejected]:
    """Extracts the text layer of a PDF, one document per file.

    Pages are joined with "\\n\\n" and their exact `(start, end)` offsets kept
    in the layout; an empty page has an empty span. A file protected by a
    user password is rejected (`pdf_encrypted`); one protected only by an
    owner password (opens with an empty password) is read. A file without
    `%%EOF`, or with a revision after its last one, is rejected as truncated
    (`truncation`): pypdf would otherwise rebuild what it can and silently
    lose the rest. A stream that inflates past pypdf's limits is
    `file_too_large`.

    Args:
      data: The raw file.
      path: The file, for rejected rows.

    Returns:
      The text with `format`, `page_count` and `title` (from the document
      info, when set); or why it is rejected (`pdf_encrypted`,
      `pdf_no_text`, `pdf_corrupt`).
    """
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError

    if not data.startswith(b'%PDF-'):
        return Rejected(path, None, PDF_CORRUPT, 'no %PDF- header')
    problem = truncation(data)
    if problem:
        return Rejected(path, None, PDF_CORRUPT, problem)
    # pypdf logs every recoverable oddity of real-world files; the outcome is in the result.
    logging.getLogger('pypdf').setLevel(logging.ERROR)
    builder = TextBuilder()
    pages = []
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(''):
            return Rejected(path, None, PDF_ENCRYPTED, 'encrypted with a user password')
        for page in reader.pages:
            start = builder.add(page.extract_text().strip(), PAGE_SEPARATOR)
            pages.append((start, builder.length))
        title = reader.metadata.title if reader.metadata else None
    except (FileNotDecryptedError, DependencyError) as e:
        return Rejected(path, None, PDF_ENCRYPTED, f'{type(e).__name__}: {e}')
    except LimitReachedError as e:  # a stream that inflates past pypdf's limits (75 MB): a bomb
        return Rejected(path, None, FILE_TOO_LARGE, f'a stream inflates past pypdf\'s limit ({e})')
    except Exception as e:  # pypdf raises many types (and RecursionError) on malformed files
        return Rejected(path, None, PDF_CORRUPT, f'{type(e).__name__}: {e}')
    if not pages:
        return Rejected(path, None, PDF_CORRUPT, 'no pages (broken page tree?)')
    if not builder.text().strip():
        return Rejected(path, None, PDF_NO_TEXT, f'no text layer in {len(pages)} page(s) (scanned images?)')
    return Extracted(builder.text(), document_metadata('pdf', title, page_count=len(pages)), Layout(pages=tuple(pages)))


FORMAT = Format(
    name='pdf',
    suffixes=('.pdf',),
    max_bytes=50 * 10**6,
    extracts='the text layer of every page (pypdf), pages separated by a blank line; '
             'no OCR: image-only files are rejected',
    metadata='`format`, `page_count`, `title` (document info); per chunk `pages` (the page numbers it spans)',
    extract=extract,
    reasons={
        PDF_ENCRYPTED: 'needs a user password (one with only an owner password is read)',
        PDF_NO_TEXT: 'no text layer (scanned images: there is no OCR)',
        PDF_CORRUPT: 'truncated (no `%%EOF`, or a revision after the last one) or not parseable by pypdf',
    },
)
