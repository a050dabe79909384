"""The CPU kernels the embedding model runs on, pinned so its vectors are known bits.

A float32 sum depends on the order of its terms, and the kernels torch calls
choose that order by themselves: MKL's sgemm by row count, threads and
instruction set (AVX2, AVX-512, AMX), ATen's and oneDNN's element-wise and
normalization kernels by instruction set. Measured on an AMX Xeon: one text
alone and in a batch of 3 gave different last bits, and so did 1 and 2
threads; MKL's strict reproducibility mode fixes both.

Two modes. `native`: strict mode on the CPU's own fastest code paths, so
batches and threads change nothing on one kind of CPU, and CPUs of another
kind (AVX2 against AVX-512, say) give other last bits: another kernel
family, named by the probe digest (`embedding.kernel_probe`) in the manifest
and in the feature cache's key, so families are never mixed. `portable`:
the AVX2 code path of all three libraries, the bits of any AVX2 CPU, for a
fleet of mixed CPUs; on AVX-512 CPUs it costs 1.4-1.6x the embedding time
(docs/guarantees.md). The default is the faster of the two on the CPU the
build starts on (`FASTEST`, `default_mode`).

MKL offers its AVX2 reproducibility branch on Intel CPUs only: on AMD it
refuses every branch but COMPATIBLE (3.5x slower) and falls back to strict
mode on its own branch, which the AVX2 cap keeps to AVX2 instructions. That
is not a guarantee MKL documents; measured under QEMU's EPYC-Rome CPU model
it gives the bits of Intel's AVX2 branch, and every worker's probe is
compared with the launcher's (`embedding.SharedModel`), so a difference
stops the build.

Each library reads its setting from the environment when it first runs a
kernel, so `pin` must run before the process's first forward pass; `check`
reads back what MKL and ATen actually use and says when it is too late.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import platform
from typing import Optional

PORTABLE = 'portable'
NATIVE = 'native'
MODES = (PORTABLE, NATIVE)
# The faster mode per CPU family (vendor, widest vector units), measured with
# benchmarks/build_throughput.py and the embedding alone (docs/guarantees.md):
# - AVX-512 and AMX Xeons: portable costs 1.60x (issue 43) and 1.40x native's embedding.
# - AVX2 AMD EPYC (issue 49): both run MKL's own branch capped at AVX2 and ATen's AVX2
#   kernels, and give one probe digest; portable was as fast or faster in every round
#   (24.0 s against 25.1 s on 256 chunks; whole builds 0.981x and 1.032x a bare
#   encode), and its bits are every AVX2 CPU's.
# Not measured: AVX2 Intel CPUs, where MKL's own branch is its AVX2 one, so both
# modes compute alike (portable, for its bits); AVX-512 AMD CPUs (native, as on
# Intel's AVX-512). An unknown family (no MKL, another architecture) gets native.
FASTEST = {
    ('GenuineIntel', 'amx'): NATIVE,
    ('GenuineIntel', 'avx512'): NATIVE,
    ('GenuineIntel', 'avx2'): PORTABLE,
    ('AuthenticAMD', 'avx512'): NATIVE,
    ('AuthenticAMD', 'avx2'): PORTABLE,
}

# portable: every x86-64 CPU with AVX2 (Intel since 2013, AMD since 2015)
# runs the same instructions in the same order, whatever its newer units.
_PORTABLE_ENV = {
    # Strict conditional numerical reproducibility: a gemm's sums no longer
    # depend on its row count or thread count.
    'MKL_CBWR': 'AVX2,STRICT',
    # An explicit MKL_ENABLE_INSTRUCTIONS=AVX512 wins over MKL_CBWR (measured).
    'MKL_ENABLE_INSTRUCTIONS': 'AVX2',
    'ATEN_CPU_CAPABILITY': 'avx2',
    'ONEDNN_MAX_CPU_ISA': 'AVX2',
}
# native: the CPU's fastest code paths, still strict, so batches and threads
# do not matter on one CPU; other CPU generations give other last bits. The
# portable caps are lifted, also those inherited from a portable parent.
_NATIVE_ENV = {'MKL_CBWR': 'AUTO,STRICT'}

# mkl_service.h
_MKL_CBWR_BRANCH = 1
_MKL_CBWR_ALL = ~0
_MKL_CBWR_STRICT = 0x10000
_MKL_BRANCHES = {1: 'OFF', 2: 'AUTO', 3: 'COMPATIBLE', 4: 'SSE2', 6: 'SSSE3', 7: 'SSE4_1', 8: 'SSE4_2',
                 9: 'AVX', 10: 'AVX2', 12: 'AVX512', 14: 'AVX512_E1'}


def cpu_family(vendor: Optional[str] = None, flags: Optional[set] = None) -> tuple[str, str]:
    """(vendor, widest vector units: 'amx', 'avx512', 'avx2' or ''), of this CPU unless given."""
    vendor = cpu_vendor() if vendor is None else vendor
    flags = set(cpu_flags()) if flags is None else flags
    return vendor, next((u for u, f in _WIDEST if f in flags), '')


def default_mode(family: Optional[tuple[str, str]] = None) -> str:
    """The faster kernels of this CPU's family (or `family`'s): `FASTEST`, else native."""
    return FASTEST.get(cpu_family() if family is None else family, NATIVE)


class KernelError(RuntimeError):
    """The embedding kernels in effect are not the ones the build's promise needs."""


