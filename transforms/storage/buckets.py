"""An object store's refusal in one line: a URL without a bucket, a missing or denied bucket, bad credentials.

`check_bucket` asks the store once, listing at most one object under a
URL's prefix (what every reader and writer of that prefix may do), before
a command reads or writes anything there; `store_problem` says what any
store error means, however Beam wrapped it (`BeamIOError`, its
`S3ClientError`), so that a command reports it in one line (exit 2), never
as a dump of Beam's exceptions.
"""

from __future__ import annotations

import re
from typing import Iterator, Optional

_GLOB_CHARS = re.compile(r'[*?\[]')
# Credentials the store does not accept (S3's codes; GCS says 401).
_BAD_CREDENTIALS = frozenset({'InvalidAccessKeyId', 'SignatureDoesNotMatch', 'ExpiredToken', 'InvalidToken',
                              'TokenRefreshRequired', 'InvalidClientTokenId', 'AuthorizationHeaderMalformed'})
_DENIED = frozenset({'AccessDenied', 'AllAccessDisabled', 'AccountProblem', 'forbidden'})  # S3's, GCS's
_WHERE_TO_SET = {
    's3': 'check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN, AWS_PROFILE), or the build\'s '
          '--s3_access_key_id and --s3_secret_access_key',
    'gs': 'check GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default login`',
}


def split_url(url: str) -> tuple[str, str, str]:
    """`(scheme, bucket, key)` of `s3://bucket/key` (`gs://...`); the bucket is '' where the URL names none."""
    scheme, _, rest = url.partition('://')
    bucket, _, key = rest.partition('/')
    return scheme, bucket, key


def check_url(url: str, flag: str) -> None:
    """Refuses a remote URL that names no bucket (`s3://`, `gs:///x`); asks the store nothing.

    Raises:
      ValueError: One line naming the flag.
    """
    if '://' not in url:
        return
    scheme, bucket, _ = split_url(url)
    if not bucket:
        raise ValueError(f'{flag} {url!r} names no bucket: give {scheme}://BUCKET/PREFIX')


def check_bucket(url: str, flag: str) -> None:
    """Refuses a URL whose bucket is missing, denied or unreachable with these credentials, in one request.

    Lists at most one object under the URL's prefix (up to its first glob
    character): a missing prefix is no error, a missing bucket is. Nothing
    is asked of a local path. A command calls this before it reads or
    writes under `url`, so that a refusal is one line, not what Beam makes
    of it later (retries, a dump of its wrapped exceptions, a prefix read
    as empty).

    Args:
      url: An s3:// or gs:// URL (a file, a prefix or a glob), or a local path.
      flag: The flag that named it, for the message (`--index`, `--input`, `--output`).

    Raises:
      ValueError: One line naming the flag, the URL and what is wrong: no
        bucket in the URL, a missing bucket, access denied, credentials
        missing or refused (a store that does not answer raises its own
        error, said by `retries.unreachable_line`).
    """
    check_url(url, flag)
    scheme, bucket, key = split_url(url)
    if scheme not in ('s3', 'gs'):
        return
    prefix = _GLOB_CHARS.split(key, 1)[0]
    try:
        if scheme == 's3':
            _s3_client().list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
        else:
            next(iter(_gcs_client().list_blobs(bucket, prefix=prefix, max_results=1)), None)
    except Exception as e:
        problem = store_problem(e, bucket, listing=True)
        if problem is None:
            raise
        raise ValueError(f'{flag} {url!r}: {problem}') from None


def _s3_client():
    """The boto3 client Beam's S3 filesystem uses in this process (`s3_clients.share`), from its options."""
    from apache_beam.io.aws.clients.s3 import boto3_client

    from transforms import storage

    return boto3_client.Client(storage.pipeline_options()).client


def _gcs_client():
    """A google-cloud-storage client made as Beam's GCS filesystem makes its own, from its options."""
    from apache_beam.io.gcp import gcsio

    from transforms import storage

    return gcsio.create_storage_client(storage.pipeline_options())


