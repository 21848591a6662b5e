"""Keep the C allocator from holding freed activations, so that `--max-memory` bounds what the
process really keeps resident, not only what its tensors need.

On Linux with glibc, torch's CPU tensors come from `malloc`. glibc serves a large block by a
mapping of its own, returned to the system when freed, but after such a block is freed it
raises that size threshold (up to 32 MiB), so later blocks of that size come from its heap,
where freed memory stays with the process. Measured on SmolLM2-135M's shape (probe knockout,
2k tokens, 16 rows a pass; docs/findings/scale.md), the resident peak of the same job was
bimodal: near `lens.memory`'s estimate in most runs, up to 1.44x above it in others; limiting
the arenas alone did not remove the high mode, mapping blocks of 1 MiB or more alone did
(every run within 5% of the estimate), at a CPU cost in page faults (about 15% on that job).

`hold_to_budget`, called when a job is given `--max-memory`, sets both at run time through
`mallopt` (glibc's `MALLOC_*` environment variables are read when the process starts, before
knowflow runs): one arena for every thread, and blocks from `MMAP_FROM` bytes mapped alone.
Only glibc is touched: on other C libraries (macOS, musl, Windows) and where the symbols are
missing the calls do nothing and report False. The settings apply to the whole process and
are not undone, so they are made only when the user asked for a memory bound.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import platform

log = logging.getLogger(__name__)

M_ARENA_MAX = -8        # glibc's malloc.h: the mallopt parameters for the number of arenas
M_MMAP_THRESHOLD = -3   # and for the size from which a block is its own mapping
MMAP_FROM = 2 ** 20     # bytes: blocks this large are mapped alone and unmapped when freed
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
    if not hasattr(libc, "mallopt"):
        return None
    return libc


def cap_arenas(arenas: int = 1) -> bool:
    """Let the process's threads use at most `arenas` malloc arenas from now on (glibc's
    `mallopt(M_ARENA_MAX, arenas)`); True when the limit was set."""
    libc = _glibc()
    return bool(libc is not None and libc.mallopt(M_ARENA_MAX, arenas) == 1)


def map_large(size: int = MMAP_FROM) -> bool:
    """Serve every block of `size` bytes or more by a mapping of its own, returned to the
    system when freed (glibc's `mallopt(M_MMAP_THRESHOLD, size)`, which also stops glibc
    raising that threshold to the largest block freed so far); True when set."""
    libc = _glibc()
    return bool(libc is not None and libc.mallopt(M_MMAP_THRESHOLD, size) == 1)


def hold_to_budget() -> None:
    """Called when a job is given `--max-memory` (once per process): one arena, and blocks of
    `MMAP_FROM` bytes or more mapped alone."""
    global _capped
    if not _capped:
        _capped = True
        if cap_arenas(1) and map_large():
            log.info("glibc malloc: one arena, blocks from %d bytes mapped alone "
                     "(--max-memory)", MMAP_FROM)
