"""Publish gates: pure checks of a finished run's manifest against the run it would replace.

A build publishes (moves LATEST, or replaces a plain --output) only when
every gate passes. Each gate reads figures the manifest already holds
(counts written from the tables, the lossless audit) and, for the canary,
hit counts the launcher measured; nothing here reads a table or holds a
chunk. `evaluate` returns the verdict written into the run's manifest.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from transforms.validate import check_fraction

# The exit status of a build that gates refused (2: bad settings or input; 3
# and 4 are the vector-store sync's drift and failure).
REFUSED_EXIT_STATUS = 5
PASS, FAIL, SKIP = 'pass', 'fail', 'skip'
# Shares are compared with this slack, so 0.3 - 0.2 is not "above 0.1".
_EPSILON = 1e-9


class Refused(Exception):
    """A run that is complete but that its gates kept from being published (exit status 5: `exit_code`, which the command reports)."""

    exit_code = REFUSED_EXIT_STATUS


@dataclasses.dataclass(frozen=True)
class GateConfig:
    """The gates of a build and their limits; the defaults pass a normal nightly rebuild.

    Attributes:
      enforce: False: the verdict is written and logged, a failed gate does not stop publishing.
      max_rejected_share: Refuse when more than this share of the input
        records is rejected. A backstop for an export that came back broken;
        test corpora and scraped folders reject half their files, so it is high.
      max_rejected_rise: Refuse when the rejected share exceeds the previous
        run's by more than this (0.1: ten points; a parser that now rejects every PDF).
      max_documents_drop: Refuse when indexed documents fall by more than
        this share of the previous run's (half the export vanished).
      max_kept_drop: The same for kept chunks.
      max_dropped_rise: Refuse when the share of chunks the filters drop
        exceeds the previous run's by more than this (a config that makes a
        filter drop 40% of the corpus).
      max_lost_share: Refuse when the lossless audit (when the manifest has
        one) finds more than this share of the audited sentences in neither a
        kept chunk nor a delta.
      canary: A JSONL file of questions (`question`, and `doc_id` or `text`)
        retrieval must answer, or None for no canary.
      canary_min_share: Refuse when fewer than this share of the canary questions is found.
      canary_k: A question is found when its document or text is in the top k.
    """

    enforce: bool = True
    max_rejected_share: float = 0.9
    max_rejected_rise: float = 0.1
    max_documents_drop: float = 0.2
    max_kept_drop: float = 0.2
    max_dropped_rise: float = 0.1
    max_lost_share: float = 0.5
    canary: Optional[str] = None
    canary_min_share: float = 0.8
    canary_k: int = 5

    def __post_init__(self):
        for name in ('max_rejected_share', 'max_rejected_rise', 'max_documents_drop', 'max_kept_drop',
                     'max_dropped_rise', 'max_lost_share', 'canary_min_share'):
            check_fraction(f'--gate_{name}', getattr(self, name))
        if self.canary_k < 1:
            raise ValueError(f'--gate_canary_k must be >= 1, got {self.canary_k}')


@dataclasses.dataclass(frozen=True)
class CanaryResult:
    """How many canary questions retrieval found on one run, and the first ones it missed."""

    found: int
    total: int
    missed: tuple[str, ...] = ()

    @property
    def share(self) -> float:
        return self.found / self.total if self.total else 1.0


def rejected_share(counts: dict) -> float:
    """Rejected records over all records: each record is indexed or rejected, exactly once."""
    records = counts['documents_indexed'] + counts['rejected']
    return counts['rejected'] / records if records else 0.0


def dropped_share(counts: dict) -> float:
    """Chunks the filters dropped over the chunks before the filters."""
    before = counts['chunks_before_filters']
    return counts['dropped'] / before if before else 0.0


def fall(before: int, after: int) -> float:
    """By what share of `before` a count fell (0 when it rose or there was nothing before)."""
    return max(0.0, (before - after) / before) if before else 0.0


def _check(name: str, flag: str, status: str, value, limit, previous, says: str) -> dict:
    return {'gate': name, 'flag': flag, 'status': status, 'value': value, 'limit': limit,
            'previous': previous, 'says': says}


def _above(value: float, limit: float) -> str:
    return FAIL if value > limit + _EPSILON else PASS


def _pct(x: float) -> str:
    return f'{100 * x:.1f}%'


def rejected_gates(config: GateConfig, counts: dict, previous: Optional[dict]) -> list[dict]:
    """The rejected share, absolute and against the previous run."""
    share = rejected_share(counts)
    checks = [_check(
        'rejected_share', '--gate_max_rejected_share', _above(share, config.max_rejected_share),
        round(share, 6), config.max_rejected_share, None,
        f'{counts["rejected"]} of {counts["documents_indexed"] + counts["rejected"]} records rejected '
        f'({_pct(share)}; limit {_pct(config.max_rejected_share)})')]
    if previous is None:
        checks.append(_check('rejected_rise', '--gate_max_rejected_rise', SKIP, None,
                             config.max_rejected_rise, None, 'no previous run'))
        return checks
    before = rejected_share(previous)
    checks.append(_check(
        'rejected_rise', '--gate_max_rejected_rise', _above(share - before, config.max_rejected_rise),
        round(share - before, 6), config.max_rejected_rise, round(before, 6),
        f'rejected share {_pct(share)}, was {_pct(before)} (rise limit {_pct(config.max_rejected_rise)})'))
    return checks


def drop_gates(config: GateConfig, counts: dict, previous: Optional[dict]) -> list[dict]:
    """Indexed documents, kept chunks and the dropped share against the previous run."""
    gates = (('documents_drop', '--gate_max_documents_drop', 'documents_indexed', 'indexed documents',
              config.max_documents_drop),
             ('kept_drop', '--gate_max_kept_drop', 'chunks', 'kept chunks', config.max_kept_drop))
    if previous is None:
        return [_check(name, flag, SKIP, None, limit, None, 'no previous run')
                for name, flag, _, _, limit in gates] + [
            _check('dropped_rise', '--gate_max_dropped_rise', SKIP, None, config.max_dropped_rise, None,
                   'no previous run')]
    checks = []
    for name, flag, key, what, limit in gates:
        share = fall(previous[key], counts[key])
        checks.append(_check(
            name, flag, _above(share, limit), round(share, 6), limit, previous[key],
            f'{what} {counts[key]}, were {previous[key]} ({_pct(share)} fewer; limit {_pct(limit)})'))
    now, before = dropped_share(counts), dropped_share(previous)
    checks.append(_check(
        'dropped_rise', '--gate_max_dropped_rise', _above(now - before, config.max_dropped_rise),
        round(now - before, 6), config.max_dropped_rise, round(before, 6),
        f'filters dropped {_pct(now)} of the chunks, were {_pct(before)} '
        f'(rise limit {_pct(config.max_dropped_rise)})'))
    return checks


def lossless_gate(config: GateConfig, audit: Optional[dict]) -> dict:
    """The share of audited sentences the index holds nowhere, when the manifest has an audit."""
    flag = '--gate_max_lost_share'
    if not audit or not audit.get('sentences_checked'):
        return _check('lost_share', flag, SKIP, None, config.max_lost_share, None,
                      'no lossless audit in the manifest' if not audit else 'no sentence audited')
    share = audit.get('sentences_lost', 0) / audit['sentences_checked']
    return _check('lost_share', flag, _above(share, config.max_lost_share), round(share, 6),
                  config.max_lost_share, None,
                  f'{audit.get("sentences_lost", 0)} of {audit["sentences_checked"]} audited sentences lost '
                  f'({_pct(share)}; limit {_pct(config.max_lost_share)})')


def canary_gates(config: GateConfig, result: Optional[CanaryResult],
                 previous: Optional[CanaryResult]) -> list[dict]:
    """The canary's found share, and found questions against the previous run's."""
    if result is None:
        return []
    missed = f'; missed e.g. {"; ".join(result.missed[:3])}' if result.missed else ''
    checks = [_check(
        'canary_share', '--gate_canary_min_share',
        FAIL if result.share + _EPSILON < config.canary_min_share else PASS, round(result.share, 6),
        config.canary_min_share, None,
        f'{result.found} of {result.total} canary questions found in the top {config.canary_k} '
        f'({_pct(result.share)}; at least {_pct(config.canary_min_share)}){missed}')]
    if previous is None:
        checks.append(_check('canary_vs_previous', '--gate_canary', SKIP, None, None, None, 'no previous run'))
    else:
        checks.append(_check(
            'canary_vs_previous', '--gate_canary', FAIL if result.found < previous.found else PASS,
            result.found, previous.found, previous.found,
            f'{result.found} canary questions found, the previous run found {previous.found}'))
    return checks


def evaluate(config: GateConfig, manifest: dict, previous: Optional[dict],
             canary: Optional[CanaryResult] = None, previous_canary: Optional[CanaryResult] = None,
             previous_run: Optional[str] = None) -> dict:
    """The verdict of every gate on a run.

    Args:
      config: The gates and their limits.
      manifest: The new run's manifest (its `counts`, and `lossless` when present).
      previous: The manifest of the run it would replace (LATEST's), or None.
      canary: The canary measured on the new run, when one is configured.
      previous_canary: The same canary on the previous run.
      previous_run: The previous run's id or path, for the verdict.

    Returns:
      `{'passed', 'enforced', 'previous_run', 'failed': [gate names], 'checks': [...]}`;
      each check has gate, flag, status (pass/fail/skip), value, limit, previous, says.
    """
    counts = manifest['counts']
    before = previous.get('counts') if previous else None
    checks = (rejected_gates(config, counts, before) + drop_gates(config, counts, before)
              + [lossless_gate(config, manifest.get('lossless'))]
              + canary_gates(config, canary, previous_canary))
    failed = [c['gate'] for c in checks if c['status'] == FAIL]
    return {'passed': not failed, 'enforced': config.enforce, 'previous_run': previous_run,
            'failed': failed, 'checks': checks}


def refusal_lines(verdict: dict) -> list[str]:
    """One line per failed gate: its name, the figures and the flag that sets its limit."""
    return [f'gate {c["gate"]} failed: {c["says"]} ({c["flag"]})'
            for c in verdict['checks'] if c['status'] == FAIL]


def refuses(verdict: Optional[dict]) -> bool:
    """Whether a verdict keeps its run from being published."""
    return bool(verdict) and not verdict['passed'] and verdict['enforced']
