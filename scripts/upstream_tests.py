#!/usr/bin/env python
"""Run lightning-thunder's own test suite (the copy its wheel installs under ``thunder/tests``) with the patch set
off and on, and compare the outcomes test by test.

Modes: ``off`` (``THUNDER_SYMBOLIC=0``: upstream thunder as installed), ``on`` (the patch set applied, thunder's
default cache option) and ``symbolic`` (the patch set applied and ``THUNDER_SYMBOLIC_DEFAULT_CACHE='symbolic
values'``: every ``thunder.jit`` that names no cache option runs under symbolic values). Every mode is compared with
``off``: a test that fails in the other mode and not there is a *regression* (a strict xfail that passes included),
one that fails there and passes in the other a *fix*.

``upstream_tests.toml`` (beside this script) is the committed record: the subset CI runs, upstream's own failures on
this machine's kind (the ``off`` run), and each deliberate difference with its reason (a test id, or a pattern
of ids where ``*`` stands for any characters, for a test's parametrizations). The run fails (exit status 1)
on a regression that is not a listed difference, and on a listed difference that no longer occurs (the list must
stay true). Junit XML and a JSON summary go to ``--output`` (default ``results/upstream``).

    python scripts/upstream_tests.py                      # the whole suite, modes off and on
    python scripts/upstream_tests.py --subset ci          # the named subset CI runs
    python scripts/upstream_tests.py --modes off,symbolic # symbolic values as the default cache option
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ElementTree
from importlib.metadata import distribution
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPECTATIONS = HERE / "upstream_tests.toml"
MODES = {
    "off": {"THUNDER_SYMBOLIC": "0"},
    "on": {"THUNDER_SYMBOLIC": "1"},
    "symbolic": {"THUNDER_SYMBOLIC": "1", "THUNDER_SYMBOLIC_DEFAULT_CACHE": "symbolic values"},
}
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


def tests_folder() -> Path:
    """Where lightning-thunder's wheel installed its tests (not imported: importing thunder would patch it)."""
    return Path(distribution("lightning-thunder").locate_file("thunder/tests"))


def pytest_command(folder: Path, selection: dict, junit: Path, workers: str, timeout: int) -> list[str]:
    files = [str(folder / name) for name in selection.get("files", [])] or [str(folder)]
    command = [sys.executable, "-m", "pytest", *files, f"--rootdir={folder}", "-p", "no:cacheprovider"]
    command += ["-o", "addopts=", "-q", "--timeout", str(timeout), f"--junitxml={junit}"]
    if workers != "0":
        command += ["-n", workers]
    if selection.get("keyword"):
        command += ["-k", selection["keyword"]]
    for ignored in selection.get("ignore", []):
        command += [f"--deselect={folder / ignored}" if "::" in ignored else f"--ignore={folder / ignored}"]
    return command


def outcomes(junit: Path) -> dict[str, str]:
    """``{test id: passed | failed | skipped}`` from a junit XML report (an xfail counts as skipped, a strict
    xpass and a crashed worker as failed); ids are ``file.py::name``, as pytest prints them, from the tests folder."""
    results = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        if not case.get("classname"):  # a module as a whole: skipped, or failed to import
            results[case.get("name", "").replace(".", "/") + ".py"] = _outcome(case)
            continue
        parts = case.get("classname", "").split(".")
        # classname is dotted (distributed.test_ddp.TestClass): the file is the longest prefix ending in test_*
        file_parts = next(
            (parts[: i + 1] for i in range(len(parts) - 1, -1, -1) if parts[i].startswith("test_")), parts
        )
        rest = parts[len(file_parts) :]
        test_id = "/".join(file_parts) + ".py::" + "::".join([*rest, case.get("name", "")])
        results[test_id] = _outcome(case)
    return results


def _outcome(case: ElementTree.Element) -> str:
    children = {child.tag for child in case}
    if children & {"failure", "error"}:
        return FAILED
    return SKIPPED if "skipped" in children else PASSED


