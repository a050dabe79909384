"""Beam's S3 filesystem reuses one boto3 client per settings and environment instead of building one per call."""

import pytest

from transforms.storage import s3_clients


class Built:
    """A stand-in for the boto3 module, counting the clients built (the unit is the reuse, not boto3)."""

    def __init__(self):
        self.built = []
        self.session = self

    def Session(self):  # noqa: N802
        return self

    def client(self, **settings):
        self.built.append(settings)
        return Client()


class Client:
    """A stand-in for a boto3 client: the event hooks registered on it."""

    def __init__(self):
        self.hooks = []
        self.meta = self.events = self

    def register_first(self, event, handler, unique_id=None):
        self.hooks.append((event, unique_id))


def test_one_client_per_settings_and_environment(monkeypatch):
    boto3 = Built()
    shared = s3_clients.SharedClients(boto3)
    first = shared.session.Session().client(service_name='s3', endpoint_url='http://a')
    assert shared.session.Session().client(service_name='s3', endpoint_url='http://a') is first
    assert shared.session.Session().client(service_name='s3', endpoint_url='http://b') is not first
    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'another')  # boto3 would read other keys
    assert shared.session.Session().client(service_name='s3', endpoint_url='http://a') is not first
    assert len(boto3.built) == 3
    assert first.hooks == [('needs-retry.s3', 'ragsieve-store-retry')]  # a store down a while is waited for


def test_beams_s3_wrapper_shares_its_client_once_configured(monkeypatch):
    boto3_client = pytest.importorskip('apache_beam.io.aws.clients.s3.boto3_client')
    if boto3_client.boto3 is None:
        pytest.skip("boto3 is not installed: pip install 'ragsieve[s3]'")
    monkeypatch.setattr(boto3_client, 'boto3', boto3_client.boto3)  # restored after the test
    s3_clients.share()
    s3_clients.share()  # once is enough: not wrapped twice
    assert isinstance(boto3_client.boto3, s3_clients.SharedClients)
    assert not isinstance(boto3_client.boto3._boto3, s3_clients.SharedClients)
    options = {'s3_endpoint_url': 'http://127.0.0.1:9', 's3_region_name': 'us-east-1'}
    assert boto3_client.Client(options).client is boto3_client.Client(options).client
