"""lens.allocator: under a memory budget glibc's malloc keeps one arena for every thread and maps
large blocks alone (so freeing them returns the memory); other C libraries are left alone."""

from __future__ import annotations

import ctypes
import platform
import subprocess
import sys

import pytest

from knowflow.lens import allocator

# Four threads each allocate and free through malloc (ctypes releases the GIL, so glibc gives
# each thread an arena of its own unless capped); malloc_stats lists the arenas on stderr.
ARENAS = """
import ctypes, sys, threading
from knowflow.lens import allocator, memory
if sys.argv[1] == "budget":
    memory.check_max_memory(2.0)        # what a job's config does with --max-memory 2
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def work():
    for p in [libc.malloc(4096) for _ in range(100)]:
        libc.free(p)
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc.malloc_stats()
"""

# After a 4 MiB block is freed, glibc by default serves blocks of that size from its heap
# (where freed memory stays with the process); under a budget each is a mapping of its own.
# mallinfo2's hblks counts the mappings.
MAPPED = """
import ctypes, sys
from knowflow.lens import memory
if sys.argv[1] == "budget":
    memory.check_max_memory(2.0)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = Info
libc.free(libc.malloc(4 * 2 ** 20))
before = libc.mallinfo2().hblks
kept = [libc.malloc(4 * 2 ** 20) for _ in range(4)]
print(libc.mallinfo2().hblks - before)
"""

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")


def _arenas(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True,
                          text=True, check=True, timeout=120)
    return sum(line.startswith("Arena ") for line in done.stderr.splitlines())


@glibc
def test_a_budget_keeps_one_arena_for_all_threads():
    assert _arenas("none") > 1        # the default: the threads got arenas of their own
    assert _arenas("budget") == 1


@glibc
@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc 2.33 or later")
def test_a_budget_maps_large_blocks_alone():
    def mapped(mode: str) -> int:
        return int(subprocess.run([sys.executable, "-c", MAPPED, mode], capture_output=True,
                                  text=True, check=True, timeout=120).stdout)
    assert (mapped("none"), mapped("budget")) == (0, 4)


@glibc
def test_glibc_is_found():
    assert allocator._glibc() is not None


def test_other_c_libraries_are_untouched(monkeypatch):
    monkeypatch.setattr(platform, "libc_ver", lambda: ("", ""))
    allocator._glibc.cache_clear()
    try:
        assert allocator.cap_arenas(1) is False and allocator.map_large() is False
    finally:
        allocator._glibc.cache_clear()
