# Two entry points: `make demo` (set up + build the sample index) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo test bench engines objectstores clean

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: a local CPU wheel where the machine has one, else PyPI's CUDA build (runs on the CPU).
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	# Paragraph-sized chunks, so the corpus's repeated paragraphs show up in dropped/.
	$(VENV)/bin/ragsieve build --input sample_corpus --output out --chunk_size 64

test: setup
	# Two workers, a test file on one (--dist loadfile): the engine tests share their clusters.
	$(PY) -m pytest -q -n 2 --dist loadfile

# Flink, Spark and Dataflow's client, and Beam's job servers from Maven Central (needs Java 17 and Maven):
# what the engine tests need; without it they skip, saying so.
engines: setup
	$(PY) -m pip install --quiet -e '.[test,engines]'
	$(PY) -m engines fetch flink spark

# MinIO (S3) and fake-gcs-server (GCS) built with Go from the Go module proxy, and the s3/gcs extras:
# what the object-storage tests need; without it they skip, saying so.
objectstores: setup
	$(PY) -m pip install --quiet -e '.[test,s3,gcs]'
	$(PY) -m engines.objectstores fetch

bench: setup
	$(PY) benchmarks/build_throughput.py

clean:
	rm -rf out build *.egg-info
