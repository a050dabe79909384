"""Settings that work only where the launcher runs, refused when the workers run on other hosts."""

import re

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.build_index import placement

MOUNTINFO = '\n'.join([
    '22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw',
    '30 22 0:25 / /tmp rw,nosuid shared:9 - tmpfs tmpfs rw',
    '41 22 0:40 / /mnt/shared rw,relatime shared:20 - nfs4 fs:/export rw,vers=4.2',
    '42 41 0:41 / /mnt/shared/local rw,relatime shared:21 - xfs /dev/sdb1 rw',
    '43 22 0:42 / /mnt/my\\040docs rw - fuse.sshfs user@host:/docs rw',
    '44 30 0:43 / /tmp rw - overlay overlay rw',
])
TASKMANAGERS = ['taskmanager-0', 'taskmanager-1']
LOCAL = ('localhost', '127.0.0.1', 'launcher')


def here(host):
    return host in LOCAL


def flink(master='jobmanager:8081', *flags):
    return PipelineOptions(['--runner', 'FlinkRunner', '--flink_master', master, *flags])


def test_a_paths_filesystem_is_that_of_its_longest_mount_point_the_last_one_mounted_there():
    assert placement.mount_type('/work/index', MOUNTINFO) == 'ext4'
    assert placement.mount_type('/mnt/shared/index', MOUNTINFO) == 'nfs4'
    assert placement.mount_type('/mnt/shared', MOUNTINFO) == 'nfs4'
    assert placement.mount_type('/mnt/sharedx/index', MOUNTINFO) == 'ext4'
    assert placement.mount_type('/mnt/shared/local/index', MOUNTINFO) == 'xfs'
    assert placement.mount_type('/mnt/my docs/a', MOUNTINFO) == 'fuse.sshfs'
    assert placement.mount_type('/tmp/index', MOUNTINFO) == 'overlay'
    assert placement.mount_type('/x', '') is None


def test_network_and_fuse_filesystems_are_shared_a_local_disk_is_not():
    assert all(placement.is_shared_filesystem(k) for k in ('nfs', 'nfs4', 'cifs', 'smb3', 'ceph', 'glusterfs', '9p',
                                                           'lustre', 'fuse.sshfs', 'fuse.gcsfuse'))
    assert not any(placement.is_shared_filesystem(k) for k in ('ext4', 'xfs', 'tmpfs', 'overlay', 'btrfs', None, ''))


def test_this_machines_own_filesystem_of_a_path_is_read_from_proc():
    kind = placement.filesystem_of('/proc/self')
    assert kind in (None, 'proc')


def test_flinks_workers_are_its_taskmanagers_else_the_masters_host():
    workers = placement.remote_workers(flink(), lambda rest: TASKMANAGERS, here)
    assert workers.hosts == tuple(TASKMANAGERS) and workers.runner == 'FlinkRunner'
    assert str(workers) == ("the FlinkRunner workers run on other hosts (taskmanager-0, taskmanager-1: Flink's "
                            'TaskManagers)')
    # The launcher on the JobManager's host: the master is local, its TaskManagers are not.
    on_the_jobmanager = placement.remote_workers(flink('localhost:8081'), lambda rest: TASKMANAGERS, here)
    assert on_the_jobmanager.hosts == tuple(TASKMANAGERS)
    unknown = placement.remote_workers(flink(), lambda rest: [], here)
    assert unknown.hosts == ('jobmanager',) and unknown.source == 'the host of --flink_master'


def test_workers_on_this_machine_embedded_or_in_the_launcher_are_not_elsewhere():
    assert placement.remote_workers(flink(), lambda rest: ['127.0.0.1'], here) is None
    assert placement.remote_workers(flink('localhost:8081'), lambda rest: [], here) is None
    assert placement.remote_workers(flink('[local]'), lambda rest: TASKMANAGERS, here) is None
    assert placement.remote_workers(flink('jobmanager:8081', '--environment_type', 'LOOPBACK'),
                                    lambda rest: TASKMANAGERS, here) is None
    assert placement.remote_workers(PipelineOptions([]), lambda rest: TASKMANAGERS, here) is None
    spark = PipelineOptions(['--runner', 'SparkRunner', '--spark_master_url', 'spark://master:7077'])
    assert placement.remote_workers(spark, lambda rest: TASKMANAGERS, here).hosts == ('master',)


