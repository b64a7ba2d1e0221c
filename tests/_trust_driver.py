"""Runs the hostile cases of tests/test_trust.py in ONE process (imports once), for strace.

Usage: ``python tests/_trust_driver.py PLAN.json RESULTS.json``. PLAN is a list of
``{"id", "folder", "argv"}``; ``argv`` is an ``edgepe`` command line, or ``["load", PATH]`` for
``edgepe.load(PATH).encode([0, 1, 2])``. Before each case the driver tries to open the
nonexistent path ``/edgepe-trust-case/ID``: in an strace log of ``openat`` calls that failed
open marks where the case starts (after the listing before it, which reads files to hash them),
and ``/edgepe-trust-case/ID.listing`` where it ends (the listing after it is not the case's).
Each result holds the exit code, stdout, stderr, the seconds taken and the folder's listing
before and after (name, size, mtime, sha256 of regular files).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

from typer.testing import CliRunner


def listing(folder: str) -> list:
    out = []
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            info = os.lstat(path)
            digest = ""
            if os.path.isfile(path) and not os.path.islink(path) and info.st_size < 1 << 26:
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out.append([os.path.relpath(path, folder), info.st_size, info.st_mtime_ns, digest])
    return sorted(out)


def run_load(path: str) -> tuple[int, str, str]:
    import edgepe
    from edgepe.contract.errors import EdgepeError

    try:
        edgepe.load(path).encode([0, 1, 2])
    except EdgepeError as exc:
        return exc.exit_code, "", f"error: {exc}\n"
    return 0, "", ""


def main() -> None:
    from edgepe.cli import app

    plan = json.loads(open(sys.argv[1]).read())
    runner = CliRunner()
    results = {}
    for case in plan:
        before = listing(case["folder"])  # (its hashing reads files: before the case's marker)
        try:
            os.open(f"/edgepe-trust-case/{case['id']}", os.O_RDONLY)
        except OSError:
            pass
        start = time.perf_counter()
        if case["argv"][0] == "load":
            code, out, err = run_load(case["argv"][1])
        else:
            result = runner.invoke(app, case["argv"])
            code, out, err = result.exit_code, result.stdout, result.stderr
        seconds = time.perf_counter() - start
        try:  # the listing's reads after the case are its own bucket, not the case's
            os.open(f"/edgepe-trust-case/{case['id']}.listing", os.O_RDONLY)
        except OSError:
            pass
        results[case["id"]] = {"exit": code, "stdout": out, "stderr": err,
                               "seconds": seconds, "before": before,
                               "after": listing(case["folder"])}
    try:
        os.open("/edgepe-trust-case/END", os.O_RDONLY)
    except OSError:
        pass
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
