"""Shared fixtures: the real embedding model, a small input corpus on disk, the sample corpus built once."""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engines import fetch as engines_fetch
from tests.helpers import ORBITS, PASTA, REPO
from transforms.features import kernels
from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model

# Before any test can run a torch kernel: every in-process model then
# computes with the kernels a build pins (see transforms/features/kernels.py).
kernels.pin(kernels.DEFAULT_MODE)
# Where `make engines` put Beam's job servers, read before the tests move the cache home away.
ENGINES_HOME = str(engines_fetch.home())


@pytest.fixture(scope='session')
def session_openvino_cache(tmp_path_factory):
    """One OpenVINO cache for a test process's builds, as a machine keeps one.

    Builds on OpenVINO (the default fp32 backend on some CPU families) convert
    the model and check it once per cache: per test, that was seconds each.
    """
    return str(tmp_path_factory.mktemp('openvino_cache'))


@pytest.fixture(autouse=True)
def private_cache_home(tmp_path, monkeypatch, session_openvino_cache):
    """Keeps what jobs cache by default (the evaluation's features, OpenVINO's conversions) out of the user's home.

    The engines' job servers stay where `make engines` fetched them; OpenVINO's
    conversions go to the session's cache (`fresh_openvino_cache`: the test's own).
    """
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg_cache'))
    monkeypatch.setenv('RAGSIEVE_ENGINES', ENGINES_HOME)
    monkeypatch.setenv('RAGSIEVE_OPENVINO_CACHE', session_openvino_cache)


@pytest.fixture
def fresh_openvino_cache(monkeypatch):
    """The OpenVINO cache in its default place under the test's own XDG cache, empty: a machine's first build."""
    monkeypatch.delenv('RAGSIEVE_OPENVINO_CACHE', raising=False)


@pytest.fixture(scope='session')
def embedding_model():
    """The real all-MiniLM-L6-v2, loaded once for the whole session."""
    return load_embedding_model(DEFAULT_EMBEDDING_MODEL)


@pytest.fixture
def corpus_dir(tmp_path):
    """A folder with every input kind, good and bad; returns (path, expectations)."""
    root = tmp_path / 'corpus'
    (root / 'sub').mkdir(parents=True)
    (root / 'pasta.txt').write_text(PASTA * 20)
    (root / 'sub' / 'orbits.md').write_text('# Orbits\n\n' + ORBITS * 8)
    (root / 'latin1.txt').write_bytes('caf\xe9 au lait'.encode('latin-1'))
    (root / 'blank.md').write_text('  \n\n ')
    (root / 'slides.pdf').write_bytes(b'%PDF-1.4')
    records = [
        {'id': 'j1', 'text': 'Jupiter is the largest planet of the Solar System.', 'metadata': {'lang': 'en'}},
        {'id': 'j2', 'text': ''},
        {'text': 'no id here'},
        {'id': 'j3', 'text': 'Metadata must be an object.', 'metadata': [1, 2]},
        {'id': 'pasta.txt', 'text': 'A second document claiming an id already used by pasta.txt.'},
        {'id': 7, 'text': 'Integer ids are accepted and kept as strings.'},
    ]
    lines = [json.dumps(r) for r in records] + ['{not json']
    (root / 'records.jsonl').write_text('\n'.join(lines) + '\n')
    pq.write_table(
        pa.table({'id': ['p1', 'p2'], 'text': ['Saturn has rings of ice and rock.', None]}),
        root / 'rows.parquet',
    )
    expected = {
        'documents': {'pasta.txt', 'sub/orbits.md', 'j1', '7', 'p1'},
        'rejected': {
            'latin1.txt': 'not_utf8',
            'blank.md': 'empty_text',
            'slides.pdf': 'pdf_corrupt',  # a PDF header and nothing else
            'records.jsonl:2': 'empty_text',
            'records.jsonl:3': 'missing_id',
            'records.jsonl:4': 'invalid_metadata',
            'records.jsonl:5': 'duplicate_doc_id',
            'records.jsonl:7': 'invalid_record',
            'rows.parquet:2': 'missing_text',
        },
    }
    return root, expected


