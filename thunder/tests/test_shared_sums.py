"""How the ranks of a process group agree to sum through shared memory (thunder_symbolic.distributed.shared_sums),
in one
process: the sums themselves, over 2 ranks, are tested in test_dtensor_symbolic.py."""

import os
import platform

import pytest

from thunder_symbolic.distributed import shared_sums


def _no_memory(*args, **kwargs):
    raise OSError(12, "Cannot allocate memory")


def test_a_rank_maps_only_the_file_rank_0_made():
    """A rank of another host finds no file at the path rank 0 offered, or another file there (another size or
    nonce), and a rank may fail to map it: it maps nothing, so the group sums through gloo."""
    size = shared_sums.SharedSums.mapping_bytes(2, 64)
    offer = shared_sums._create(size)
    assert offer is not None
    path, nonce = offer
    try:
        mapping = shared_sums._attach(path, size, nonce)
        assert mapping is not None and len(mapping) == size
        mapping.close()
        assert shared_sums._attach(path, size, nonce ^ 1) is None
        assert shared_sums._attach(path, size + 64, nonce) is None
        with pytest.MonkeyPatch.context() as patch:  # a rank that cannot map it (no memory left) says so too
            patch.setattr(shared_sums.mmap, "mmap", _no_memory)
            assert shared_sums._attach(path, size, nonce) is None
    finally:
        os.unlink(path)
    assert shared_sums._attach(path, size, nonce) is None


def test_no_shared_mapping_where_dev_shm_has_no_room(monkeypatch):
    """The file's space is reserved when it is made: where that fails, rank 0 offers nothing (and leaves no
    file) instead of a mapping that faults at its first write."""
    made = []
    real_mkstemp = shared_sums.tempfile.mkstemp

    def mkstemp(**kwargs):
        fd, path = real_mkstemp(**kwargs)
        made.append(path)
        return fd, path

    def no_room(fd, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shared_sums.tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(shared_sums.os, "posix_fallocate", no_room)
    assert shared_sums._create(1 << 20) is None
    assert made and not any(os.path.exists(path) for path in made)


@pytest.mark.parametrize(
    "value, machine, expected",
    [
        (None, "x86_64", True),
        ("0", "x86_64", False),
        (None, "aarch64", False),  # the ordering of the published numbers holds on x86-64 only
    ],
)
def test_shared_sums_are_enabled_on_x86_64_unless_switched_off(monkeypatch, value, machine, expected):
    if value is None:
        monkeypatch.delenv("THUNDER_SYMBOLIC_SHARED_SUMS", raising=False)
    else:
        monkeypatch.setenv("THUNDER_SYMBOLIC_SHARED_SUMS", value)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert shared_sums.enabled() is expected