def run_mode(mode: str, folder: Path, selection: dict, output: Path, workers: str, timeout: int) -> dict[str, str]:
    junit = output / f"{mode}.xml"
    env = {k: v for k, v in os.environ.items() if k != "THUNDER_SYMBOLIC_DEFAULT_CACHE"} | MODES[mode]
    command = pytest_command(folder, selection, junit, workers, timeout)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as cwd, open(output / f"{mode}.log", "w") as log:
        # (run outside the checkout: its thunder/ folder must not be mistaken for a package)
        status = subprocess.call(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    results = outcomes(junit) if junit.exists() else {}
    counts = {kind: sum(1 for r in results.values() if r == kind) for kind in (PASSED, FAILED, SKIPPED)}
    print(
        f"{mode:>8}: {counts[PASSED]} passed, {counts[FAILED]} failed, {counts[SKIPPED]} skipped "
        f"in {time.monotonic() - started:.0f} s (pytest exit status {status}; log {output / f'{mode}.log'})"
    )
    if not results:
        raise SystemExit(f"upstream_tests: pytest wrote no report in mode {mode}: see {output / f'{mode}.log'}")
    return results


def _matches(test: str, pattern: str) -> bool:
    """Whether ``pattern`` (a test id, where ``*`` stands for any characters) names ``test``."""
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), test) is not None


def _listed(tests, pattern: str) -> bool:
    return any(_matches(t, pattern) for t in tests)


def compare(off: dict[str, str], other: dict[str, str]) -> tuple[list[str], list[str]]:
    """(regressions: tests that fail in ``other`` and not with the patch set off, a strict xfail that passes or a
    test only ``other`` collects included; fixes: tests that fail off and pass in ``other``)."""
    regressions = sorted(t for t, r in other.items() if r == FAILED and off.get(t) != FAILED)
    fixes = sorted(t for t, r in off.items() if r == FAILED and other.get(t) == PASSED)
    return regressions, fixes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    parser.add_argument("--modes", default="off,on", help="comma-separated, among off, on, symbolic (default off,on)")
    parser.add_argument("--subset", default="all", help="'all' or a subset named in upstream_tests.toml")
    parser.add_argument("--workers", default="auto", help="pytest-xdist workers ('0': none; default auto)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per test (default 900)")
    parser.add_argument("--output", type=Path, default=Path("results/upstream"))
    args = parser.parse_args()

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(f"--modes: choose among {', '.join(MODES)}, got {args.modes!r}")
    if "off" not in modes:
        modes.insert(0, "off")  # (every comparison is with upstream as installed)
    expectations = tomllib.loads(EXPECTATIONS.read_text())
    subsets = expectations.get("subset", {})
    if args.subset != "all" and args.subset not in subsets:
        parser.error(f"--subset: 'all' or one of {', '.join(subsets)}, got {args.subset!r}")
    selection = subsets.get(args.subset, {})
    args.output = args.output.resolve()  # (pytest runs in a folder of its own)
    args.output.mkdir(parents=True, exist_ok=True)
    folder = tests_folder()
    print(f"lightning-thunder's tests: {folder} (subset {args.subset})")

    results = {mode: run_mode(mode, folder, selection, args.output, args.workers, args.timeout) for mode in modes}
    differences = [(d["mode"], d["test"]) for d in expectations.get("difference", [])]
    summary, failed = {}, False
    for mode in modes[1:]:
        regressions, fixes = compare(results["off"], results[mode])
        patterns = [test for m, test in differences if m == mode]
        unexpected = [t for t in regressions if not any(_matches(t, p) for p in patterns)]
        stale = [p for p in patterns if _listed(results[mode], p) and not _listed(regressions, p)]
        summary[mode] = {"regressions": regressions, "fixes": fixes, "unexpected": unexpected, "stale": stale}
        print(
            f"\n{mode} against off: {len(regressions)} regressions ({len(unexpected)} not listed), {len(fixes)} fixes"
        )
        for test in regressions:
            print(f"  REGRESSION {test}" + ("" if test in unexpected else "  (listed: a deliberate difference)"))
        for test in fixes:
            print(f"  fix        {test}")
        for test in stale:
            print(f"  STALE      {test}: listed as a difference in mode {mode}, but it no longer differs")
        failed |= bool(unexpected or stale)
    known = set(expectations.get("upstream_failures", {}))
    off_failures = {t for t, r in results["off"].items() if r == FAILED}
    summary["off"] = {"failures": sorted(off_failures), "not_recorded": sorted(off_failures - known)}
    if off_failures - known:
        print(f"\noff: {len(off_failures - known)} upstream failures not in upstream_tests.toml (this machine's?):")
        for test in sorted(off_failures - known):
            print(f"  {test}")
    (args.output / "summary.json").write_text(json.dumps(summary, indent=1))
    print("\nupstream_tests: " + ("FAILED" if failed else "OK"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
