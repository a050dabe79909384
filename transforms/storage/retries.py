"""Transient store faults retried for a bounded time, said in one line a round: S3's clients.

A store that restarts, or a network that drops for a few seconds, must not
fail a nightly build that would have finished: every S3 request a
ragsieve process makes through its shared clients (`s3_clients`), its own
and Beam's filesystem's, is tried again while the store does not answer
(no connection, a closed connection, a timeout, a 500/502/503/504),
backing off up to `MAX_DELAY_SECONDS`, until `--store_retry_seconds` have
passed since that request first failed. Then it fails for good:
`StoreUnreachable`, whose HTTP status 0 (no answer at all) Beam's S3
filesystem does not retry again (it would: 7 more rounds, 10 minutes), and
the command ends in one line naming the store (`unreachable_line`).

On GCS, the conditional writes of leases and LATEST (`object_writes`)
bound google-cloud-storage's own retries by the same seconds; Beam's GCS
filesystem keeps its own (google-cloud-storage's 120 s a request).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

LOG = logging.getLogger('ragsieve.storage')

# How long a request is tried again while the store does not answer (`--store_retry_seconds`).
DEFAULT_SECONDS = 180.0
MAX_DELAY_SECONDS = 5.0
# One line per round of retries: a store down for all of a build's threads is said once in this long.
SAY_EVERY_SECONDS = 30.0
_TRANSIENT_STATUS = (500, 502, 503, 504)
_CONTEXT_KEY = 'ragsieve_first_failure'

_settings = {'seconds': DEFAULT_SECONDS}
_said = {'at': None}
_lock = threading.Lock()


class StoreUnreachable(Exception):
    """The store did not answer within the bound; `response` as botocore's errors carry one, status 0."""

    def __init__(self, host: str, cause: BaseException):
        super().__init__(f'{host} did not answer: ' + ' '.join(str(cause).split())[:200])
        # Beam's S3 wrapper reads the status from here; 0 (< 500) is an error it does not try again.
        self.response = {'ResponseMetadata': {'HTTPStatusCode': 0}, 'Error': {'Code': type(self).__name__}}


def check_seconds(seconds: float) -> float:
    """Returns `seconds` if it can bound the retries.

    Raises:
      ValueError: Unless it is a finite number >= 0.
    """
    if not 0 <= seconds < float('inf'):
        raise ValueError(f'--store_retry_seconds must be a finite number >= 0, got {seconds}')
    return float(seconds)


def configure(seconds: Optional[float]) -> None:
    """Sets this process's bound (None: the default); clients built from here on use it."""
    _settings['seconds'] = DEFAULT_SECONDS if seconds is None else check_seconds(seconds)


def bound() -> float:
    return _settings['seconds']


def is_transient(caught_exception=None, response=None) -> bool:
    """Whether an S3 request's failure is one a later try may not meet: no answer, or a server error."""
    if caught_exception is not None:
        from botocore import exceptions

        return isinstance(caught_exception, (exceptions.ConnectionError, exceptions.HTTPClientError))
    status = response[0].status_code if response is not None else None
    return status in _TRANSIENT_STATUS


def delay(attempts: int) -> float:
    """Seconds to wait before try `attempts + 1`: doubling from 0.2 s, at most `MAX_DELAY_SECONDS`."""
    return min(0.2 * 2 ** max(0, attempts - 1), MAX_DELAY_SECONDS)


def _needs_retry(attempts, caught_exception=None, response=None, request_dict=None, endpoint=None, **_):
    """botocore's `needs-retry` hook: seconds to wait, or None to leave the request to botocore's own rules."""
    if not is_transient(caught_exception, response):
        return None
    context = (request_dict or {}).setdefault('context', {})
    now = time.monotonic()
    first = context.setdefault(_CONTEXT_KEY, now)
    host = getattr(endpoint, 'host', 'the S3 store')
    if now - first >= bound():
        raise StoreUnreachable(host, caught_exception if caught_exception is not None else RuntimeError(
            f'HTTP {response[0].status_code}'))
    _say(host, caught_exception, response, bound() - (now - first))
    return delay(attempts)


def _say(host: str, caught_exception, response, left: float) -> None:
    with _lock:
        now = time.monotonic()
        if _said['at'] is not None and now - _said['at'] < SAY_EVERY_SECONDS:
            return
        _said['at'] = now
    why = ' '.join(str(caught_exception).split())[:200] if caught_exception is not None else (
        f'HTTP {response[0].status_code}')
    LOG.warning('the object store at %s does not answer (%s): trying again for up to %.0f s more '
                '(--store_retry_seconds)', host, why, left)


def retry_transient(client) -> None:
    """Makes a boto3 S3 client try transient failures again within the bound (`_needs_retry`)."""
    client.meta.events.register_first('needs-retry.s3', _needs_retry, unique_id='ragsieve-store-retry')


def unreachable_line(error: BaseException) -> Optional[str]:
    """The one line of a store that did not answer within the bound, or None for any other error.

    It reaches a command as botocore's own error (the launcher's
    conditional writes) or wrapped by Beam's S3 filesystem (`S3ClientError`,
    `BeamIOError` holding one).
    """
    cause = _unreachable_cause(error)
    if cause is None:
        return None
    text = ' '.join(str(cause).split())[:300]
    return (f'the object store did not answer for {bound():.0f} s (--store_retry_seconds): {text}; nothing was '
            'published')


def _unreachable_cause(error: BaseException, depth: int = 0) -> Optional[BaseException]:
    if error is None or depth > 8:
        return None
    try:
        from botocore import exceptions
    except ImportError:
        return None
    if isinstance(error, (StoreUnreachable, exceptions.ConnectionError, exceptions.HTTPClientError)):
        return error
    if type(error).__name__ == 'S3ClientError' and getattr(error, 'code', None) == 0:  # a StoreUnreachable
        return error
    for inner in list((getattr(error, 'exception_details', None) or {}).values()):
        if isinstance(inner, BaseException) and _unreachable_cause(inner, depth + 1) is not None:
            return inner
    return _unreachable_cause(error.__cause__ or error.__context__, depth + 1)
