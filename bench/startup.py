"""Start-up time: seconds from spawning ``python app.py`` to its first ``/health`` 200.

Spawns the simulator ``--runs`` times (default configuration unless flags are given after
``--``), prints each run, the best and the median, the machine's load average before and after
(wall figures from a busy machine are not comparable; the server's CPU seconds until the first
answer vary less), and with ``--imports`` the slowest imports of
one run (``python -X importtime``: cumulative microseconds per top-level module).

    python bench/startup.py [--runs 5] [--imports 15] [-- --mode echo ...]

Target: under 1 s on an idle machine (the default configuration).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import free_port  # noqa: E402


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (/proc; 0 where there is none)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def start_once(flags: list, stderr=subprocess.DEVNULL, python_flags: tuple = ()) -> tuple:
    """(seconds to the first /health 200, CPU seconds the server spent until then, the process)
    for one ``python app.py`` start.  The CPU figure depends less on the machine's load."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, *python_flags, os.path.join(ROOT, "app.py"), "--port", str(port),
                             "--host", "127.0.0.1", *flags], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
    while time.monotonic() - t0 < 60:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(base + "/health", timeout=1)
            return time.monotonic() - t0, cpu_seconds(proc.pid), proc
        except OSError:
            time.sleep(0.005)
    proc.kill()
    raise SystemExit("server did not start within 60 s")


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def slowest_imports(flags: list, n: int) -> list:
    """The ``n`` slowest top-level imports of one start, as (cumulative ms, module)."""
    import tempfile
    with tempfile.TemporaryFile() as err:
        _, _, proc = start_once(flags, stderr=err, python_flags=("-X", "importtime"))
        stop(proc)
        err.seek(0)
        rows = []
        for line in err.read().decode(errors="replace").splitlines():
            if not line.startswith("import time:") or "|" not in line:
                continue
            _, cumulative, name = line[len("import time:"):].split("|", 2)
            if not cumulative.strip().isdigit():
                continue
            if not name.startswith("  "):          # one level of nesting: a top-level import
                rows.append((int(cumulative) / 1000, name.strip()))
    return sorted(rows, reverse=True)[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--imports", type=int, default=0, metavar="N", help="also list the N slowest imports")
    ap.add_argument("flags", nargs="*", help="app.py flags (after --); default: --model test-model")
    args = ap.parse_args()
    flags = args.flags or ["--model", "test-model"]
    print(f"load average before: {loadavg()}  ({os.cpu_count()} CPUs)", flush=True)
    times, cpus = [], []
    for i in range(args.runs):
        elapsed, cpu, proc = start_once(flags)
        stop(proc)
        times.append(elapsed)
        cpus.append(cpu)
        print(f"run {i + 1}: {elapsed:.3f} s  (server CPU {cpu:.2f} s)", flush=True)
    print(f"/health after start: {min(times):.3f} s best, {statistics.median(times):.3f} s median "
          f"(target < 1 s idle); server CPU until then {statistics.median(cpus):.2f} s median; "
          f"load average after: {loadavg()}")
    if args.imports:
        print(f"\nslowest top-level imports (cumulative ms, one run under -X importtime):")
        for ms, name in slowest_imports(flags, args.imports):
            print(f"{ms:8.1f}  {name}")


if __name__ == "__main__":
    main()