def _causes(error: BaseException) -> Iterator[BaseException]:
    """`error`, then what it wraps: Beam's `BeamIOError` details, an `S3ClientError`'s boto3 error.

    Only Beam's wrappers and OSErrors are looked through: a bug raised while
    handling a store's error stays a bug.
    """
    seen = set()
    pending = [error]
    while pending:
        e = pending.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        details = getattr(e, 'exception_details', None)
        if isinstance(details, dict):
            pending += [d for d in details.values() if isinstance(d, BaseException)]
        if isinstance(e, OSError) or type(e).__name__ == 'S3ClientError':
            pending += [e.__cause__, e.__context__]


def _answer(error: BaseException) -> Optional[tuple[Optional[str], Optional[int], str]]:
    """`(code, HTTP status, message)` of a store's answer (code None where it gave only a status), or None."""
    response = getattr(error, 'response', None)
    if isinstance(response, dict) and 'Error' in response:  # botocore's ClientError
        status = response.get('ResponseMetadata', {}).get('HTTPStatusCode')
        code = str(response['Error'].get('Code') or '')
        return (None if code in ('', str(status)) else code), status, str(response['Error'].get('Message') or '')
    if type(error).__name__ == 'S3ClientError':  # Beam's: a status and the boto3 error's text
        return None, getattr(error, 'code', None), str(getattr(error, 'message', '') or '')
    if type(error).__module__.startswith('google.api_core') and isinstance(getattr(error, 'code', None), int):
        reasons = [e.get('reason') for e in (getattr(error, 'errors', None) or []) if isinstance(e, dict)]
        return next((r for r in reasons if r), None), error.code, str(getattr(error, 'message', '') or '')
    return None


def store_problem(error: BaseException, bucket: Optional[str] = None, listing: bool = False) -> Optional[str]:
    """What a store's error means, in a few words, or None when `error` is none of a store's.

    Args:
      error: What a store client or Beam's filesystems raised.
      bucket: The bucket asked about, to name it.
      listing: Whether the error answered a listing of `bucket` (there, a
        404 means the bucket is missing, a 403 that it is denied).
    """
    named = f'bucket {bucket!r}' if bucket else 'the bucket'
    answers = []
    for e in _causes(error):
        name = type(e).__name__
        if name in ('NoCredentialsError', 'PartialCredentialsError', 'DefaultCredentialsError'):
            return f'no credentials found ({name}): {_hint(e)}'
        if name == 'InvalidOperation' and type(e).__module__.startswith('google.auth'):
            # GCS answered 401 to a request without credentials (Beam's anonymous client), which cannot refresh.
            return f'the store wants credentials and none were found ({_first_line(e)}): {_hint(e)}'
        if name in ('RefreshError', 'CredentialRetrievalError'):
            return f'the credentials could not be used ({_first_line(e)}): {_hint(e)}'
        if name == 'ParamValidationError' and 'bucket' in str(e).lower():
            return f'{named} is no valid bucket name'
        answer = _answer(e)
        if answer is not None:
            answers.append((*answer, e))
    if not answers:
        return None  # no answer of a store (one that did not answer at all: `retries.unreachable_line`)
    # The most telling answer: one with the store's own code (Beam's S3ClientError keeps only the status).
    code, status, message, e = next((a for a in answers if a[0]), answers[0])
    message = ' '.join(message.split())[:200]
    said = f'{code or status}: {message}' if message else f'{code or status}'
    if status is not None and status >= 500:
        # S3's own failure is retried, then said by `retries.unreachable_line`; GCS's client retried it already.
        return None if _hint(e) == _WHERE_TO_SET['s3'] else f'the store failed ({said}), after its retries'
    if code == 'NoSuchBucket' or (listing and status == 404):
        return f'{named} does not exist'
    if code in _BAD_CREDENTIALS or status == 401:
        return f'the store refused the credentials ({said}): {_hint(e)}'
    if code in _DENIED or (listing and status == 403):
        return f'access to {named} is denied ({said}): these credentials may not list or read it'
    if code == 'InvalidBucketName' or (listing and status == 400):
        return f'{named} is no valid bucket name ({said})'
    if status == 404:
        return f'not found ({said})'
    if status == 403:
        return f'access denied, or the credentials refused ({said})'
    return f'the store answered {status} ({said})'


def _hint(error: BaseException) -> str:
    module = type(error).__module__
    return _WHERE_TO_SET['s3' if module.startswith(('botocore', 'boto3', 'apache_beam.io.aws')) else 'gs']


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
