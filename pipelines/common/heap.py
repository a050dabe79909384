"""The launcher's garbage collector: off while it loads what lives as long as the process, blind to that after.

Importing Beam, torch and transformers and loading the model creates half a
million objects that never become garbage, yet CPython's full collections
walk them all, again and again as the heap grows (measured: ~0.8 s of a
sample build's start-up) and once more at exit (~1 s). Loading with the
collector off and freezing what was loaded (`gc.freeze`) skips that work.
"""

import contextlib
import gc


@contextlib.contextmanager
def loading():
    """A block that loads what lives as long as the process (imports, models).

    No collection runs inside it; at its end every object alive is frozen:
    left out of all later collections until `release`.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # Also zeroes the young generation's count, which would otherwise
        # make the next allocation collect everything the block allocated.
        gc.freeze()
        if enabled:
            gc.enable()


def release() -> None:
    """Lets the collector see what `loading` froze again, for a caller that goes on (tests, a notebook)."""
    gc.unfreeze()


def spare_exit() -> None:
    """Keeps the interpreter's exit from walking every object left: call just before the process ends.

    The exit collection frees memory the process is about to return anyway;
    exit handlers and the files' flushes still run.
    """
    gc.freeze()
