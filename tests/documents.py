"""Tiny HTML, PDF and DOCX files made by the tests themselves (no binary fixtures)."""

from __future__ import annotations

import io
from typing import Optional, Sequence


def _pdf_string(text: str) -> bytes:
    escaped = text.replace('\\', '\\\\').replace('(', '\\(').replace(')', '\\)')
    return b'(' + escaped.encode('latin-1') + b')'


def make_pdf(pages: Sequence[Optional[str]], title: Optional[str] = None) -> bytes:
    """A valid PDF, one page per item: lines of Helvetica text, or a drawn square (no text) for None.

    Written by hand (catalog, page tree, font, pages, content streams and an
    exact xref table), so the tests need no PDF writing library.
    """
    n = len(pages)
    # Objects: 1 catalog, 2 page tree, 3 font, 4 info, then (page, content) per page.
    page_ids = [5 + 2 * i for i in range(n)]
    objects = {
        1: b'<< /Type /Catalog /Pages 2 0 R >>',
        2: b'<< /Type /Pages /Kids [' + b' '.join(b'%d 0 R' % i for i in page_ids) + b'] /Count %d >>' % n,
        3: b'<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>',
        4: b'<< /Title ' + _pdf_string(title or '') + b' >>',
    }
    for page_id, text in zip(page_ids, pages):
        if text is None:
            stream = b'0 0 1 rg 72 72 200 200 re f'
        else:
            lines = b' T* '.join(_pdf_string(line) + b' Tj' for line in text.split('\n'))
            stream = b'BT /F1 11 Tf 14 TL 72 740 Td ' + lines + b' ET'
        objects[page_id] = (
            b'<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] '
            b'/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>' % (page_id + 1))
        objects[page_id + 1] = b'<< /Length %d >>\nstream\n' % len(stream) + stream + b'\nendstream'
    out = bytearray(b'%PDF-1.4\n')
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b'%d 0 obj\n' % number + objects[number] + b'\nendobj\n'
    xref = len(out)
    size = max(objects) + 1
    out += b'xref\n0 %d\n0000000000 65535 f \n' % size
    for number in range(1, size):
        out += b'%010d 00000 n \n' % offsets[number]
    info = b' /Info 4 0 R' if title else b''
    out += b'trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n' % (size, info, xref)
    return bytes(out)


def encrypt_pdf(data: bytes, user_password: str) -> bytes:
    """The same PDF, encrypted with AES-128 and a user password (pypdf)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password='owner', algorithm='AES-128')
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def make_docx(blocks: Sequence[tuple], title: Optional[str] = None) -> bytes:
    """A .docx from `('heading', level, text)`, `('p', text)`, `('table', [[cell, ...], ...])`
    and `('styled', style, based_on, text)` (a paragraph in a new style based on another)."""
    import docx
    from docx.enum.style import WD_STYLE_TYPE

    document = docx.Document()
    if title:
        document.core_properties.title = title
    for block in blocks:
        if block[0] == 'heading':
            document.add_heading(block[2], level=block[1])
        elif block[0] == 'p':
            document.add_paragraph(block[1])
        elif block[0] == 'styled':  # ('styled', style name, based on, text)
            if block[1] not in [s.name for s in document.styles]:
                style = document.styles.add_style(block[1], WD_STYLE_TYPE.PARAGRAPH)
                style.base_style = document.styles[block[2]]
            document.add_paragraph(block[3], style=block[1])
        else:
            rows = block[1]
            table = document.add_table(rows=len(rows), cols=len(rows[0]))
            for r, row in enumerate(rows):
                for c, value in enumerate(row):
                    table.cell(r, c).text = value
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


BOILERPLATE_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Installing the Widget CLI - Widget Docs</title>
<style>body { font-family: sans-serif } .nav a { color: red }</style>
<script>window.dataLayer = []; function track() { dataLayer.push('pageview') }</script></head>
<body>
<header><a href="/">Widget Docs</a>
<nav><ul><li><a href="/guide">Guide</a></li><li><a href="/api">API reference</a></li>
<li><a href="/blog">Blog</a></li><li><a href="/pricing">Pricing</a></li></ul></nav></header>
<div id="cookie-banner" class="consent"><p>We use cookies to improve your experience. By continuing
to browse you accept our cookie policy.</p><button>Accept all cookies</button></div>
<main><article>
<h1>Installing the Widget CLI</h1>
<p>The Widget command line tool runs on Linux, macOS and Windows. This page explains how to install
it and how to check that the installation works before you configure your first project.</p>
<h2>Requirements</h2>
<p>You need Python 3.10 or newer and about 50 MB of free disk space. The installer does not need
administrator rights when it installs into your home directory.</p>
<h2>Install</h2>
<p>Run <code>pip install widget-cli</code> in a terminal. Then run <code>widget --version</code>: it
prints the version number and exits.</p>
<h3>Upgrading</h3>
<p>To upgrade an existing installation, run the same command with the upgrade flag. Your
configuration files are kept.</p>
<table><tr><th>System</th><th>Supported</th></tr><tr><td>Linux</td><td>yes</td></tr></table>
</article></main>
<footer><p>Copyright 2026 Widget Inc. All rights reserved.</p><ul><li><a href="/privacy">Privacy</a></li>
<li><a href="/terms">Terms</a></li></ul></footer>
<script src="/analytics.js"></script>
</body></html>
"""
