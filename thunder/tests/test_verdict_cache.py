"""thunderfx's verdicts are kept across processes: a second process compiling the same graph computes none of the
kinds the first found supported, and computes the same program; only kinds named the same in every process are
kept, under the versions and the map of torch functions they were found with, and only for the last sets of
versions used; the cache can be turned off, and a folder it cannot write leaves it off."""

import hashlib
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest
import torch

from thunder_symbolic import ThunderSymbolicWarning
from thunder_symbolic.thunderfx import verdict_cache

PROGRAM = textwrap.dedent(
    """
    import torch
    import thunder.dynamo.utils as utils
    from thunder.dynamo import thunderfx

    computed = []
    original = utils.try_execute_thunder_symbol
    utils.try_execute_thunder_symbol = lambda *a, **k: computed.append(a[1].name) or original(*a, **k)

    def f(x, y):
        return (x.sin() * y + 1).sum(-1), torch.cos(y)

    x, y = torch.randn(4, 3), torch.randn(3)
    torch.testing.assert_close(thunderfx(f)(x, y), f(x, y))
    print(len(computed))
    """
)


def _computed_in_a_new_process(folder, **env) -> int:
    env = {**os.environ, "THUNDER_SYMBOLIC_CACHE_DIR": str(folder), **env}
    command = [sys.executable, "-c", PROGRAM]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    return int(run.stdout.split()[-1])


def test_a_second_process_computes_no_verdict_the_first_found(tmp_path):
    first = _computed_in_a_new_process(tmp_path)
    assert first > 0
    assert _computed_in_a_new_process(tmp_path) == 0
    assert _computed_in_a_new_process(tmp_path / "elsewhere") == first
    assert _computed_in_a_new_process(tmp_path, THUNDER_SYMBOLIC_VERDICT_CACHE="0") == first


def _kind(target, *inputs, op="call_function"):
    described = tuple(
        ("input", (torch.Tensor, shape, dtype, torch.device("cpu"), False, None)) for shape, dtype in inputs
    )
    return op, target, (tuple, ((tuple, described), (dict, ()))), (torch.float32, torch.device("cpu"), None)


