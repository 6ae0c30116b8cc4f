"""Sums over the ranks of one host through shared memory, for the DTensor local executor's small sums.

A gloo collective goes from the calling thread to gloo's worker thread, over TCP on the loopback device to
the other ranks' threads, and back: on 2 ranks of this project's 2-core CPU machine a decode step's sum of
512 bytes takes 0.45-0.6 ms, and 45-130 µs of the calling thread's CPU, whether it is an all-reduce or an
all-gather. Ranks of one host can instead exchange their tensors through one shared mapping (a file in
``/dev/shm``, unlinked once every rank has mapped it): 32-38 µs for the same sum, all of it the calling
thread's.

- A sum is started by copying the operand into this rank's slot of the next entry of a ring of
  :data:`RING` entries and publishing the sum's sequence number;
- It is finished by waiting until every rank has published that number and summing the slots in rank
  order into the result, with the same kernel on every rank (so every rank holds the same sum), then
  publishing, for that entry, the number of the sum this rank has read from it.
- A start waits until every rank has read the sum the entry held before. A rank that has not read it itself
  (more than RING sums started and not finished) finishes it first, into the result its wait will return:
  every rank does so at the same point of the program, so no rank waits for one that waits for it.

The published numbers are 8-byte aligned integers (one store, one load each) written after the data they
announce and read before it. That orders them on x86-64: stores are seen in the order they are made and
loads are not moved before older loads, except for streaming stores (which a large copy may use), which a
locked instruction orders; a lock's acquisition, one such instruction, separates the data from the number.
On other architectures, on ranks of several hosts, for groups of more than 64 ranks, without ``/dev/shm`` or
with ``THUNDER_SYMBOLIC_SHARED_SUMS=0``, :func:`for_group` gives None and the caller uses gloo. A rank that
does not arrive within the process group's timeout makes the wait raise, naming the group and the ranks; a
rank whose process has ended (or is stopped) makes it raise within about a second: the ranks, on one host,
know each other's process (its id and start time, so a reused id is not taken for it).

The file is unlinked as soon as every rank has tried to map it, also when setting up fails (a rank died). A
file left by a rank 0 killed before that is named after its process, and the next group that finds the
process gone removes it.

Every rank of a group makes the same sums in the same order, as for any collective; one thread per
process makes them (thunder programs do).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import platform
import secrets
import tempfile
import threading
import time
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist

from thunder_symbolic.activation.environment import switch

__all__ = ["RING", "SharedSums", "connections", "enabled", "for_group"]

# Entries of the ring: a sum reuses the entry of the sum started RING before it.
RING = 4

# The header's 8-byte numbers: the sum each rank published last at [rank], the sum it read last from each
# entry at [_READ + rank * RING + entry], the nonce at [_NONCE].
_HEADER = 4096
_MAX_RANKS = 64
_READ = _MAX_RANKS
_NONCE = 511
_ALIGN = 64
_SPIN_S = 0.002  # a wait yields the core between polls this long, then sleeps _NAP_S between them
_NAP_S = 0.0001
_LIVENESS_S = 0.5  # a wait longer than this checks, this often, that the ranks it waits for still run
_PREFIX = "thunder-symbolic-sums-"
_SHM = "/dev/shm"

# Per process group: its shared sums, or None where its ranks cannot share memory. A destroyed group drops
# out (torch keeps a group's Python object while the group is registered), so a later group of the same
# name connects anew.
_channels: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

_fence = threading.Lock()


def enabled() -> bool:
    return switch("THUNDER_SYMBOLIC_SHARED_SUMS") and platform.machine() in ("x86_64", "AMD64")


def for_group(group, slot_bytes: int) -> SharedSums | None:
    """The shared sums of ``group`` with slots of at least ``slot_bytes``, set up by its first call on every
    rank (a collective of the group); None where its ranks cannot share memory."""
    try:
        channel = _channels[group]
    except KeyError:
        channel = _channels[group] = SharedSums.connect(group, slot_bytes)
    if channel is not None and slot_bytes > channel.slot_bytes:
        raise ValueError(
            f"shared sums of group {group.group_name!r}: slots of {channel.slot_bytes} bytes, asked {slot_bytes}"
        )
    return channel


def connections() -> dict[str, bool]:
    """Whether the small sums of each process group set up so far (by name) go through shared memory."""
    return {group.group_name: channel is not None for group, channel in _channels.items()}


def _process(pid: int) -> tuple[bytes, int] | None:
    """Process ``pid``'s state and start time (Linux: /proc/PID/stat's 3rd and 22nd fields, the time in clock
    ticks since boot); None where they cannot be read. Raises ProcessLookupError for a process that has ended."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None
    except OSError:
        return None
    return fields[0], int(fields[19])


