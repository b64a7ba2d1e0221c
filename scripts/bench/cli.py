"""The command line in subprocesses: ``edgepe export``'s wall time and peak memory against a bare
import of torch, onnx and onnxruntime, and ``edgepe --help``."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

from bench.common import BARE_IMPORT, PYTHON, ROOT

# ---------------------------------------------------------------------------------------------
# Subprocesses: wall time and peak memory


def edgepe_cli() -> list[str]:
    script = Path(PYTHON).parent / "edgepe"
    if script.exists():
        return [str(script)]
    return [PYTHON, "-c", "from edgepe.cli import main; main()"]


# The measured command is started by this small launcher, not by the benchmark process: Linux
# keeps a process's peak RSS across exec (exec_mmap records the old mm's high-water mark), so a
# child forked from this torch-sized process would report at least its size.
LAUNCHER = """
import json, os, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=sys.stderr)
stdout = proc.stdout.read()
_, status, usage = os.wait4(proc.pid, 0)
wall = time.perf_counter() - start
tail = stdout.decode(errors="replace").strip().splitlines()[-1:]
print(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "maxrss_bytes": usage.ru_maxrss * 1024,
                  "rc": os.waitstatus_to_exitcode(status), "stdout_tail": "".join(tail)}))
"""


def measure(cmd: list[str], cwd: Path = ROOT) -> dict[str, Any]:
    """Wall and CPU (user + system) seconds, peak RSS (bytes, ``wait4``) and exit code of one
    subprocess. CPU time barely moves with other load on the machine; wall time does."""
    done = subprocess.run([PYTHON, "-c", LAUNCHER, *cmd], cwd=cwd, capture_output=True,
                          text=True, check=True)
    result = json.loads(done.stdout)
    tail = done.stderr.strip().splitlines()[-1:]
    result["stderr_tail"] = tail[0][:300] if tail else ""
    return result


def alternate(commands: dict[str, Any], runs: int) -> dict[str, Any]:
    """Run each command ``runs`` times, alternating (rotating start); medians per command.

    ``commands`` maps a name to a function ``i -> argv`` (a fresh output path per run).
    """
    runs_by: dict[str, list[dict[str, Any]]] = {name: [] for name in commands}
    names = list(commands)
    for i in range(runs):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            runs_by[name].append(measure(commands[name](i)))
    out = {}
    for name, results in runs_by.items():
        ok = [r for r in results if r["rc"] == 0]
        walls = [r["wall_s"] for r in ok]
        out[name] = {
            "argv": commands[name]("N"),
            "runs": len(results),
            "failed": len(results) - len(ok),
            "error": next((r["stderr_tail"] for r in results if r["rc"] != 0), None),
            **({"median_s": statistics.median(walls), "min_s": min(walls),
                "max_s": max(walls), "samples_s": walls,
                "cpu_median_s": statistics.median(r["cpu_s"] for r in ok),
                "maxrss_bytes": max(r["maxrss_bytes"] for r in ok)} if ok else {}),
        }
    return out


def bench_export(work: Path, runs: int) -> dict[str, Any]:
    cli = edgepe_cli()
    folder = work / "export"
    folder.mkdir(exist_ok=True)
    return alternate(
        {
            "edgepe export --scheme binary --max-len 512": lambda i: cli + [
                "export", "--scheme", "binary", "--max-len", "512",
                "--out", str(folder / f"binary-{i}.onnx")],
            f'python -c "{BARE_IMPORT}"': lambda i: [PYTHON, "-c", BARE_IMPORT],
        },
        runs,
    )


def bench_help(runs: int) -> dict[str, Any]:
    cli = edgepe_cli()
    return alternate(
        {"edgepe --help": lambda i: cli + ["--help"],
         'python -c "pass"': lambda i: [PYTHON, "-c", "pass"]},
        runs,
    )
