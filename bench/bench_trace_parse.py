"""Parse time of TraceParser on a real 10-command trajectory log (target: <= 50 ms per trajectory).

Runs a 10-command bash session (python one-liners, a heredoc script, sed -i, grep, mkdir/cp/mv/rm, a background
http.server with a client and pkill, a small pytest run) under the sandbox's exact strace flags
(strace_flags.strace_argv), with the marker protocol after every command. Then feeds the log to a fresh TraceParser
in 64 KiB chunks, as the harness does while the log grows, and reports the median over several runs.

    PYTHONPATH=src .venv/bin/python bench/bench_trace_parse.py [--runs 5] [--keep-log trace.log]

Needs strace and python3 on PATH (not in the sandbox: no bubblewrap here, so only the parse cost is measured).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from depgpo.env.tracing.strace_flags import strace_argv
from depgpo.env.tracing.trace_parser import TraceParser

PORT = 18731
COMMANDS = [
    # 0: a python one-liner writing a file
    "python3 -c \"import json; json.dump({'port': 9000, 'name': 'demo'}, open('config.json', 'w'))\"",
    # 1: heredoc writing a script
    "cat > solve.py <<'EOF'\n"
    "import csv\n"
    "rows = list(csv.reader(open('data.csv')))\n"
    "open('answer.txt', 'w').write(str(sum(int(r[1]) for r in rows[1:])) + '\\n')\n"
    "EOF",
    # 2: run it
    "python3 solve.py && cat answer.txt",
    # 3: in-place edit
    "sed -i 's/9000/8080/' config.json && cat config.json",
    # 4: search
    "grep -rn port . | head -5; wc -l data.csv",
    # 5: file juggling
    "mkdir -p out/sub && cp answer.txt out/ && mv out/answer.txt out/sub/final.txt && rm -f junk.txt",
    # 6: a background server
    f"python3 -m http.server {PORT} --bind 127.0.0.1 >/dev/null 2>&1 &",
    # 7: a client for it (retries while the server starts)
    "python3 - <<'EOF'\n"
    "import time, urllib.request\n"
    "for _ in range(100):\n"
    "    try:\n"
    f"        print(urllib.request.urlopen('http://127.0.0.1:{PORT}/answer.txt').read()); break\n"
    "    except OSError: time.sleep(0.05)\n"
    "EOF",
    # 8: stop the server
    f"pkill -f 'http.server {PORT}'; sleep 0.2",
    # 9: run a small test suite (pytest start-up is what makes real logs long)
    "cat > test_answer.py <<'EOF'\n"
    "def test_answer():\n"
    "    assert open('out/sub/final.txt').read().strip().isdigit()\n"
    "EOF\n"
    "python3 -m pytest -q -p no:cacheprovider test_answer.py",
]


def record_trajectory(workdir: Path, log: Path) -> None:
    (workdir / "data.csv").write_text("id,value\n" + "".join(f"{i},{i * 7}\n" for i in range(500)))
    (workdir / "junk.txt").write_text("junk\n")
    script = ["test -e /.depgpo_mark/-1/$?"]
    for index, command in enumerate(COMMANDS):
        script += [command, f"test -e /.depgpo_mark/{index}/$?"]
    # On stdin, like the harness's keystrokes: on the command line, `pkill -f` would match strace's own argv.
    # The exit status is that of the last marker test, always 1; main() checks the marks instead.
    subprocess.run(strace_argv(str(log)) + ["bash", "--norc", "--noprofile"], input="\n".join(script) + "\n",
                   text=True, cwd=workdir, env={"PATH": "/usr/bin:/bin", "HOME": str(workdir)},
                   stdout=subprocess.DEVNULL, timeout=60)


def parse_once(text: str, workdir: str) -> tuple[float, float, TraceParser]:
    """(wall seconds, CPU seconds, parser): CPU time is the stable number on a shared machine."""
    parser = TraceParser(keep_path=lambda path: path.startswith(workdir))
    wall, cpu = time.perf_counter(), time.process_time()
    for offset in range(0, len(text), 65536):
        parser.feed(text[offset:offset + 65536])
    for index in range(len(COMMANDS)):
        parser.summary(index)
    return time.perf_counter() - wall, time.process_time() - cpu, parser


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--runs", type=int, default=5)
    options.add_argument("--keep-log", type=Path, help="also copy the recorded strace log here")
    args = options.parse_args()
    for tool in ("strace", "python3"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench_trace_parse: `{tool}` is not on PATH; install it to record a trajectory")
    with tempfile.TemporaryDirectory(prefix="depgpo-bench-") as tmp:
        workdir = Path(tmp) / "app"
        workdir.mkdir()
        log = Path(tmp) / "trace.log"
        record_trajectory(workdir, log)
        text = log.read_text()
        if args.keep_log:
            shutil.copyfile(log, args.keep_log)
        walls, cpus = [], []
        for _ in range(args.runs):
            wall, cpu, parser = parse_once(text, str(workdir))
            walls.append(wall)
            cpus.append(cpu)
    if parser.last_mark() != len(COMMANDS) - 1:
        raise SystemExit(f"bench_trace_parse: saw mark {parser.last_mark()}, expected {len(COMMANDS) - 1}")
    lines = text.count("\n")
    print(f"trajectory: {len(COMMANDS)} commands, {lines} lines, {len(text) / 1e6:.2f} MB")
    for label, times in (("wall", walls), ("cpu", cpus)):
        median = statistics.median(times)
        print(f"parse (feed + summaries), {label} median of {args.runs}: {median * 1e3:.1f} ms total, "
              f"{median / lines * 1e6:.2f} us/line (min {min(times) * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
