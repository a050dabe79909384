"""The publish gates, as pure functions of manifests: each gate, its default, the verdict."""

import pytest

from transforms.output import gates
from transforms.output.gates import CanaryResult, GateConfig


def manifest(documents=100, rejected=10, chunks_before=1000, kept=900, lossless=None):
    counts = {'documents_indexed': documents, 'rejected': rejected, 'chunks_before_filters': chunks_before,
              'chunks': kept, 'dropped': chunks_before - kept}
    return {'counts': counts, **({'lossless': lossless} if lossless is not None else {})}


def statuses(verdict):
    return {c['gate']: c['status'] for c in verdict['checks']}


def test_a_first_build_checks_only_the_absolute_gates():
    verdict = gates.evaluate(GateConfig(), manifest(), None)
    assert verdict['passed'] and verdict['failed'] == []
    assert statuses(verdict) == {'rejected_share': 'pass', 'rejected_rise': 'skip', 'documents_drop': 'skip',
                                 'kept_drop': 'skip', 'dropped_rise': 'skip', 'lost_share': 'skip'}


def test_a_normal_rebuild_passes_the_defaults():
    # A night's churn: a few documents gone, a few added, a little more dropped.
    new = manifest(documents=97, rejected=12, chunks_before=980, kept=870)
    assert gates.evaluate(GateConfig(), new, manifest())['passed']


def test_half_the_documents_vanished_is_refused_with_the_figures():
    verdict = gates.evaluate(GateConfig(), manifest(documents=50, chunks_before=500, kept=450), manifest(),
                             previous_run='r1')
    assert verdict['failed'] == ['documents_drop', 'kept_drop'] and verdict['previous_run'] == 'r1'
    assert gates.refuses(verdict)
    lines = gates.refusal_lines(verdict)
    assert lines[0] == ('gate documents_drop failed: indexed documents 50, were 100 (50.0% fewer; '
                        'limit 20.0%) (--gate_max_documents_drop)')
    assert 'kept chunks 450, were 900' in lines[1] and '--gate_max_kept_drop' in lines[1]


@pytest.mark.parametrize('new,gate', [
    (manifest(rejected=100), 'rejected_rise'),  # a parser that now rejects half: 9% -> 50%
    (manifest(kept=500), 'dropped_rise'),  # a filter setting that drops 50% instead of 10%
])
def test_each_relative_gate_refuses_its_failure(new, gate):
    assert gate in gates.evaluate(GateConfig(), new, manifest())['failed']


def test_the_absolute_rejected_share():
    assert gates.evaluate(GateConfig(), manifest(documents=5, rejected=95), None)['failed'] == ['rejected_share']
    assert gates.evaluate(GateConfig(max_rejected_share=0.05), manifest(), None)['failed'] == ['rejected_share']


def test_limits_are_inclusive_and_exact_at_the_boundary():
    # Exactly 20% fewer kept chunks is allowed; 0.3 - 0.2 is not "above 0.1" by a rounding error.
    assert gates.evaluate(GateConfig(), manifest(kept=720, chunks_before=1000), manifest(kept=900))['failed'] == [
        'dropped_rise']
    assert 'kept_drop' not in gates.evaluate(GateConfig(), manifest(kept=720, chunks_before=720),
                                             manifest(kept=900, chunks_before=900))['failed']
    assert gates.evaluate(GateConfig(), manifest(kept=700, chunks_before=1000),
                          manifest(kept=800, chunks_before=1000))['passed']


def test_counts_that_grow_or_start_from_zero_pass():
    assert gates.fall(0, 5) == 0.0 and gates.fall(10, 20) == 0.0 and gates.fall(10, 5) == 0.5
    empty = manifest(documents=0, rejected=0, chunks_before=0, kept=0)
    assert gates.evaluate(GateConfig(), manifest(), empty)['passed']
    assert gates.rejected_share(empty['counts']) == 0.0 and gates.dropped_share(empty['counts']) == 0.0


def test_the_lossless_audit_is_checked_when_present():
    audit = {'sentences_checked': 200, 'sentences_lost': 150, 'chunks_checked': 40}
    verdict = gates.evaluate(GateConfig(), manifest(lossless=audit), None)
    assert verdict['failed'] == ['lost_share']
    assert '150 of 200 audited sentences lost (75.0%' in gates.refusal_lines(verdict)[0]
    assert gates.evaluate(GateConfig(max_lost_share=0.8), manifest(lossless=audit), None)['passed']
    nothing_checked = {'sentences_checked': 0, 'sentences_lost': 0}
    assert statuses(gates.evaluate(GateConfig(), manifest(lossless=nothing_checked), None))['lost_share'] == 'skip'


def test_the_canary_must_reach_its_share_and_the_previous_run():
    config = GateConfig(canary='canary.jsonl', canary_min_share=0.8)
    good, previous = CanaryResult(9, 10), CanaryResult(9, 10)
    assert gates.evaluate(config, manifest(), manifest(), good, previous)['passed']
    worse = CanaryResult(8, 10, ('How long does dough rise?',))
    verdict = gates.evaluate(config, manifest(), manifest(), worse, previous)
    assert verdict['failed'] == ['canary_vs_previous']
    low = gates.evaluate(config, manifest(), None, CanaryResult(7, 10, ('q1', 'q2', 'q3')))
    assert low['failed'] == ['canary_share'] and 'missed e.g. q1; q2; q3' in gates.refusal_lines(low)[0]
    assert statuses(low)['canary_vs_previous'] == 'skip'


def test_gates_off_records_the_failure_but_does_not_refuse():
    verdict = gates.evaluate(GateConfig(enforce=False), manifest(documents=10), manifest())
    assert not verdict['passed'] and not verdict['enforced'] and not gates.refuses(verdict)
    assert not gates.refuses(None)


@pytest.mark.parametrize('kwargs,message', [
    ({'max_kept_drop': 1.5}, r'--gate_max_kept_drop must be in \[0, 1\]'),
    ({'max_rejected_share': -0.1}, '--gate_max_rejected_share'),
    ({'canary_k': 0}, '--gate_canary_k must be >= 1'),
])
def test_bad_limits_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GateConfig(**kwargs)


def test_refused_has_its_own_exit_status():
    assert gates.Refused('x').exit_code == gates.REFUSED_EXIT_STATUS == 5
    assert not issubclass(gates.Refused, ValueError)  # not a bad setting (2)
