"""The build job: flags and config, the stages' assembly, the run and its publishing, manifest, gates, engines' glue.

`run` and `build_pipeline` are the job's Python API (`from pipelines import
build_index; build_index.run([...])`, as before the job became a package);
they are loaded on first use, so importing one module of the package (the
SDK worker, the gates) does not import the whole job.
"""

_API = {'run': 'pipelines.build_index.job', 'build_pipeline': 'pipelines.build_index.pipeline'}


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
