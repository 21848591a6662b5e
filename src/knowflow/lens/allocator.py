"""Keep the C allocator from holding freed activations, so that `--max-memory` bounds what the
process really keeps resident, not only what its tensors need.

On Linux with glibc, torch's CPU tensors come from `malloc`. glibc gives threads their own
arenas (heaps) and keeps memory a heap has freed for later reuse instead of returning it to
the system. Measured on SmolLM2-135M's shape (probe knockout, 2k tokens, 16 rows a pass;
docs/findings/scale.md), the peak resident memory of the same job was bimodal: near
`lens.memory`'s estimate in some runs, up to 1.44x above it in others, and always near it
with glibc's `MALLOC_ARENA_MAX=1`. That environment variable is read when the process
starts, before knowflow runs, so `hold_to_budget` sets the same limit at run time through
`mallopt(M_ARENA_MAX, 1)`: threads that need a new arena share the main one instead.

Only glibc is touched: on other C libraries (macOS, musl, Windows) and where the symbols are
missing the calls do nothing and report False. The limit applies to the whole process and
cannot be undone, so it is set only when the user asked for a memory bound.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import platform

log = logging.getLogger(__name__)

M_ARENA_MAX = -8        # glibc's malloc.h: the mallopt parameter for the number of arenas
_capped = False


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The process's glibc, or None on any other C library."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not all(hasattr(libc, name) for name in ("mallopt", "malloc_trim")):
        return None
    return libc


def cap_arenas(arenas: int = 1) -> bool:
    """Let the process's threads use at most `arenas` malloc arenas from now on (glibc's
    `mallopt(M_ARENA_MAX, arenas)`); True when the limit was set."""
    libc = _glibc()
    return bool(libc is not None and libc.mallopt(M_ARENA_MAX, arenas) == 1)


def trim() -> bool:
    """Return the allocator's free memory to the system (glibc's `malloc_trim(0)`); True
    when some was returned."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0) == 1)


def hold_to_budget() -> None:
    """Called when a job is given `--max-memory`: cap the arenas (once per process)."""
    global _capped
    if not _capped:
        _capped = True
        if cap_arenas(1):
            log.info("glibc malloc limited to one arena (--max-memory)")