def test_a_kind_has_the_same_text_in_every_process_or_none():
    size = ((int, 4), (int, 3))
    key = verdict_cache.stable_key(_kind(torch.sin, (size, torch.float32)))
    assert key == verdict_cache.stable_key(_kind(torch.sin, (size, torch.float32)))
    others = [
        _kind(torch.cos, (size, torch.float32)),
        _kind(torch.sin, (size, torch.float64)),
        _kind(torch.sin, (((int, 4), (int, 4)), torch.float32)),
        _kind(torch.ops.aten.sin.default, (size, torch.float32)),
        _kind("sin", (size, torch.float32), op="call_method"),
    ]
    assert len({key, *map(verdict_cache.stable_key, others)}) == 6

    def local(a):
        return a

    for target in (local, lambda a: a, torch.nn.Linear(2, 2)):
        assert verdict_cache.stable_key(_kind(target, (size, torch.float32))) is None
    node_in_a_slice = (slice, slice(torch.fx.Graph().placeholder("n"), None, None))
    kind = ("call_function", torch.sin, (tuple, ((tuple, (node_in_a_slice,)), (dict, ()))), ())
    assert verdict_cache.stable_key(kind) is None


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    """The module as in a new process, with its folder under tmp_path."""
    monkeypatch.setenv("THUNDER_SYMBOLIC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(verdict_cache, "_state", {})
    return tmp_path


def test_a_kind_found_with_another_map_of_torch_functions_is_not_known(fresh_cache, monkeypatch):
    from thunder.torch import _torch_to_thunder_function_map as mapping

    verdict_cache.remember("a kind")
    assert verdict_cache.is_known("a kind")
    monkeypatch.setitem(mapping, test_a_kind_found_with_another_map_of_torch_functions_is_not_known, torch.sin)
    assert not verdict_cache.is_known("a kind")
    monkeypatch.delitem(mapping, test_a_kind_found_with_another_map_of_torch_functions_is_not_known)
    assert verdict_cache.is_known("a kind")


def test_only_the_last_sets_of_versions_used_keep_their_verdicts(fresh_cache, monkeypatch):
    """Each set of versions has its file; opening the cache removes the files of all but the four sets used
    last, the one opened included (and the single file of earlier releases); what the kept files hold stays."""
    folder = fresh_cache / "cache"

    def open_as(version):
        monkeypatch.setattr(verdict_cache, "_fingerprint", lambda: version * 64)
        monkeypatch.setattr(verdict_cache, "_state", {})

    def file_of(version):
        return folder / f"thunderfx-verdicts-{version * 16}.txt"

    open_as("b")
    verdict_cache.remember("a kind")
    (folder / "thunderfx-verdicts.txt").write_text("0" * 64 + "\n")
    for version in "cdef":
        file_of(version).write_text("1" * 64 + "\n")
    now = time.time()
    for age, path in enumerate([*map(file_of, "bcdef"), folder / "thunderfx-verdicts.txt"], start=1):
        os.utime(path, (now - age, now - age))

    open_as("a")
    assert not verdict_cache.is_known("a kind")  # another set of versions: b's verdict is not a's
    assert sorted(folder.glob("*.txt")) == list(map(file_of, "bcd"))
    verdict_cache.remember("a kind")
    open_as("b")
    assert verdict_cache.is_known("a kind")
    assert sorted(folder.glob("*.txt")) == list(map(file_of, "abcd"))


@pytest.mark.parametrize("off", ["0", "off", "False"])
def test_the_cache_turned_off_or_unwritable_keeps_nothing(fresh_cache, monkeypatch, off):
    monkeypatch.setenv("THUNDER_SYMBOLIC_VERDICT_CACHE", off)
    verdict_cache.remember("a kind")
    assert not verdict_cache.is_known("a kind") and not (fresh_cache / "cache").exists()

    blocked = fresh_cache / "a file"
    blocked.write_text("")
    monkeypatch.delenv("THUNDER_SYMBOLIC_VERDICT_CACHE")
    monkeypatch.setenv("THUNDER_SYMBOLIC_CACHE_DIR", str(blocked))
    monkeypatch.setattr(verdict_cache, "_state", {})
    with pytest.warns(ThunderSymbolicWarning, match="verdict cache is off for this process"):
        verdict_cache.remember("a kind")  # (no error: the cache stays off, and says so once)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not verdict_cache.is_known("a kind")


# --- The files are data, not trust ------------------------------------------------------------------------------


def _reopened(monkeypatch):
    monkeypatch.setattr(verdict_cache, "_state", {})


def test_an_entry_planted_without_the_users_key_is_no_verdict(fresh_cache, monkeypatch):
    """A digest anyone can compute (the kind's hash, as the cache's entries were before they were keyed) or one made
    with another key is not taken as "thunder runs this kind"."""
    verdict_cache.remember("a kind")
    store = verdict_cache._store()
    plain = hashlib.sha256(f"{store.fingerprint}\n{verdict_cache._mapping_fingerprint(store)}\nplanted".encode())
    with open(store.path, "a") as f:
        f.write(plain.hexdigest() + "\n")
    _reopened(monkeypatch)
    assert verdict_cache.is_known("a kind") and not verdict_cache.is_known("planted")

    key = fresh_cache / "cache" / "thunderfx-verdicts.key"
    key.write_bytes(os.urandom(32))  # another key: every entry is unknown
    _reopened(monkeypatch)
    assert not verdict_cache.is_known("a kind")
    assert key.stat().st_mode & 0o777 == 0o600


def _off_with_one_warning(match):
    with pytest.warns(ThunderSymbolicWarning, match=match) as caught:
        assert not verdict_cache.is_known("a kind")
        verdict_cache.remember("a kind")
        assert not verdict_cache.is_known("a kind")
    assert len([w for w in caught if issubclass(w.category, ThunderSymbolicWarning)]) == 1


def _verdict_file(fresh_cache, monkeypatch):
    verdict_cache.remember("a kind")
    path = verdict_cache._store().path
    path.unlink()
    _reopened(monkeypatch)
    return path


def test_a_fifo_in_place_of_the_file_neither_blocks_nor_is_read(fresh_cache, monkeypatch):
    os.mkfifo(_verdict_file(fresh_cache, monkeypatch))
    done = threading.Event()

    def read():
        _off_with_one_warning("not a regular file")
        done.set()

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(30)
    assert done.is_set(), "opening the cache blocked on a FIFO"


@pytest.mark.parametrize("target", ["/dev/zero", "elsewhere.txt"])
def test_a_symlink_in_place_of_the_file_is_not_followed(fresh_cache, monkeypatch, target):
    path = _verdict_file(fresh_cache, monkeypatch)
    (fresh_cache / "elsewhere.txt").write_text("")
    path.symlink_to(target if target.startswith("/") else fresh_cache / target)
    _off_with_one_warning("symbolic links")
    assert (fresh_cache / "elsewhere.txt").read_text() == ""


def test_a_file_larger_than_the_bound_is_not_read(fresh_cache, monkeypatch):
    path = _verdict_file(fresh_cache, monkeypatch)
    monkeypatch.setattr(verdict_cache, "MAX_BYTES", 1000)
    path.write_text("0" * 64 + "\n" * 1000)
    _off_with_one_warning("larger than 1000 bytes")


def test_a_key_others_can_read_turns_the_cache_off(fresh_cache, monkeypatch):
    verdict_cache.remember("a kind")
    (fresh_cache / "cache" / "thunderfx-verdicts.key").chmod(0o644)
    _reopened(monkeypatch)
    _off_with_one_warning("mode 0600 expected")


def test_a_cache_that_cannot_be_written_says_so_once_and_counts_nothing_kept(fresh_cache, monkeypatch):
    verdict_cache.is_known("a kind")
    monkeypatch.setattr(verdict_cache._store(), "path", fresh_cache / "gone" / "verdicts.txt")
    kept = verdict_cache.use()["kept"]
    with pytest.warns(ThunderSymbolicWarning, match="cannot be written"):
        verdict_cache.remember("a kind")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        verdict_cache.remember("another kind")
    assert verdict_cache.use()["kept"] == kept