@pytest.fixture(scope='session')
def sample_root(tmp_path_factory):
    """sample_corpus/ copied and built once as `make demo` builds it, into a versioned root, run r1.

    Returns `(corpus copy, root)`. Read it only: a test that rebuilds or
    edits copies the root first (`shutil.copytree`).
    """
    from pipelines.build_index import job as build_index

    base = tmp_path_factory.mktemp('sample')
    corpus = base / 'corpus'
    shutil.copytree(REPO / 'sample_corpus', corpus)
    build_index.run(['--input', str(corpus), '--output', str(base / 'root'), '--versioned', '--run_id', 'r1',
                     '--chunk_size', '64'])
    return corpus, base / 'root'


@pytest.fixture(scope='session')
def synced_runs(tmp_path_factory):
    """A versioned root of two runs of the sample corpus, the second after edits; returns (root, r1, r2).

    r2: one document rewritten (its chunks change), one removed, one added.
    """
    import shutil

    from pipelines.build_index import job as build_index
    from tests.helpers import REPO

    base = tmp_path_factory.mktemp('synced_runs')
    corpus, root = base / 'corpus', base / 'index'
    shutil.copytree(REPO / 'sample_corpus', corpus)
    flags = ['--input', str(corpus), '--output', str(root), '--chunk_size', '64', '--versioned']
    build_index.run(flags + ['--run_id', 'r1'])
    history = corpus / 'history.txt'
    history.write_text(history.read_text().replace('the', 'THE', 3))
    (corpus / 'guides' / 'bicycle.md').unlink()
    (corpus / 'planets.md').write_text(ORBITS * 3)
    build_index.run(flags + ['--run_id', 'r2'])
    return root, root / 'runs' / 'r1', root / 'runs' / 'r2'


@pytest.fixture(scope='session')
def postgres_uri():
    """A throw-away PostgreSQL with pgvector for the whole session (skips, naming what to install, without one)."""
    from tests.helpers import throwaway_postgres

    with throwaway_postgres() as uri:
        yield uri


def _store_uri(kind, request, tmp_path):
    if kind == 'lancedb':
        return f'lancedb://{tmp_path}/lance'
    if kind == 'milvus':
        return f'milvus://{tmp_path}/milvus.db'
    return f'{request.getfixturevalue("postgres_uri")}?table=t_{abs(hash(request.node.nodeid)) % 10**9}'


@pytest.fixture(params=['lancedb', 'pgvector', 'milvus'])
def store_uri(request, tmp_path):
    """A URI of an empty table in each real store: LanceDB and Milvus Lite in tmp_path, PostgreSQL's own."""
    return _store_uri(request.param, request, tmp_path)


@pytest.fixture(params=['lancedb', 'pgvector'])
def durable_store_uri(request, tmp_path):
    """As `store_uri`, for the stores whose kill-safety the tests check (killing Milvus Lite's client
    leaves its embedded server behind)."""
    return _store_uri(request.param, request, tmp_path)


@pytest.fixture(scope='session')
def flink_cluster(tmp_path_factory, request):
    """A Flink session cluster for the session: a JobManager and two TaskManagers, 10 restarts of a failed job.

    Where MinIO is built, its daemons carry MinIO's settings in their
    environment, as a cluster's machines carry their store's, and so do the
    SDK workers they start. Skips, saying what to install, without Java,
    the Flink wheel or Beam's job server (`make engines`).
    """
    from engines import objectstores
    from engines.flink import FlinkCluster, FlinkSettings
    from tests.helpers import running_engine

    env = request.getfixturevalue('minio').env if objectstores.MINIO.binary.is_file() else {}
    directory = tmp_path_factory.mktemp('flink')
    with running_engine(lambda: FlinkCluster(directory, FlinkSettings(), env)) as cluster:
        yield cluster


@pytest.fixture(scope='session')
def flink_hosts(tmp_path_factory):
    """A Flink session cluster on simulated hosts that share nothing (`engines.multihost`), for the session:
    MinIO on `storage` with the bucket `helpers.BUCKET`, the JobManager, a job server, two TaskManagers of one
    slot each, and `launcher`; 10 restarts of a failed job, 45 s apart.

    Skips, saying why, where this machine cannot make namespaces (not root) or lacks an engine or MinIO; fails
    instead where CI installed them (RAGSIEVE_REQUIRE_ENGINES=1), as `flink_cluster` does.
    """
    from engines.multihost import FlinkHosts

    yield from cluster_on_hosts(FlinkHosts, tmp_path_factory.mktemp('hosts'))


