"""A job server that could not take the job or hand it to Flink: the address it could not reach, in one line.

A Flink job server submits a job to its own `--flink-master` (or to the
pipeline's `--flink_master`, when the build names one), as its own host
resolves it: a job server started with `--flink-master localhost:8081` on
another host than the JobManager retries for about a minute, then fails
the job with the root cause alone (`java.net.ConnectException: Connection
refused`), which names neither. The address is in the stack trace the job
server sends beside it as a debug message (`JobInvocation.onFailure`).
Before that, the launcher stages the job's artifacts at the address the
job server gives: one listening on every interface (`--job-host 0.0.0.0`)
gives 0.0.0.0, which the launcher takes for its own host (`submitting`).
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterable, Iterator, Optional

# What Flink's REST client says when the submission itself failed, not a job that ran.
SUBMISSION_FAILED = ('JobSubmissionException', 'Failed to submit JobGraph')
# Netty's and Java's connect failures: `...AnnotatedConnectException: Connection refused: localhost/127.0.0.1:8081`.
_CONNECT = re.compile(r'(?:Connect\w*Exception|NoRouteToHostException)\w*(?:\$\w+)*: ([^:\n]+?): '
                      r'([^\s/:]+|\[[^\]]+\])/[^\s]*?:(\d+)')
_UNKNOWN_HOST = re.compile(r'UnknownHostException: ([^\s:]+)')
# gRPC's address in its error details: `ipv4:0.0.0.0:8098`, `ipv6:[::]:8098`.
_GRPC_ADDRESS = re.compile(r'\b(?:ipv4|ipv6|dns):(\[[^\]]+\]|[^\s:]+):(\d+)')
# Addresses a server listens on that name no host: a client that dials one reaches its own.
WILDCARDS = ('0.0.0.0', '::', '[::]')


def unreached_flink(text: str) -> Optional[tuple[str, str]]:
    """`(address, why)` of the Flink a job server could not submit to, from its messages; None for anything else.

    Args:
      text: The job server's messages about the job, stack traces included.
    """
    if not any(marker in text for marker in SUBMISSION_FAILED):
        return None
    found = _CONNECT.search(text)
    if found:
        why, host, port = found.groups()
        return f'{host}:{port}', why.strip()
    unknown = _UNKNOWN_HOST.search(text)
    if unknown:
        return unknown.group(1), 'no such host'
    return None


def messages(result) -> str:
    """The texts of the job server's messages about the job so far ('' when the result keeps none).

    Beam's portable `PipelineResult` keeps them in `_messages` and reports
    only the last error's text, the root cause.
    """
    kept: Iterable = getattr(result, '_messages', None) or ()
    return '\n'.join(m.message_response.message_text for m in kept
                     if getattr(m, 'HasField', None) and m.HasField('message_response'))


def unreached_flink_line(endpoint: str, text: str) -> Optional[str]:
    """The build's line for a job server at `endpoint` that could not reach Flink; None when `text` shows no such.

    Args:
      endpoint: The job server's address (`--job_endpoint`).
      text: Its messages about the job (`messages`).
    """
    unreached = unreached_flink(text)
    if unreached is None:
        return None
    address, why = unreached
    return (f'error: the job server at {endpoint} (--job_endpoint) could not reach Flink at {address} ({why}) '
            'from its host: start it with --flink-master set to the JobManager\'s address as that host reaches it, '
            'or pass --flink_master HOST:PORT to the build; nothing was published')


@contextlib.contextmanager
def submitting(endpoint: Optional[str]) -> Iterator[None]:
    """Turns a job server that cannot be reached while the job is submitted into one line (`submission_line`).

    Args:
      endpoint: The job server's address (`--job_endpoint`); None: the block runs as it is.

    Raises:
      ValueError: Naming the job server and the address it could not be reached at.
    """
    try:
        yield
    except Exception as e:
        line = submission_line(endpoint, e) if endpoint else None
        if line is None:
            raise
        raise ValueError(line) from None


def submission_line(endpoint: str, error: BaseException) -> Optional[str]:
    """The line of a gRPC error met while the job was submitted to the job server at `endpoint`; None for another."""
    details = getattr(error, 'details', None)
    code = getattr(error, 'code', None)
    if not (callable(details) and callable(code)):
        return None  # not gRPC's
    text, name = str(details() or ''), getattr(code(), 'name', 'error')
    found = _GRPC_ADDRESS.search(text)
    if found and found.group(1) in WILDCARDS:
        host, port = endpoint.rpartition(':')[0], found.group(2)
        return (f'the job server at {endpoint} (--job_endpoint) gave {found.group(1)}:{port} as its artifact '
                f'service\'s address, which names no host ({name}): pass --artifact_endpoint {host}:{port}, or start '
                'the job server with --job-host set to its host\'s name')
    where = f' at {found.group(1)}:{found.group(2)}' if found else ''
    reason = text.splitlines()[0] if text else name
    return f'the job server at {endpoint} (--job_endpoint) could not be reached{where} while the job was submitted ' \
           f'({name}: {reason})'