@dataclasses.dataclass(frozen=True)
class KernelState:
    """What this process's torch computes with; `None` where it cannot be read.

    Attributes:
      mkl_branch: MKL's reproducibility branch ('AVX2', 'AUTO', 'OFF', ...).
      mkl_strict: Whether MKL's strict mode (thread-count independent) is on.
      mkl_auto_branch: The branch MKL names for this CPU: 'AVX2', 'AVX512_E1',
        ... on Intel; 'AUTO' where it names none (AMD).
      aten: ATen's CPU capability ('AVX2', 'AVX512', 'DEFAULT', ...).
      onednn_max_isa: The ONEDNN_MAX_CPU_ISA oneDNN was started with, if any.
      threads: torch's intra-op threads.
    """

    mkl_branch: Optional[str]
    mkl_strict: Optional[bool]
    mkl_auto_branch: Optional[str]
    aten: str
    onednn_max_isa: Optional[str]
    threads: int


def check_mode(mode: str) -> str:
    """Returns `mode` if it is one of `MODES`.

    Raises:
      ValueError: Otherwise.
    """
    if mode not in MODES:
        raise ValueError(f'embed kernels must be one of {list(MODES)}, got {mode!r}')
    return mode


def pin(mode: Optional[str] = None) -> None:
    """Sets the environment that puts torch's CPU kernels in `mode` (this CPU's `DEFAULT_MODE` if None).

    Effective only before the process's first torch kernel; child processes
    (the DirectRunner's workers) inherit it. Call `check` afterwards.
    """
    env = _env(check_mode(DEFAULT_MODE if mode is None else mode))
    for key in _PORTABLE_ENV.keys() - env.keys():
        # Left by a portable parent process (the DirectRunner's launcher, a test).
        os.environ.pop(key, None)
    os.environ.update(env)


def _env(mode: str) -> dict:
    return _PORTABLE_ENV if mode == PORTABLE else _NATIVE_ENV


@functools.lru_cache(maxsize=1)
def _mkl():
    """torch's statically linked MKL service functions, or None (no MKL, e.g. aarch64)."""
    import torch

    path = os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cpu.so')
    try:
        lib = ctypes.CDLL(path)
        get, auto = lib.mkl_serv_cbwr_get, lib.mkl_serv_cbwr_get_auto_branch
    except (OSError, AttributeError):
        return None
    get.restype, get.argtypes, auto.restype = ctypes.c_int, [ctypes.c_int], ctypes.c_int
    return get, auto


def state() -> KernelState:
    """Reads which kernels this process's torch uses (fixes ATen's choice if not yet made)."""
    import torch

    mkl = _mkl()
    branch = strict = auto = None
    if mkl is not None:
        get, get_auto = mkl
        branch, auto = (_MKL_BRANCHES.get(b, str(b)) for b in (get(_MKL_CBWR_BRANCH), get_auto()))
        strict = bool(get(_MKL_CBWR_ALL) & _MKL_CBWR_STRICT)
    return KernelState(branch, strict, auto, torch.backends.cpu.get_cpu_capability(),
                       os.environ.get('ONEDNN_MAX_CPU_ISA'), torch.get_num_threads())


