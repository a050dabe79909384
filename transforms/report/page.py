"""report.html: what a run did, for the person deciding whether to trust it.

One self-contained page (inline CSS and SVG, no script, nothing fetched):
the funnel, the gates' verdict, the change against the previous run, the
rejected records by reason, per filter a sample of dropped chunks beside
their keeper with the differing words marked, deltas beside their keeper,
the time per stage and the settings. Made from manifest.json, diff.json and
bounded samples of the tables (`samples`), so the same run gives the same
bytes and a run of any size a page of bounded size: every id, source and
value is cut to SHOWN_CHARS and every text to TEXT_CHARS (`shown`), and
bidi controls are shown as code points, so that no name reorders the page.
"""

from __future__ import annotations

import json
import posixpath
from html import escape
from typing import Iterable, Optional


from transforms import storage
from transforms.ingest import formats, reasons
from transforms.output import tables
from transforms.report import samples as run_samples
from transforms.report.svg import bar_chart, number
from transforms.report.words import word_diff

# The stages of manifest.json's `seconds` in the order a build runs them.
STAGE_ORDER = ('read', 'chunk', 'embed', 'minhash', 'entities', 'write', 'index', 'bm25')
# Ids of diff.json shown per change category (diff.json lists up to 100).
LISTED_IDS = 10

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1100px; color: #1d1d1f; padding: 0 16px }
h1 { font-size: 22px; margin-bottom: 4px } h2 { font-size: 17px; margin-top: 32px; border-bottom: 1px solid #ddd }
h3 { font-size: 15px; margin-bottom: 6px }
table { border-collapse: collapse; margin: 8px 0 } td, th { padding: 3px 10px; border-bottom: 1px solid #eee;
  text-align: left; vertical-align: top } td.n { text-align: right; font-variant-numeric: tabular-nums }
.pass { color: #11772f; font-weight: 600 } .fail { color: #b3261e; font-weight: 600 } .skip { color: #777 }
.badge { display: inline-block; padding: 2px 10px; border-radius: 10px; color: #fff; font-weight: 600 }
.badge.pass { background: #11772f } .badge.fail { background: #b3261e } .badge.skip { background: #777 }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 10px; margin: 8px 0 16px }
.pair > div { background: #fafafa; border: 1px solid #e4e4e4; padding: 8px; white-space: pre-wrap;
  font-size: 13px; overflow-wrap: anywhere }
.pair .head { font-size: 12px; color: #555; white-space: normal; margin-bottom: 4px }
mark { background: #ffe08a } .bar { fill: #4a78c2 } .label, .value { font-size: 12px; fill: #333 }
code { background: #f3f3f3; padding: 0 3px; overflow-wrap: anywhere; unicode-bidi: isolate } .muted { color: #666 }
td, .pair > div, h1, h3 { unicode-bidi: isolate } td { overflow-wrap: anywhere }
"""


# Ids, sources, details and settings are cut to this many characters, texts beside their keeper to TEXT_CHARS,
# the last an ellipsis: a 100,000-character id costs the page 300 characters, not 200 KB.
SHOWN_CHARS = 300
TEXT_CHARS = 3000
ELLIPSIS = '\u2026'
# Characters that reorder what follows them (bidi embeddings, overrides, isolates, marks): in a file
# name (`invoice\u202etxt.exe.md`) they would reverse it and the page after it. Shown as their code points.
BIDI_CONTROLS = frozenset('\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069')


def shown(value, limit: Optional[int] = SHOWN_CHARS) -> str:
    """A value as the page shows it, before escaping: cut to `limit` characters (None: whole), bidi controls visible.

    Each bidi control becomes `[U+202E]`, text that reorders nothing.
    """
    text = '' if value is None else str(value)
    if limit is not None and len(text) > limit:
        text = text[:limit - 1] + ELLIPSIS
    return ''.join(f'[U+{ord(c):04X}]' if c in BIDI_CONTROLS else c for c in text)


def _e(value, limit: Optional[int] = SHOWN_CHARS) -> str:
    """A value escaped for the page, in text or in an attribute (`shown`)."""
    return escape(shown(value, limit))


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """A table of already escaped cells."""
    head = ''.join(f'<th>{h}</th>' for h in header)
    body = ''.join('<tr>' + ''.join(rows_cells(r)) + '</tr>' for r in rows)
    return f'<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def rows_cells(row: Iterable[str]) -> list[str]:
    return [c if c.startswith('<td') else f'<td>{c}</td>' for c in row]


def _count(key: str, value) -> str:
    """A number cell the browser test reads back (`data-funnel`)."""
    return f'<td class="n" data-funnel="{_e(key)}">{_e(value)}</td>'


def funnel_steps(manifest: dict) -> list[tuple[str, str, int]]:
    """`(key, label, count)` from the input files to the index rows."""
    counts = manifest['counts']
    steps = [('files', 'files listed', counts['files']),
             ('documents_read', 'documents read', counts['documents_read']),
             ('documents_indexed', 'documents indexed', counts['documents_indexed']),
             ('chunks_before_filters', 'chunks before the filters', counts['chunks_before_filters'])]
    steps += [(f'filter:{i}:{f["name"]}', f'kept after {f["name"]}', f['after'])
              for i, f in enumerate(manifest.get('filters', []))]
    steps += [('chunks', 'kept chunks', counts['chunks']), ('deltas', 'delta chunks', counts['deltas']),
              ('index_rows', 'index rows (kept + deltas)', counts['chunks'] + counts['deltas'])]
    return steps


def funnel_section(manifest: dict) -> str:
    steps = funnel_steps(manifest)
    rows, previous = [], None
    for key, label, count in steps:
        # Only a filter changes the count of the step before it in kind (chunks to chunks).
        change = f'{count - previous:+,}' if key.startswith('filter:') else ''
        rows.append([_e(label), _count(key, count), f'<td class="n">{_e(change)}</td>'])
        previous = count
    chart = bar_chart([(label, count) for _, label, count in steps], 'The funnel: input to index rows')
    filters = _table(['filter', 'threshold', 'in', 'kept', 'dropped'], (
        [f'<code>{_e(f["name"])}</code>', _e(f.get('threshold')), f'<td class="n">{_e(f["before"])}</td>',
         f'<td class="n">{_e(f["after"])}</td>', f'<td class="n">{_e(f["dropped"])}</td>']
        for f in manifest.get('filters', [])))
    return (f'<h2 id="funnel">Funnel</h2>{_table(["step", "count", "change"], rows)}{chart}'
            f'<h3>Filters, in the order they ran</h3>{filters}')


def gates_section(verdict: Optional[dict]) -> str:
    if not verdict:
        return '<h2 id="gates">Publish gates</h2><p class="muted">This run has no gate verdict.</p>'
    state = 'pass' if verdict['passed'] else 'fail'
    said = ('passed: published' if verdict['passed'] else
            'refused: not published' if verdict['enforced'] else 'failed, published anyway (--gates off)')
    rows = [[_e(c['gate']), f'<td class="{_e(c["status"])}">{_e(c["status"])}</td>', _e(c['says']),
             f'<code>{_e(c["flag"])}</code>'] for c in verdict['checks']]
    against = _e(verdict.get('previous_run') or 'no previous run')
    return (f'<h2 id="gates">Publish gates</h2><p><span class="badge {state}" data-verdict="{state}">'
            f'{_e(said)}</span> <span class="muted">against {against}</span></p>'
            f'{_table(["gate", "status", "figures", "limit set by"], rows)}')


def _ids(listed: dict) -> str:
    ids = listed.get('ids', [])[:LISTED_IDS]
    more = listed.get('count', 0) - len(ids)
    return ', '.join(f'<code>{_e(i)}</code>' for i in ids) + (f' <span class="muted">and {more} more</span>'
                                                               if more > 0 else '')


def changes_section(diff: Optional[dict]) -> str:
    title = '<h2 id="changes">Change against the previous run</h2>'
    if not diff:
        return title + '<p class="muted">No diff.json.</p>'
    docs, chunks, kept = diff['documents'], diff['chunks'], diff['kept']
    rows = [
        ['documents added', _count('diff:documents_added', docs['added']['count']), _ids(docs['added'])],
        ['documents removed', _count('diff:documents_removed', docs['removed']['count']), _ids(docs['removed'])],
        ['documents changed', _count('diff:documents_changed', docs['changed']['count']), _ids(docs['changed'])],
        ['chunks added', f'<td class="n">{chunks["added"]["count"]}</td>', _ids(chunks['added'])],
        ['chunks removed', f'<td class="n">{chunks["removed"]["count"]}</td>', _ids(chunks['removed'])],
        ['newly dropped (were kept)', f'<td class="n">{kept["newly_dropped"]["count"]}</td>',
         _ids(kept['newly_dropped'])],
        ['newly kept (were dropped)', f'<td class="n">{kept["newly_kept"]["count"]}</td>', _ids(kept['newly_kept'])],
    ]
    since = _e(diff.get('previous_run') or 'nothing (a first build)')
    return (f'{title}<p>Since {since}: documents {docs["before"]} → {docs["after"]}, chunks '
            f'{chunks["before"]} → {chunks["after"]}, kept {kept["before"]} → {kept["after"]}.</p>'
            f'{_table(["what", "count", "ids"], rows)}')


def reason_meanings() -> dict[str, str]:
    """What each rejection reason means (the docs' reasons table)."""
    meanings = {**reasons.MEANINGS, **formats.base.MEANINGS}
    for f in formats.FORMATS:
        meanings.update(f.reasons)
    return meanings


def rejected_section(manifest: dict, examples: dict[str, list[dict]]) -> str:
    title = '<h2 id="rejected">Rejected records</h2>'
    by_reason = manifest['counts']['rejected_by_reason']
    if not by_reason:
        return title + '<p>No record was rejected.</p>'
    meanings = reason_meanings()
    rows = []
    for reason, n in by_reason.items():
        shown = '<br>'.join(f'<code>{_e(r["source"])}</code>: {_e(r["detail"])}' for r in examples.get(reason, []))
        rows.append([f'<code>{_e(reason)}</code>', _count(f'rejected:{reason}', n), _e(meanings.get(reason, '')),
                     shown])
    return title + _table(['reason', 'records', 'means', 'examples'], rows)


def _marked(pieces: list[tuple[str, bool]]) -> str:
    return ''.join(f'<mark>{_e(t, None)}</mark>' if differs else _e(t, None) for t, differs in pieces)


def pair(left_head: str, left: str, right_head: str, right: Optional[str]) -> str:
    """Two texts side by side, each cut to TEXT_CHARS, the differing words marked; a missing right side is said so."""
    left = shown(left, TEXT_CHARS)
    if right is None:
        return (f'<div class="pair"><div><div class="head">{left_head}</div>{_e(left, None)}</div>'
                f'<div><div class="head">{right_head}</div><span class="muted">(no keeper)</span></div></div>')
    a, b = word_diff(left, shown(right, TEXT_CHARS))
    return (f'<div class="pair"><div><div class="head">{left_head}</div>{_marked(a)}</div>'
            f'<div><div class="head">{right_head}</div>{_marked(b)}</div></div>')


def dropped_section(manifest: dict, dropped: dict[str, list[dict]], keepers: dict[str, str]) -> str:
    out = ['<h2 id="dropped">Dropped chunks, by filter</h2>']
    by_reason = manifest['counts']['dropped_by_reason']
    if not by_reason:
        out.append('<p>No chunk was dropped.</p>')
    for reason, n in by_reason.items():
        rows = dropped.get(reason, [])
        out.append(f'<h3><code>{_e(reason)}</code>: {n:,} dropped, {len(rows)} shown</h3>')
        for r in rows:
            score = '' if r['score'] is None else f', score {r["score"]:.3f}'
            keeper = r['duplicate_of']
            out.append(pair(f'dropped <code>{_e(r["chunk_id"])}</code>{_e(score)}', r['text'],
                            f'keeper <code>{_e(keeper)}</code>' if keeper else 'keeper',
                            keepers.get(keeper) if keeper else None))
    return ''.join(out)


def deltas_section(manifest: dict, deltas: list[dict], keepers: dict[str, str]) -> str:
    out = [f'<h2 id="deltas">Deltas: {manifest["counts"]["deltas"]:,} chunks of news kept from near-duplicates</h2>']
    if not deltas:
        out.append('<p>No delta chunk.</p>')
    for r in deltas:
        out.append(pair(f'delta <code>{_e(r["chunk_id"])}</code>', r['text'],
                        f'its keeper <code>{_e(r["delta_of"])}</code>', keepers.get(r['delta_of'])))
    return ''.join(out)


def timings_section(manifest: dict) -> str:
    seconds = manifest.get('seconds', {})
    order = {name: i for i, name in enumerate(STAGE_ORDER)}
    stages = sorted(((name, float(value)) for name, value in seconds.items() if name != 'wall'),
                    key=lambda s: (order.get(s[0], len(order)), s[0]))
    wall = seconds.get('wall')
    chart = bar_chart(stages, 'Busy seconds per stage, summed over workers', unit=' s', decimals=2)
    return (f'<h2 id="timings">Time per stage</h2><p>Wall time of the pipeline: '
            f'<span data-seconds="wall">{_e(number(wall) if wall is not None else "?")}</span> s; busy time '
            f'per stage, summed over workers:</p>{chart}')


def flatten(value, prefix: str = '') -> list[tuple[str, str]]:
    """Nested settings as `(dotted key, JSON value)` rows, in key order."""
    if isinstance(value, dict) and value:
        return [row for k in sorted(value) for row in flatten(value[k], f'{prefix}.{k}' if prefix else str(k))]
    return [(prefix, json.dumps(value, sort_keys=True))]


def settings_section(manifest: dict) -> str:
    rows = [[f'<code>{_e(k)}</code>', _e(v)] for k, v in flatten(manifest.get('config', {}))]
    model = manifest.get('model', {})
    kernels = manifest.get('kernels', {})
    return (f'<h2 id="settings">Settings</h2><p>Model <code>{_e(model.get("name"))}</code> '
            f'({_e(model.get("dim"))} dimensions), kernels <code>{_e(kernels.get("mode"))}</code>.</p>'
            f'{_table(["setting", "value"], rows)}')


def render(manifest: dict, diff: Optional[dict], sampled: dict) -> str:
    """The whole page, from a manifest, its diff.json and `samples.run_samples`."""
    run_id = manifest.get('run_id', '')
    verdict = manifest.get('gates')
    state = 'skip' if not verdict else 'pass' if verdict['passed'] else 'fail'
    body = ''.join([
        f'<h1>ragsieve run <code>{_e(run_id)}</code> '
        f'<span class="badge {state}">{_e({"pass": "published", "fail": "gates failed", "skip": "no gates"}[state])}'
        '</span></h1>',
        '<p class="muted"><a href="#funnel">funnel</a> · <a href="#gates">gates</a> · <a href="#changes">changes</a>'
        ' · <a href="#rejected">rejected</a> · <a href="#dropped">dropped</a> · <a href="#deltas">deltas</a>'
        ' · <a href="#timings">timings</a> · <a href="#settings">settings</a></p>',
        funnel_section(manifest), gates_section(verdict), changes_section(diff),
        rejected_section(manifest, sampled['rejected']),
        dropped_section(manifest, sampled['dropped'], sampled['keepers']),
        deltas_section(manifest, sampled['deltas'], sampled['keepers']),
        timings_section(manifest), settings_section(manifest),
    ])
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>ragsieve run {_e(run_id)}</title><style>{STYLE}</style></head>'
            f'<body>{body}</body></html>\n')


def _read_json(path: str) -> Optional[dict]:
    if not storage.exists(path):
        return None

    def load(p):
        return json.loads(storage.read_bytes(p).decode('utf-8'))

    return tables.load_file(path, load)


def write_report(directory: str, per_group: int = 5) -> str:
    """Writes `directory`/report.html from the run's manifest, diff.json and tables; returns its path.

    Raises:
      ValueError: If the directory holds no manifest.json, or a file of it is corrupt.
    """
    manifest = _read_json(posixpath.join(directory, tables.MANIFEST_FILE))
    if not isinstance(manifest, dict) or 'counts' not in manifest:
        raise ValueError(f'{directory} is not a complete ragsieve run: no {tables.MANIFEST_FILE} with counts')
    page = render(manifest, _read_json(posixpath.join(directory, tables.DIFF_FILE)),
                  run_samples.run_samples(directory, per_group))
    path = posixpath.join(directory, tables.REPORT_FILE)
    storage.write_atomic(path, page.encode('utf-8'))
    return path
