"""What a machine keeps between OpenVINO builds: a model's conversion (and int8 quantization) and the checks it passed.

Converting a model for OpenVINO traces it through torch (~1 s for
all-MiniLM-L6-v2) and compiling the traced graph takes ~0.5 s more; read
back from its saved IR, the same model compiles in ~0.15 s and computes the
same bits. Quantizing it to int8 (`quantize`) takes ~20 s and is kept alike. The precision check embeds its sample in fp32, which on a small
corpus costs as much as the whole build; its result is a pure function of
the sample, the weights, the CPU and the libraries, so it is looked up by
their digest.

Both live under `$RAGSIEVE_OPENVINO_CACHE` (default
`$XDG_CACHE_HOME/ragsieve/openvino`; `none` turns the cache off). Entries
appear whole or not at all (written aside, then renamed) and are verified
when read (the IR files by their hashes, a check by its checksum and the
types of its fields); one that cannot be read or fails verification is
converted or checked again and replaced; what a killed process left aside
is removed by the next write of that entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence, TypeVar

LOG = logging.getLogger('ragsieve.openvino')
T = TypeVar('T')
ENV = 'RAGSIEVE_OPENVINO_CACHE'
_IR = ('model.xml', 'model.bin')
_SUM = 'blake2b.json'  # the IR files' hashes: a damaged weight must not pass for the model
# Version of a stored check's fields (`precision.QualityCheck`): another version never reads them.
# 2: stored with a checksum (`remember_check`).
CHECK_FORMAT = 2
# A stored entry's file, its fields under 'check': named when checks were the one kind, kept so that caches read.
_ENTRY = 'check.json'
# An entry's temporary folder this old was left by a killed process (a conversion saves in ~0.2 s).
STALE_SECONDS = 3600


def root() -> Optional[Path]:
    """The cache folder, or None when `$RAGSIEVE_OPENVINO_CACHE` is `none`."""
    value = os.environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in ('', 'none', 'off') else Path(value)
    return Path(os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache') / 'ragsieve' / 'openvino'


def libraries() -> dict:
    """Versions of what converts, traces and runs the model: a new one converts and checks again."""
    from importlib.metadata import version

    import openvino
    import torch
    import transformers

    # sentence-transformers' from its metadata (the same string as its __version__): a build that reads its
    # model back (`openvino_model`) never imports it (~3 s).
    return {'openvino': openvino.__version__, 'torch': torch.__version__,
            'transformers': transformers.__version__, 'sentence_transformers': version('sentence-transformers')}


def digest(parts: dict) -> str:
    return hashlib.blake2b(json.dumps(parts, sort_keys=True).encode('utf-8'), digest_size=16).hexdigest()


def converted_model(key: str, convert: Callable):
    """The `ov.Model` saved under `key`, or `convert()`'s, saved there for the next process."""
    import openvino as ov

    folder = root() / 'models' / key if root() else None
    damaged = False
    if folder is not None and (folder / _SUM).is_file():
        try:
            return _read_model(folder)
        except Exception as e:  # a damaged entry: convert again and replace it
            LOG.warning('OpenVINO cache %s is unreadable (%s): converting the model again', folder, e)
            damaged = True
    model = convert()
    if folder is not None:
        def save(tmp: Path) -> None:
            # Uncompressed: fp16 weights in the IR would change the bits.
            ov.save_model(model, str(tmp / _IR[0]), compress_to_fp16=False)
            (tmp / _SUM).write_text(json.dumps(_hashes(tmp)), encoding='utf-8')

        _write_whole(folder, save, replace=damaged)
    return model


def saved_model(key: str):
    """The `ov.Model` saved under `key`, or None: none saved, or one that fails verification (`converted_model`
    then says so, converts it again and replaces it)."""
    folder = root() / 'models' / key if root() else None
    if folder is None or not (folder / _SUM).is_file():
        return None
    try:
        return _read_model(folder)
    except Exception:  # noqa: BLE001 (warned of by `converted_model`, which a miss leads to)
        return None


