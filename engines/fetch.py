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
    """The launcher jar of the engine's job server.

    Raises:
      EngineMissing: If it was not fetched yet.
    """
    jar = job_server_dir(engine) / 'job-server.jar'
    if not jar.is_file():
        raise EngineMissing(
            f'no {engine.name} job server under {job_server_dir(engine)}: run `make engines` '
            f'(python -m engines fetch {engine.name}; needs Java 17 and Maven)')
    return jar


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
    classpath = sorted(f'lib/{p.name}' for p in lib.glob('*.jar'))
    if engine is SPARK:
        classpath = spark_classpath(target, classpath)
        link_jars(executor_jars(), [p for p in sorted(lib.glob('*.jar')) if not p.name.startswith('slf4j-')])
    jar = target / 'job-server.jar'
    write_launcher(jar, engine.driver, classpath)
    return jar


def spark_classpath(target: Path, beam_jars: list[str]) -> list[str]:
    """Beam's jars, then Spark's own (the cluster's Spark), linked into `spark-jars/`.

    Beam's come first: its driver runs against the versions it was built
    with (Spark's jars hold Guava 14, which Beam's dependencies do not run
    on). Class-Path entries are relative to the launcher, hence the links.
    """
    spark = sorted((distribution(SPARK) / 'jars').glob('*.jar'))
    link_jars(target / 'spark-jars', spark)
    return beam_jars + [f'spark-jars/{p.name}' for p in spark]


def executor_jars() -> Path:
    """Beam's jars for Spark's executors, one folder (`spark.executor.extraClassPath=DIR/*`).

    All but SLF4J's, which Spark's own logging binds.
    """
    return job_server_dir(SPARK) / 'executor-jars'


def link_jars(directory: Path, jars: list[Path]) -> None:
    """Makes `directory` hold links to `jars`, and nothing else."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for jar in jars:
        (directory / jar.name).symlink_to(jar)


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