def _identity() -> tuple[int, int | None]:
    """This process: its id and start time (None without /proc), which tell it from a later one with its id."""
    pid = os.getpid()
    found = _process(pid)
    return pid, found and found[1]


def _gone(identity: tuple[int, int | None]) -> bool:
    """Whether the process ``identity`` names has ended, a zombie included, or is stopped (it will not take part
    in a sum)."""
    pid, started = identity
    try:
        found = _process(pid) if started is not None else None
        if found is None:
            os.kill(pid, 0)
            return False
    except ProcessLookupError:
        return True
    except OSError:
        return False
    state, now_started = found
    return now_started != started or state in (b"Z", b"X", b"x", b"T", b"t")


def _remove_stale() -> None:
    """Remove the files of this user's whose rank 0 is gone (killed between making one and unlinking it)."""
    try:
        names = [n for n in os.listdir(_SHM) if n.startswith(_PREFIX)]
    except OSError:
        return
    for name in names:
        pid, _, rest = name[len(_PREFIX) :].partition("-")
        started = rest.partition("-")[0]
        if not (pid.isdigit() and started.isdigit()):
            continue
        path = os.path.join(_SHM, name)
        try:
            if os.stat(path).st_uid == os.getuid() and _gone((int(pid), int(started))):
                os.unlink(path)
        except OSError:
            continue


def _create(size: int) -> tuple[str, int] | None:
    """A file of ``size`` bytes in ``/dev/shm`` holding a new nonce, its space reserved (a mapping of a file
    its filesystem has no room for faults at the first write): its path and the nonce, or None. Its name
    holds this process's id and start time, for :func:`_remove_stale`."""
    _remove_stale()
    pid, started = _identity()
    try:
        fd, path = tempfile.mkstemp(prefix=f"{_PREFIX}{pid}-{started or 0}-", dir=_SHM)
    except OSError:
        return None
    nonce = secrets.randbits(62)
    try:
        os.posix_fallocate(fd, 0, size)
        with mmap.mmap(fd, size) as mapping:
            memoryview(mapping)[:_HEADER].cast("q")[_NONCE] = nonce
    except OSError:
        os.unlink(path)
        return None
    finally:
        os.close(fd)
    return path, nonce


