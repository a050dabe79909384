"""check_bucket on real stores (MinIO, fake-gcs-server): each refusal one line saying what is wrong, in one request."""

import pytest

from engines.objectstores import MINIO_USER
from tests.helpers import BUCKET, GCS_UNAUTHORIZED, fault_proxy
from transforms import storage
from transforms.storage import buckets

MISSING = 'ragsieve-no-such-bucket'


@pytest.mark.parametrize('url', ['s3://', 's3:///runs', 'gs://', 'gs:///index'])
def test_a_url_without_a_bucket_is_refused_asking_nothing(url):
    with pytest.raises(ValueError, match=rf"^--output '{url}' names no bucket: give {url[:2]}://BUCKET/PREFIX$"):
        buckets.check_bucket(url, '--output')


def test_a_local_path_is_not_checked(tmp_path):
    buckets.check_bucket(str(tmp_path / 'nowhere'), '--index')


def test_a_bucket_that_exists_passes_whatever_lies_under_the_prefix(proxied_store):
    url, proxy = proxied_store
    buckets.check_bucket(f'{url}/nothing/here', '--index')
    buckets.check_bucket(f'{url.split("://")[0]}://{BUCKET}', '--index')  # a whole bucket
    assert len(proxy.asked()) == 2, proxy.asked()


def test_a_missing_bucket_is_named_in_one_request(proxied_store):
    url, proxy = proxied_store
    missing = f'{url.split("://")[0]}://{MISSING}/index'
    with pytest.raises(ValueError) as e:
        buckets.check_bucket(missing, '--index')
    assert str(e.value) == f"--index '{missing}': bucket '{MISSING}' does not exist"
    assert len(proxy.asked()) == 1


def test_a_denied_bucket_is_named(proxied_store, deny_bucket):
    url, proxy = proxied_store
    deny_bucket()
    with pytest.raises(ValueError) as e:
        buckets.check_bucket(f'{url}/index', '--index')
    message = str(e.value)
    assert message.startswith(f"--index '{url}/index': access to bucket '{BUCKET}' is denied (")
    assert message.endswith('these credentials may not list or read it') and '\n' not in message
    assert len(proxy.asked()) == 1


@pytest.mark.parametrize('key_id,code', [('nobody', 'InvalidAccessKeyId'), (MINIO_USER, 'SignatureDoesNotMatch')])
def test_s3_credentials_the_store_refuses_are_named(minio, monkeypatch, key_id, code):
    with fault_proxy(minio, monkeypatch) as proxy:
        monkeypatch.setenv('AWS_ACCESS_KEY_ID', key_id)
        monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'not-the-secret')
        storage.configure()
        with pytest.raises(ValueError) as e:
            buckets.check_bucket(f's3://{BUCKET}/index', '--input')
        assert len(proxy.asked()) == 1
    message = str(e.value)
    assert message.startswith(f"--input 's3://{BUCKET}/index': the store refused the credentials ({code}: ")
    assert message.endswith('check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN, AWS_PROFILE), '
                            "or the build's --s3_access_key_id and --s3_secret_access_key")
    assert 'not-the-secret' not in message and '\n' not in message


@pytest.mark.parametrize('credentials', ['none', 'refused'])
def test_gcs_asking_for_credentials_is_named(fake_gcs, monkeypatch, credentials):
    with fault_proxy(fake_gcs, monkeypatch) as proxy:
        storage.configure()
        proxy.refuse('*', f'/b/{BUCKET}/', 401, GCS_UNAUTHORIZED)
        if credentials == 'none':  # Beam's anonymous client, as where no credentials are found
            with pytest.raises(ValueError) as e:
                buckets.check_bucket(f'gs://{BUCKET}/index', '--index')
            said = 'the store wants credentials and none were found (Anonymous credentials cannot be refreshed.)'
        else:  # an access token GCS no longer accepts, which cannot be refreshed
            from apache_beam.internal.gcp import auth
            from google.oauth2.credentials import Credentials

            monkeypatch.setattr(auth._Credentials, '_credentials',
                                auth._ApitoolsCredentialsAdapter(Credentials(token='expired')))
            with pytest.raises(ValueError) as e:
                buckets.check_bucket(f'gs://{BUCKET}/index', '--index')
            said = 'the credentials could not be used (The credentials do not contain the necessary fields'
    assert str(e.value).startswith(f"--index 'gs://{BUCKET}/index': {said}")
    assert str(e.value).endswith(': check GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default login`')
    assert len(proxy.asked()) == 1 and '\n' not in str(e.value)


def test_what_beam_wraps_a_stores_refusal_in_is_read_through(proxied_store, deny_bucket):
    url, proxy = proxied_store
    deny_bucket()
    with pytest.raises(Exception) as listing:
        storage.list_files(f'{url}/index')  # Beam: a BeamIOError holding a BeamIOError holding the store's error
    assert type(listing.value).__name__ == 'BeamIOError'
    assert buckets.store_problem(listing.value, BUCKET, listing=True).startswith(
        f"access to bucket '{BUCKET}' is denied (")
    assert buckets.store_problem(ValueError('no store in this')) is None
