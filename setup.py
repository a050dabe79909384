"""Thin setup so `--setup_file ./setup.py` ships ragsieve to Dataflow/Flink workers.

Dependencies and metadata live in pyproject.toml only.
"""

import setuptools

setuptools.setup()
