"""One boto3 client per S3 configuration for Beam's S3 filesystem, instead of one per call.

Beam's S3 filesystem builds a new boto3 session and client for every call
(`exists`, `open`, `match`, ...): about 0.2 s of CPU each here, so a nightly
rebuild's few hundred file calls on s3:// cost more than its pipeline.
boto3 clients are thread-safe and meant to be reused: Beam's wrapper is
handed a stand-in for the boto3 module whose `session.Session().client(...)`
returns the client already built for the same settings and environment.
"""

from __future__ import annotations

import hashlib
import os
import threading

from transforms.storage.retries import retry_transient

# What boto3 reads from the environment when a client is built: a change means another client.
_ENVIRONMENT = ('AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_REGION',
                'AWS_DEFAULT_REGION', 'AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_S3', 'AWS_PROFILE',
                'AWS_CONFIG_FILE', 'AWS_SHARED_CREDENTIALS_FILE')


class SharedClients:
    """Stands for the boto3 module in Beam's S3 client wrapper (`boto3.session.Session().client(...)`)."""

    def __init__(self, boto3):
        self._boto3 = boto3
        self._clients: dict[str, object] = {}
        self._lock = threading.Lock()
        self.session = self

    def Session(self) -> 'SharedClients':  # noqa: N802 (boto3's name)
        return self

    def client(self, **settings):
        # A digest, not the settings: the key holds no secret in the clear.
        key = hashlib.sha256(repr((sorted(settings.items()), [os.environ.get(k) for k in _ENVIRONMENT])).encode())
        key = key.hexdigest()
        with self._lock:
            if key not in self._clients:
                client = self._boto3.session.Session().client(**settings)
                retry_transient(client)  # a store down for a few seconds does not fail the build
                self._clients[key] = client
            return self._clients[key]

    def __getattr__(self, name):
        return getattr(self._boto3, name)


def share() -> None:
    """Makes Beam's S3 filesystem reuse its clients in this process (nothing without Beam's AWS extra)."""
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return
    if boto3_client.boto3 is not None and not isinstance(boto3_client.boto3, SharedClients):
        boto3_client.boto3 = SharedClients(boto3_client.boto3)