def _read_model(folder: Path):
    import openvino as ov

    if json.loads((folder / _SUM).read_text(encoding='utf-8')) != _hashes(folder):
        raise ValueError('its files do not match their hashes')
    return ov.Core().read_model(str(folder / _IR[0]))


def _hashes(folder: Path) -> dict:
    out = {}
    for name in _IR:
        digest_ = hashlib.blake2b(digest_size=16)
        with open(folder / name, 'rb') as f:
            for block in iter(lambda: f.read(1 << 20), b''):
                digest_.update(block)
        out[name] = digest_.hexdigest()
    return out


def remembered_check(key: str, read: Callable[[dict], T]) -> Optional[T]:
    """The quality check stored under `key`, if a previous build on this machine did it (`remembered`)."""
    return remembered('checks', key, read, 'checking the precision again')


def remember_check(key: str, check: dict) -> None:
    remember('checks', key, check)


def remembered(kind: str, key: str, read: Callable[[dict], T], again: str) -> Optional[T]:
    """The fields stored under `kind`/`key` (`remember`), if a previous build on this machine stored them.

    An entry is verified, not trusted: its checksum (of the key and the
    fields, written with it) must hold, and `read` must accept its fields.
    An entry edited, damaged or of another format is warned of and is a
    miss: what it held is made again (`again` says what) and the entry replaced.

    Args:
      kind: The cache's folder: `checks` (`precision.QualityCheck`), `loads`
        (`openvino_model`).
      key: The entry's key (`sample_key`, `openvino_model.load_key`).
      read: Turns the stored fields into the value; raises ValueError for
        fields it refuses (a missing one, a value of the wrong type).
    """
    path = root() / kind / key / _ENTRY if root() else None
    if path is None or not path.is_file():
        return None
    try:
        found = json.loads(path.read_text(encoding='utf-8'))
        if not isinstance(found, dict) or sorted(found) != ['blake2b', 'check']:
            raise ValueError('not a stored entry')
        if found['blake2b'] != digest({'key': key, 'check': found['check']}):
            raise ValueError('its checksum does not match: edited or damaged')
        return read(found['check'])
    except (OSError, ValueError, TypeError, KeyError) as e:
        LOG.warning('OpenVINO cache %s is unreadable (%s): %s', path, e, again)
        return None


def remember(kind: str, key: str, fields: dict) -> None:
    """Stores `fields` under `kind`/`key`, with the checksum `remembered` verifies."""
    if root() is None:
        return
    text = json.dumps({'check': fields, 'blake2b': digest({'key': key, 'check': fields})}, sort_keys=True)
    # Replaces what is there: a damaged entry, or the same fields stored meanwhile by another process.
    _write_whole(root() / kind / key, lambda tmp: (tmp / _ENTRY).write_text(text, encoding='utf-8'),
                 replace=True)


def sample_key(texts: Sequence[str], **parts) -> str:
    """Key of a quality check: the sample's texts with what decides their vectors (`parts`)."""
    sample = hashlib.blake2b(digest_size=16)
    for text in texts:
        sample.update(text.encode('utf-8'))
        sample.update(b'\0')
    return digest({'format': CHECK_FORMAT, 'sample': sample.hexdigest(), 'libraries': libraries(), **parts})


def _write_whole(folder: Path, write: Callable[[Path], object], replace: bool = False) -> None:
    """Writes an entry aside and renames it into place; a cache that cannot be written is skipped.

    An entry already there is kept (another process wrote the same one
    meanwhile) unless `replace`.
    """
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        for stale in folder.parent.glob(f'.{folder.name}.*'):  # left by a process killed while writing
            if time.time() - stale.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f'.{folder.name}.', dir=folder.parent))
        try:
            write(tmp)
            if replace:
                shutil.rmtree(folder, ignore_errors=True)
            try:
                os.replace(tmp, folder)
            except OSError:
                if not folder.is_dir():
                    raise  # no entry written meanwhile by another process: a real failure
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        LOG.warning('OpenVINO cache %s not written (%s): the next build converts and checks again', folder, e)
