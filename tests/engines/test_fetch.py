"""What an engine needs: where it is fetched to, its launcher jar, the error that names what to install."""

import zipfile

import pytest

from engines import fetch


def test_the_launcher_names_its_main_class_and_classpath_in_a_manifest(tmp_path):
    jar = tmp_path / 'job-server.jar'
    fetch.write_launcher(jar, 'org.example.Main', ['lib/a-1.0.jar', 'lib/b-2.0.jar'])
    with zipfile.ZipFile(jar) as launcher:
        assert launcher.namelist() == ['META-INF/MANIFEST.MF']
        manifest = launcher.read('META-INF/MANIFEST.MF').decode()
    # A header's continuation lines start with one space (the JAR spec); the first entry follows ": ".
    assert manifest == ('Manifest-Version: 1.0\nMain-Class: org.example.Main\n'
                        'Class-Path: lib/a-1.0.jar\n  lib/b-2.0.jar\n')
    assert not jar.with_suffix('.partial').exists()


def test_fetched_things_live_under_ragsieve_engines_or_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv('RAGSIEVE_ENGINES', str(tmp_path / 'engines'))
    assert fetch.job_server_dir(fetch.FLINK) == tmp_path / 'engines' / f'flink-job-server-{fetch.BEAM_JAVA}'
    monkeypatch.delenv('RAGSIEVE_ENGINES')
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'cache'))
    assert fetch.home() == tmp_path / 'cache' / 'ragsieve' / 'engines'


def test_a_missing_job_server_or_wheel_says_what_to_run(monkeypatch, tmp_path):
    monkeypatch.setenv('RAGSIEVE_ENGINES', str(tmp_path))
    with pytest.raises(fetch.EngineMissing, match=r'run `make engines` \(python -m engines fetch flink'):
        fetch.job_server_jar(fetch.FLINK)
    missing = fetch.Engine('nothing', '0', 'nothing', 'no_such_package_here', 'Main')
    with pytest.raises(fetch.EngineMissing, match=r"pip install 'ragsieve\[nothing\]'"):
        fetch.distribution(missing)


def test_each_pyspark_installation_gets_its_own_spark_launcher(monkeypatch, tmp_path):
    # Empty files stand in for the jars: what is tested is which files the launchers name, not Spark.
    monkeypatch.setenv('RAGSIEVE_ENGINES', str(tmp_path / 'engines'))
    lib = fetch.job_server_dir(fetch.SPARK) / 'lib'
    lib.mkdir(parents=True)
    for name in ('beam-runners-spark-3-2.62.0.jar', 'slf4j-api-2.0.jar'):
        (lib / name).touch()
    installations = []
    for venv in ('one', 'two'):
        jars = tmp_path / venv / 'pyspark' / 'jars'
        jars.mkdir(parents=True)
        (jars / 'spark-streaming_2.12-3.5.8.jar').touch()
        monkeypatch.setattr(fetch, 'distribution', lambda engine, root=jars.parent: root)
        installations.append((jars, fetch.job_server_jar(fetch.SPARK)))
    (one_jars, one), (two_jars, two) = installations
    assert one != two and one.is_file() and two.is_file()  # a second checkout leaves the first's launcher whole
    for jars, launcher in installations:
        with zipfile.ZipFile(launcher) as jar:
            classpath = jar.read('META-INF/MANIFEST.MF').decode().split('Class-Path: ')[1].split()
        assert classpath[0] == 'lib/beam-runners-spark-3-2.62.0.jar'  # Beam's jars first
        linked = [launcher.parent / entry for entry in classpath if not entry.startswith('lib/')]
        assert [p.resolve() for p in linked] == [jars / 'spark-streaming_2.12-3.5.8.jar']
    executors = fetch.executor_jars()
    assert sorted(p.name for p in executors.iterdir()) == ['beam-runners-spark-3-2.62.0.jar']  # not SLF4J's
