"""Real Flink and Spark clusters on one machine: fetched from Maven Central and PyPI, started on free ports.

`python -m engines fetch flink` resolves Beam's job server with Maven;
`python -m engines start flink` starts a JobManager and TaskManagers and
prints the flags a build needs; `python -m engines stop` stops them. The
tests and benchmarks start their clusters with the same classes
(`FlinkCluster`, `SparkCluster`). Nothing here is imported by the build.
"""