def test_a_portable_build_looks_for_flinks_taskmanagers_at_its_flink_master_else_at_its_job_server():
    portable = ['--runner', 'PortableRunner', '--job_endpoint', 'jobserver:8099']
    asked = []
    workers = placement.remote_workers(PipelineOptions([*portable, '--flink_master', 'jobmanager:8081']),
                                       lambda rest: asked.append(rest) or TASKMANAGERS, here)
    assert workers.hosts == tuple(TASKMANAGERS) and asked == ['http://jobmanager:8081']
    assert placement.remote_workers(PipelineOptions(portable), lambda rest: [], here).hosts == ('jobserver',)


def workers():
    return placement.remote_workers(flink(), lambda rest: TASKMANAGERS, here)


def test_a_local_path_for_workers_elsewhere_is_refused_naming_the_flag_and_the_path():
    with pytest.raises(ValueError) as refused:
        placement.check_paths_shared({'--input': 's3://b/docs', '--output': '/tmp/index', '--cache': None},
                                     workers(), lambda path: 'ext4')
    assert str(refused.value) == (
        "--output /tmp/index: a path on this machine's own disk (ext4), but the FlinkRunner workers run on other "
        "hosts (taskmanager-0, taskmanager-1: Flink's TaskManagers): it must be on storage every worker reaches "
        "(s3://, gs://, or a shared mount)")
    with pytest.raises(ValueError, match=r'^--cache /c: a path on this machine\'s own disk, but'):
        placement.check_paths_shared({'--cache': '/c'}, workers(), lambda path: None)


def test_a_path_on_a_network_filesystem_or_an_object_store_is_accepted():
    placement.check_paths_shared({'--input': 'gs://b/docs', '--output': 's3://b/index', '--cache': '/mnt/shared/c'},
                                 workers(), lambda path: placement.mount_type(path, MOUNTINFO))


def test_a_loopback_store_endpoint_for_workers_elsewhere_is_refused():
    for endpoint in ('http://127.0.0.1:9000', 'http://localhost:9000', 'http://[::1]:9000', 'https://127.0.0.2'):
        with pytest.raises(ValueError, match=rf'^--s3_endpoint_url {re.escape(endpoint)}: a loopback address'):
            placement.check_store_endpoint(endpoint, workers())
    for endpoint in (None, 'http://storage:9000', 'http://10.47.0.2:9000', 'https://s3.amazonaws.com'):
        placement.check_store_endpoint(endpoint, workers())


def test_a_loopback_flink_master_for_a_job_server_on_another_host_is_refused():
    portable = ['--runner', 'PortableRunner', '--flink_master', 'localhost:8081']
    with pytest.raises(ValueError, match=r'^--flink_master localhost:8081: a loopback address, but the job server at '
                                         r'jobserver:8099 \(--job_endpoint\) runs on another host'):
        placement.check_job_server_reaches_flink(PipelineOptions([*portable, '--job_endpoint', 'jobserver:8099']),
                                                 here)
    placement.check_job_server_reaches_flink(PipelineOptions([*portable, '--job_endpoint', 'localhost:8099']), here)
    placement.check_job_server_reaches_flink(
        PipelineOptions(['--runner', 'PortableRunner', '--job_endpoint', 'jobserver:8099',
                         '--flink_master', 'jobmanager:8081']), here)
    placement.check_job_server_reaches_flink(flink('localhost:8081'), here)


def test_loopback_names_and_addresses():
    assert all(placement.is_loopback(h) for h in ('localhost', 'LOCALHOST.', 'a.localhost', '127.0.0.1', '127.1.2.3',
                                                  '::1', '[::1]'))
    assert not any(placement.is_loopback(h) for h in ('storage', '10.0.0.1', '::2', 'localhost.example.com'))


def test_this_machine_is_its_loopback_and_its_own_addresses_not_another():
    assert placement.is_this_machine('localhost') and placement.is_this_machine('127.0.0.1')
    assert not placement.is_this_machine('203.0.113.7')  # documentation's (RFC 5737): no machine's own
    assert not placement.is_this_machine('no-such-host.invalid')
