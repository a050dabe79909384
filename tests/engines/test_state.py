"""A cluster's recorded daemons: who they are (/proc), whether the process with a PID is still that one."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from engines import state


@pytest.fixture
def sleeper():
    process = subprocess.Popen(['sleep', '300'], start_new_session=True)
    # /proc/PID/cmdline reads empty for an instant around the exec (once, on a loaded CI machine): until it names
    # the command, the process is not yet the one the tests record.
    while Path(f'/proc/{process.pid}/cmdline').read_bytes() != b'sleep\x00300\x00':
        time.sleep(0.01)
    yield process
    process.kill()
    process.wait()


def test_the_start_time_is_counted_after_a_command_name_with_spaces_and_parentheses():
    fields = ' '.join(str(i) for i in range(3, 30))  # fields 3.. after the name; the 22nd is "22"
    assert state.parse_stat(f'123 (a) b (c)) {fields}') == 22


def test_identity_of_a_process_and_of_none(sleeper):
    me = state.identity(sleeper.pid)
    assert me['pid'] == sleeper.pid and me['cmdline'] == ['sleep', '300'] and me['start'] > 0
    assert state.identity(sleeper.pid) == me  # stable while it runs
    assert state.identity(2 ** 22 + 1) is None  # above pid_max: no such process


def test_a_pid_held_by_another_process_is_not_the_recorded_daemon(sleeper):
    me = state.identity(sleeper.pid)
    assert state.same_process(me, state.identity(sleeper.pid))
    assert not state.same_process(dict(me, start=me['start'] - 1), state.identity(sleeper.pid))
    assert not state.same_process(dict(me, cmdline=['java', 'Master']), state.identity(sleeper.pid))
    assert not state.same_process(me, None)
    record = {'daemons': {'master': me, 'stranger': dict(me, start=me['start'] - 1)}}
    assert list(state.running(record)) == ['master']


@pytest.mark.parametrize('text', ['{', '[]', '{"engine": "flink"}', '{"engine": "flink", "pids": {"a": 1}}',
                                  '{"engine": "flink", "daemons": {"a": {"pid": "1"}}}'])
def test_a_corrupt_or_older_state_is_one_clear_error(tmp_path, text):
    (tmp_path / state.STATE_FILE).write_text(text)
    with pytest.raises(state.BadState, match=f'{tmp_path / state.STATE_FILE} is not the state of a cluster'):
        state.read(tmp_path)


def test_a_written_state_reads_back(tmp_path, sleeper):
    record = {'engine': 'spark', 'ui': 'http://127.0.0.1:1', 'build_flags': ['--runner', 'SparkRunner'],
              'daemons': {'master': state.identity(sleeper.pid)}, 'logs': {}}
    state.write(tmp_path, record)
    assert state.read(tmp_path) == json.loads(json.dumps(record))
    assert (tmp_path / state.FLAGS_FILE).read_text() == '--runner SparkRunner\n'
    assert state.read(tmp_path / 'nothing') is None
    assert state.describe(record) == f'spark (http://127.0.0.1:1; master {sleeper.pid})'
    assert os.path.exists(f'/proc/{sleeper.pid}')
