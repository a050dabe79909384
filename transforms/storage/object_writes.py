"""Conditional object writes on S3 and GCS, through the clients Beam's filesystems were configured with.

Beam's filesystems have no conditional write, so a lease (`leases.py`)
talks to the store's own client: boto3 for s3://, google-cloud-storage for
gs://, built from the same options (`storage.configure`). A version is
what the store compares: an object's ETag on S3, its generation on GCS.
Each call returns None where the store refused the condition, and raises
MissingBucket where there is no bucket to write to (a condition refused is
no reason to think another writer was there).
"""

from __future__ import annotations

from typing import Optional

from transforms import storage


def _s3(path: str):
    from apache_beam.io.aws import s3io

    bucket, key = s3io.parse_s3_path(path)
    return s3io.S3IO(options=storage.pipeline_options()).client.client, bucket, key


def _gcs_retry():
    """google-cloud-storage's retry of idempotent requests (these are: conditional), bounded as S3's are."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    from transforms.storage import retries

    return DEFAULT_RETRY.with_timeout(retries.bound())


def _gcs(path: str):
    from apache_beam.io.gcp import gcsio

    bucket, key = gcsio.parse_gcs_path(path)
    return gcsio.GcsIO(pipeline_options=storage.pipeline_options()).client.bucket(bucket).blob(key)


class MissingBucket(ValueError):
    """The bucket of a path does not exist: one line naming it (exit 2)."""


def _missing_bucket(path: str) -> MissingBucket:
    bucket = path.split('://', 1)[1].split('/', 1)[0]
    return MissingBucket(f'the bucket {bucket!r} of {path} does not exist (or these credentials cannot see it): '
                         'create it, or name another')


def _s3_refused(error) -> bool:
    """A condition the store refused (412, or 409 for two conditional writes at once), or the object is gone."""
    response = getattr(error, 'response', None) or {}
    code = response.get('Error', {}).get('Code')
    status = response.get('ResponseMetadata', {}).get('HTTPStatusCode')
    return code in ('PreconditionFailed', 'ConditionalRequestConflict', 'NoSuchKey') or status in (404, 409, 412)


def _s3_call(path: str, method: str, **kwargs) -> Optional[dict]:
    """`client.<method>(Bucket=..., Key=..., **kwargs)`'s answer, or None where the store refused it."""
    from botocore.exceptions import ClientError

    client, bucket, key = _s3(path)
    try:
        return getattr(client, method)(Bucket=bucket, Key=key, **kwargs)
    except ClientError as e:
        if (getattr(e, 'response', None) or {}).get('Error', {}).get('Code') == 'NoSuchBucket':
            raise _missing_bucket(path) from None
        if _s3_refused(e):
            return None
        raise


def _gcs_upload(path: str, data: bytes, generation: int) -> Optional[str]:
    """Uploads only if the object's generation is `generation` (0: there is none); the new one, or None."""
    from google.api_core.exceptions import NotFound, PreconditionFailed

    blob = _gcs(path)
    try:
        blob.upload_from_string(data, if_generation_match=generation, retry=_gcs_retry())
    except NotFound:  # the object conditioned on is gone (a refusal), or there is no bucket at all
        if not blob.bucket.exists(retry=_gcs_retry()):
            raise _missing_bucket(path) from None
        return None
    except PreconditionFailed:
        return None
    return str(blob.generation)


def _kind(path: str) -> str:
    kind = storage.scheme(path)
    if kind not in ('s3', 'gs'):
        raise ValueError(f'conditional writes are made on s3:// and gs:// only, not {path!r}')
    return kind


def create_if_absent(path: str, data: bytes) -> Optional[str]:
    """Writes the object only if none exists at `path`; its version, or None when one exists."""
    if _kind(path) == 's3':
        answer = _s3_call(path, 'put_object', Body=data, IfNoneMatch='*')
        return answer and answer['ETag']
    return _gcs_upload(path, data, 0)


def read_versioned(path: str) -> Optional[tuple[bytes, str]]:
    """`(data, version)` of the object at `path`, or None when there is none."""
    if _kind(path) == 's3':
        answer = _s3_call(path, 'get_object')
        return answer and (answer['Body'].read(), answer['ETag'])
    from google.api_core.exceptions import NotFound, PreconditionFailed

    blob = _gcs(path)
    try:
        blob.reload(retry=_gcs_retry())
        return (blob.download_as_bytes(if_generation_match=blob.generation, retry=_gcs_retry()),
                str(blob.generation))
    except (NotFound, PreconditionFailed):
        return None


def replace_if_version(path: str, data: bytes, version: str) -> Optional[str]:
    """Replaces the object only if it still is `version`; the new version, or None when it is not."""
    if _kind(path) == 's3':
        answer = _s3_call(path, 'put_object', Body=data, IfMatch=version)
        return answer and answer['ETag']
    return _gcs_upload(path, data, int(version))


def delete_if_version(path: str, version: str) -> bool:
    """Deletes the object only if it still is `version`; whether it did."""
    if _kind(path) == 's3':
        # S3's conditional delete is not served by every S3-compatible store: compare, then delete.
        found = read_versioned(path)
        return found is not None and found[1] == version and _s3_call(path, 'delete_object') is not None
    from google.api_core.exceptions import NotFound, PreconditionFailed

    try:
        _gcs(path).delete(if_generation_match=int(version), retry=_gcs_retry())
    except (NotFound, PreconditionFailed):
        return False
    return True