def check(mode: str, device: str = 'cpu') -> KernelState:
    """Checks that torch runs `mode`'s kernels on `device`.

    Returns:
      The state read.

    Raises:
      KernelError: When torch ran a kernel before `pin`, so MKL or ATen kept
        other settings, or when portable mode is impossible on this machine
        (no MKL, e.g. not x86-64): the message says what to do.
    """
    now = state()
    if device != 'cpu':
        return now
    if now.mkl_branch is None:
        if mode == PORTABLE:
            raise KernelError(
                f'--embed_kernels {PORTABLE} needs torch with MKL on x86-64; this is {platform.machine()}: '
                f'pass --embed_kernels {NATIVE} (vectors then are byte-stable on this kind of CPU only)')
        return now
    wanted = (portable_branch(now), True, 'AVX2') if mode == PORTABLE else (None, True, None)
    got = (now.mkl_branch, now.mkl_strict, now.aten)
    if any(w is not None and w != g for w, g in zip(wanted, got)):
        raise KernelError(
            f'embedding kernels are MKL {now.mkl_branch} (strict: {now.mkl_strict}), ATen {now.aten}, not '
            f'--embed_kernels {mode}: torch ran before ragsieve could pin them in this process. Load the '
            f'model through ragsieve first, or set {_env_line(mode)} before Python starts')
    return now


def portable_branch(now: KernelState) -> str:
    """The MKL branch portable mode gets: AVX2, or AUTO where MKL names no branch (AMD)."""
    return 'AUTO' if now.mkl_auto_branch == 'AUTO' else 'AVX2'


def _env_line(mode: str) -> str:
    return ' '.join(f'{k}={v}' for k, v in _env(mode).items())


def describe(mode: str, device: str = 'cpu') -> dict:
    """What a build's vectors depend on, for its manifest."""
    import torch

    now = state()
    return {
        'mode': mode,
        'byte_stable_across_machines': (device == 'cpu' and mode == PORTABLE and now.mkl_branch is not None
                                        and now.mkl_branch == portable_branch(now)),
        'device': device,
        'torch': torch.__version__,
        'blas': _blas_line(),
        'mkl_cbwr': None if now.mkl_branch is None else now.mkl_branch + (',STRICT' if now.mkl_strict else ''),
        'aten_cpu_capability': now.aten,
        'onednn_max_cpu_isa': now.onednn_max_isa,
        'threads': now.threads,
        'cpu': cpu_name(),
        'cpu_vendor': cpu_vendor(),
        # What a build on this CPU gets without --embed_kernels (`FASTEST`).
        'default_on_this_cpu': DEFAULT_MODE,
    }


def _blas_line() -> Optional[str]:
    import torch

    for line in torch.__config__.show().splitlines():
        if 'Math Kernel Library' in line or 'BLAS' in line:
            return line.strip(' -')
    return None


def cpu_vendor() -> str:
    """'GenuineIntel', 'AuthenticAMD', ... from /proc/cpuinfo; '' where it cannot be read."""
    return _cpuinfo().get('vendor_id', '')


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> dict:
    """The first processor's fields of /proc/cpuinfo (none off Linux)."""
    fields = {}
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(':')
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_flags() -> list[str]:
    """The CPU's feature flags, sorted ([] off Linux): with native kernels, what decides the bits."""
    return sorted(set(_cpuinfo().get('flags', '').split()))


def cpu_name() -> str:
    """The CPU's model name and its widest vector units, e.g. 'Intel(R) Xeon(R) Processor (amx)'."""
    info = _cpuinfo()
    name, flags = info.get('model name') or platform.processor() or platform.machine(), set(info.get('flags', '').split())
    widest = cpu_family(flags=flags)[1]
    return f'{name} ({widest})' if widest else name


# A CPU's widest vector units and the /proc/cpuinfo flag that shows them, widest first.
_WIDEST = (('amx', 'amx_tile'), ('avx512', 'avx512f'), ('avx2', 'avx2'))
# Read once per process, before any flag is parsed: the launcher's CPU decides a build's default,
# and the mode travels to the workers with the model's handle (`embedding.SharedModel`).
DEFAULT_MODE = default_mode()
