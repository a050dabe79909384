"""The runner a build runs on: Beam's FnApiRunner for the DirectRunner, Beam's own choice for the rest."""

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import runners


@pytest.mark.parametrize('flags', [(), ('--runner', 'DirectRunner'), ('--runner', 'direct')])
def test_the_direct_runner_is_its_fn_api_runner_without_a_prism_attempt(flags):
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    options = PipelineOptions(['--direct_running_mode', 'multi_processing', *flags])
    runner = runners.direct_runner(options)
    assert isinstance(runner, FnApiRunner)
    # The workers of multi_processing read the options from the provision info, as under Beam's DirectRunner.
    assert 'multi_processing' in str(runner._provision_info.provision_info.pipeline_options)


@pytest.mark.parametrize('runner', ['PortableRunner', 'FlinkRunner', 'PrismRunner'])
def test_other_runners_are_built_by_beam(runner):
    assert runners.direct_runner(PipelineOptions(['--runner', runner])) is None