def _attach(path: str, size: int, nonce: int) -> mmap.mmap | None:
    """The mapping of the file ``_create`` made, or None where this rank finds no such file (another host) or
    cannot map it: every rank then says so to the others, instead of one failing while they wait for it."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size != size:
            return None
        mapping = mmap.mmap(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)
    if memoryview(mapping)[:_HEADER].cast("q")[_NONCE] != nonce:
        mapping.close()
        return None
    return mapping


def _timeout(group) -> timedelta:
    try:
        return group._get_backend(torch.device("cpu")).options._timeout
    except (AttributeError, RuntimeError):
        return dist.default_pg_timeout


class SharedSums:
    """One process group's ring of slots in a shared mapping (see the module's docstring)."""

    def __init__(self, group, mapping: mmap.mmap, slot_bytes: int, peers: list[tuple[int, int | None]]):
        self.group_name = group.group_name
        self.peers = peers  # each rank's process (id, start time)
        self.rank, self.size = group.rank(), group.size()
        self.slot_bytes = slot_bytes
        self.timeout_s = _timeout(group).total_seconds()
        self._numbers = memoryview(mapping)[:_HEADER].cast("q")
        self._data = torch.frombuffer(mapping, dtype=torch.uint8, offset=_HEADER).view(RING, self.size, slot_bytes)
        self._read_numbers = [[_READ + rank * RING + entry for rank in range(self.size)] for entry in range(RING)]
        self._started = 0
        self._unread: dict[int, torch.Tensor] = {}  # the results of the sums started here and not read, by number
        self._done: dict[int, torch.Tensor] = {}  # those of sums read by a later start, not yet finished

    @staticmethod
    def mapping_bytes(size: int, slot_bytes: int) -> int:
        return _HEADER + RING * size * slot_bytes

    @classmethod
    def connect(cls, group, slot_bytes: int) -> SharedSums | None:
        """Rank 0 of ``group`` creates the mapping and tells the others its path and nonce; each maps it and
        checks the nonce (a rank of another host finds no file, or another one); the mapping is used only
        if every rank could, and its file is unlinked once all have tried."""
        slot_bytes = -(-slot_bytes // _ALIGN) * _ALIGN
        size = cls.mapping_bytes(group.size(), slot_bytes)
        made = mapping = None
        if group.rank() == 0 and enabled() and group.size() <= _MAX_RANKS:
            made = _create(size)
        try:
            offer = [made]
            dist.broadcast_object_list(offer, src=dist.get_global_rank(group, 0), group=group)
            if offer[0] is None:
                return None
            path, nonce = offer[0]
            mapping = _attach(path, size, nonce) if enabled() else None
            mapped = [None] * group.size()
            dist.all_gather_object(mapped, (mapping is not None, _identity()), group=group)
        except BaseException:
            if mapping is not None:
                mapping.close()
            raise
        finally:
            if made is not None:  # (whatever happened: once every rank has tried, or one cannot any more)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(made[0])
        if not all(ok for ok, _ in mapped):
            if mapping is not None:
                mapping.close()
            return None
        return cls(group, mapping, slot_bytes, [identity for _, identity in mapped])

    def start(self, t: torch.Tensor, out: torch.Tensor) -> int:
        """Publishes ``t`` (at most ``slot_bytes``) as this rank's operand of the next sum, to be written to
        ``out`` (of ``t``'s shape and dtype); the sum's number, for :meth:`finish`."""
        number = self._started + 1
        entry = number % RING
        if number - RING in self._unread:
            self._done[number - RING] = self._read(number - RING)
        self._wait_for(self._read_numbers[entry], number - RING, "read")
        self._data[entry, self.rank, : t.numel() * t.element_size()].view(t.dtype).view(t.shape).copy_(t)
        with _fence:
            pass
        self._numbers[self.rank] = self._started = number
        self._unread[number] = out
        return number

    def finish(self, number: int) -> torch.Tensor:
        """The sum ``number`` over the ranks, in the ``out`` its start was given."""
        done = self._done.pop(number, None)
        return done if done is not None else self._read(number)

    def _read(self, number: int) -> torch.Tensor:
        out = self._unread.pop(number)
        self._wait_for(range(self.size), number, "started")
        entry = number % RING
        nbytes = out.numel() * out.element_size()
        torch.sum(self._data[entry, :, :nbytes].view(out.dtype).view(self.size, *out.shape), 0, out=out)
        self._numbers[_READ + self.rank * RING + entry] = number
        return out

    def _wait_for(self, indices, number: int, what: str) -> None:
        """Until the header's numbers at ``indices`` (one a rank, in rank order) are at least ``number``:
        polled, then yielding the core (the rank awaited may need it), then, after :data:`_SPIN_S`, sleeping
        between polls (a rank still compiling its program is not worth a core)."""
        numbers = self._numbers
        polls = 0
        since = None
        checked = _LIVENESS_S
        for index in indices:
            while numbers[index] < number:
                polls += 1
                if polls < 64:
                    continue
                if since is None:
                    since = time.monotonic()
                waited = time.monotonic() - since
                if waited < _SPIN_S:
                    os.sched_yield()
                    continue
                if waited > checked:
                    checked = waited + _LIVENESS_S
                    late = [rank for rank, i in enumerate(indices) if numbers[i] < number]
                    gone = [rank for rank in late if _gone(self.peers[rank])]
                    if gone:
                        raise RuntimeError(
                            f"shared sums of process group {self.group_name!r}: rank(s) {gone} (process(es) "
                            f"{[self.peers[r][0] for r in gone]}) ended or stopped before they {what} sum {number}"
                        )
                if waited > self.timeout_s:
                    late = [rank for rank, i in enumerate(indices) if numbers[i] < number]
                    raise RuntimeError(
                        f"shared sums of process group {self.group_name!r}: rank(s) {late} have not {what} sum "
                        f"{number} within the group's timeout of {self.timeout_s:.0f} s"
                    )
                time.sleep(_NAP_S)
