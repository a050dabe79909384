"""Third-party lines without an action are silenced at their source; others still show."""

import logging
import subprocess
import sys

import pytest

from pipelines.common import third_party
from tests.helpers import REPO

# Beam imported where apache-beam[gcp]'s apitools does not import, as on a fresh install without it.
WITHOUT_APITOOLS = "import sys, runpy; sys.modules['apitools'] = None; sys.argv = ['x', '--help']; "


@pytest.mark.parametrize('entry', [
    "runpy.run_module('pipelines.build_index', run_name='__main__')",
    "from pipelines import cli; cli.main(['sync', '--help'])",
])
def test_beams_apitools_warning_is_not_shown_and_logging_is_left_unconfigured(entry):
    code = (WITHOUT_APITOOLS + '\ntry:\n    ' + entry + '\nfinally:\n    import logging; '
            'print("root formats", [h.formatter._fmt for h in logging.getLogger().handlers])')
    done = subprocess.run([sys.executable, '-c', code],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert 'usage:' in done.stdout, done.stderr[-3000:]
    assert 'apitools' not in done.stderr, done.stderr[-3000:]
    # The job's own format, not the default one Beam's `logging.warning` would have put first.
    assert "root formats ['%(levelname)s %(name)s: %(message)s']" in done.stdout, done.stdout[-500:]


def test_only_the_exact_message_is_dropped(caplog):
    before = list(logging.getLogger().handlers)
    with third_party.quiet_imports(), caplog.at_level(logging.WARNING):
        logging.getLogger().warning(third_party.APITOOLS_WARNING + ' despite the import not raising an ImportError.')
        logging.getLogger().warning('a warning someone can act on')
    assert [r.getMessage() for r in caplog.records] == ['a warning someone can act on']
    assert logging.getLogger().handlers == before and not logging.getLogger().filters