@pytest.fixture(scope='session')
def spark_hosts(tmp_path_factory):
    """A Spark standalone cluster on simulated hosts that share nothing (`engines.sparkhosts`), for the session:
    MinIO on `storage` with the bucket `helpers.BUCKET`, the Master, two Workers of one core each, and `launcher`.

    Skips or fails as `flink_hosts` does.
    """
    from engines.sparkhosts import SparkHosts

    yield from cluster_on_hosts(SparkHosts, tmp_path_factory.mktemp('spark_hosts'))


def cluster_on_hosts(cluster_class, directory):
    """Yields `cluster_class(directory)` running, with the bucket `helpers.BUCKET` on its MinIO; stops it after."""
    from engines.hosts import HostsUnavailable
    from tests.helpers import BUCKET, engine_missing, running_engine

    def make():
        try:
            return cluster_class(directory)
        except HostsUnavailable as e:
            engine_missing(str(e))

    with running_engine(make) as cluster:
        cluster.make_bucket(BUCKET)
        yield cluster


@pytest.fixture(scope='session')
def spark_cluster(tmp_path_factory):
    """A Spark standalone cluster for the session: a master and one worker of 2 cores.

    Skips, saying what to install, without Java, pyspark or Beam's job server (`make engines`).
    """
    from engines.spark import SparkCluster
    from tests.helpers import running_engine

    directory = tmp_path_factory.mktemp('spark')
    with running_engine(lambda: SparkCluster(directory)) as cluster:
        yield cluster


@pytest.fixture(scope='session')
def minio(tmp_path_factory):
    """A MinIO server (S3) with the bucket `helpers.BUCKET`, for the session.

    Skips, saying what to build, without its binary (`make objectstores`).
    """
    from engines.objectstores import MinioServer
    from tests.helpers import running_store

    with running_store(lambda: MinioServer(tmp_path_factory.mktemp('minio'))) as server:
        yield server


@pytest.fixture(scope='session')
def fake_gcs(tmp_path_factory):
    """fake-gcs-server (GCS) with the bucket `helpers.BUCKET`, for the session (skips as `minio` does)."""
    from engines.objectstores import FakeGcsServer
    from tests.helpers import running_store

    with running_store(lambda: FakeGcsServer(tmp_path_factory.mktemp('fake_gcs'))) as server:
        yield server


@pytest.fixture(params=['s3', 'gs'])
def object_store(request, monkeypatch):
    """`s3://` on MinIO and `gs://` on fake-gcs-server: a prefix of this test's own, the store's settings
    in the environment as a user's would be (AWS_*, STORAGE_EMULATOR_HOST); returns the prefix's URL."""
    from tests.helpers import BUCKET
    from transforms import storage

    server = request.getfixturevalue('minio' if request.param == 's3' else 'fake_gcs')
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    storage.configure()
    name = request.node.name.split('[')[0][:40]
    return f'{request.param}://{BUCKET}/{name}-{abs(hash(request.node.nodeid)) % 10**6}'


@pytest.fixture
def proxied_store(object_store, request, monkeypatch):
    """`object_store` reached through a `helpers.FaultProxy`: `(url, proxy)`; `proxy.seen` counts the requests,
    `proxy.refuse` answers for the store (a 403, a 401) where MinIO or fake-gcs-server would not."""
    from tests.helpers import fault_proxy

    server = request.getfixturevalue('minio' if object_store.startswith('s3') else 'fake_gcs')
    with fault_proxy(server, monkeypatch) as proxy:
        yield object_store, proxy


@pytest.fixture
def deny_bucket(proxied_store, request, monkeypatch):
    """A call that makes the test bucket one this process's credentials may not use, once the test wrote what it
    needs: on MinIO, STS credentials for another bucket alone (AccessDenied, for real); on fake-gcs-server, which
    checks no credentials, GCS's 403 answered by the proxy."""
    from tests.helpers import BUCKET, GCS_FORBIDDEN, minio_credentials
    from transforms import storage

    url, proxy = proxied_store

    def deny() -> None:
        if url.startswith('s3://'):
            minio = request.getfixturevalue('minio')
            for key, value in minio_credentials(minio, 'ragsieve-elsewhere').items():
                monkeypatch.setenv(key, proxy.endpoint if value == minio.endpoint else value)
            storage.configure()
        else:
            proxy.refuse('*', f'/b/{BUCKET}/', 403, GCS_FORBIDDEN)

    return deny
