"""Noise in the verifier's inspection set E (env/judging/verifier.py, docs/credit.md#verifier-records), one rule per case, each
built from a situation seen on real Terminal-Bench tasks: real episodes in the traced sandbox where the situation
needs a real toolchain or traceback, and inspection_set / extract_verifier_records on effects and sources otherwise.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from depgpo.credit import CreditConfig, compute_credit
from depgpo.credit.records import VerifierRecords
from depgpo.env.episode import Episode, EpisodeConfig
from depgpo.env.judging.verifier import inspection_set, is_toolchain_probe, static_inspection_set, traceback_lookups
from depgpo.env.judging.verifier_source import extract_verifier_records
from depgpo.env.tracing.trace_state import SegmentEffects
from depgpo.tasks import load_task
from depgpo.trajectory.scope import tracked_roots
from tests.env.test_trace_parser import TracedShell, needs_strace
from tests.helpers.harbor_builder import make_harbor_task


def run_episode(tmp_path, commands: list[str], test_py: str, files: dict[str, str] | None = None) -> dict:
    task = load_task(make_harbor_task(tmp_path, "t", instruction="Do the task.", test_py=test_py, files=files))
    with Episode(task, EpisodeConfig(command_timeout_s=60), out_dir=tmp_path / "out") as ep:
        for turn, command in enumerate(commands):
            ep.run_command(command, turn=turn)
        ep.verify()
    return json.loads((tmp_path / "out" / "trajectory.json").read_text())


def E_of(effects: SegmentEffects, agent_written: set[str] = frozenset(), output: str = "") -> dict[str, str]:
    return {d["record"]: d["how"] for d in inspection_set(effects, set(agent_written), {}, "/app", output)}


# ---- 1. compiler and loader probes; 3. what the verifier builds itself ------------------------------------------

PROG_C = '#include <stdio.h>\n#include "util.h"\nint main(void) { puts(GREETING); return 0; }\n'
UTIL_H = '#define GREETING "hi"\n'
BUILD_TEST = """
    import subprocess
    def test_builds_and_runs():
        subprocess.run(["gcc", "-O2", "-o", "/app/prog", "/app/prog.c", "-lm"], check=True, cwd="/app")
        assert subprocess.run(["/app/prog"], capture_output=True, text=True).stdout == "hi\\n"
    def test_answer_read_then_rewritten():
        assert open("/app/answer.txt").read() == "42\\n"
        open("/app/answer.txt", "w").write("seen\\n")  # read first: what it saw was the agent's
"""


@pytest.mark.sandbox
def test_a_verifier_that_rebuilds_a_program_credits_its_sources_not_the_stale_build(tmp_path):
    traj = run_episode(tmp_path, [
        f"printf '%s' '{PROG_C}' > prog.c && printf '%s' '{UTIL_H}' > util.h",
        "gcc -o prog prog.c",  # the agent's own build, which the verifier replaces
        "echo 42 > answer.txt",
    ], BUILD_TEST)
    verifier = traj["verifier"]
    assert verifier["reward"] == 1.0, verifier["output"]
    how = {d["record"]: d["how"] for d in verifier["E_detail"]}
    # gcc's /app/-lc, /app/-lm, /app/libgcc_s.so.1, /app/prog.c.gch and /tmp probes, and the program it wrote: gone
    assert how == {"/app/prog.c": "read", "/app/util.h": "read", "/app/answer.txt": "read"}
    assert traj["tracked_roots"] == ["/app"]
    credit = compute_credit(traj, CreditConfig())
    assert [c.direct for c in credit.commands] == [1.0, 0.0, 1.0]  # the sources, not the build; the answer


def test_toolchain_lookups_that_fail_are_no_inspection_and_what_it_finds_is():
    probes = {"/app/-lc", "/app/-lm", "/app/libgcc_s.so.1", "/app/prog.c.gch", "/app/include/util.h.gch",
              "/app/lib/glibc-hwcaps/x86-64-v3", "/app/lib/tls/x86_64", "/app/lib/tls", "/app/lib/x86_64"}
    assert all(map(is_toolchain_probe, probes))
    effects = SegmentEffects(missing=probes | {"/app/result.txt"}, reads={"/app/lib/libshape.so", "/app/prog.c"},
                             stats={"/app/lib/libshape.so.1"})
    assert E_of(effects) == {"/app/lib/libshape.so": "read", "/app/prog.c": "read",
                             "/app/lib/libshape.so.1": "stat", "/app/result.txt": "missing"}


def test_what_the_verifier_made_before_reading_it_is_dropped_what_it_read_first_stays():
    effects = SegmentEffects(reads={"/app/prog", "/app/out.json", "/app/config.ini"}, executed={"/app/prog"},
                             stats={"/app/build"}, listed={"/app/build"},
                             replaced_before_read={"/app/prog", "/app/out.json", "/app/build"})
    assert E_of(effects, agent_written={"/app/prog", "/app/config.ini"}) == {"/app/config.ini": "read"}


@needs_strace
@pytest.mark.sandbox
def test_the_parser_keeps_the_order_of_the_verifiers_own_reads_and_replacements(tmp_path):
    shell = TracedShell(tmp_path)
    try:
        shell.run("echo old > read_first.txt && echo old > stale.txt && echo old > removed.txt && "
                  "echo old > appended.txt && mkdir kept")
        effects = shell.verify(
            "cat read_first.txt >/dev/null && echo new > read_first.txt && cat read_first.txt >/dev/null; "
            "echo new > stale.txt && cat stale.txt >/dev/null; "
            "rm removed.txt; test -e removed.txt; "
            "echo more >> appended.txt && cat appended.txt >/dev/null; "
            "mkdir made && ls made kept >/dev/null; "
            "echo x > tmp.$$ && mv tmp.$$ renamed.txt && cat renamed.txt >/dev/null")
    finally:
        shell.close()
    replaced = {path.rsplit("/", 1)[1] for path in effects.replaced_before_read}
    assert {"stale.txt", "removed.txt", "made", "renamed.txt"} <= replaced
    assert not replaced & {"read_first.txt", "appended.txt", "kept"}  # read first, appended to, or only listed


@pytest.mark.sandbox
def test_a_file_an_agent_server_writes_while_answering_stays_in_E(tmp_path):
    """The replacement rule is the verifier's own processes only: an agent server's write during verification,
    read back by the verifier, is the agent's work."""
    server = textwrap.dedent("""\
        import http.server
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                open("/app/hits.log", "w").write("hit\\n")
                self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
            def log_message(self, *args):
                pass
        http.server.HTTPServer(("127.0.0.1", 18231), H).serve_forever()
        """)
    test_py = """
        import time, urllib.request
        def test_served_and_logged():
            for _ in range(100):
                try:
                    assert urllib.request.urlopen("http://127.0.0.1:18231/", timeout=5).read() == b"ok"
                    break
                except OSError:
                    time.sleep(0.05)
            assert open("/app/hits.log").read() == "hit\\n"
    """
    traj = run_episode(tmp_path, ["python3 server.py >/dev/null 2>&1 &"], test_py, files={"server.py": server})
    assert traj["verifier"]["reward"] == 1.0, traj["verifier"]["output"]
    assert {"/app/hits.log", "tcp:18231"} <= set(traj["verifier"]["E"])  # (server.py: read when it started,
    # which may fall before or after the command ended)


# ---- 2. paths in a failing test's traceback ------------------------------------------------------------------------

TRACEBACK_TEST = """
    import sys
    sys.path.insert(0, "/app")
    def test_calls_the_agents_module():
        import solution
        assert solution.answer() == 42, "expected /app/expected_answer.txt to match"
    def test_frame_of_a_file_that_is_gone():
        code = compile("def f():\\n    raise ValueError('see /app/cfg/settings.yaml')\\n", "/app/ghost.py", "exec")
        namespace = {}
        exec(code, namespace)
        namespace["f"]()
"""


@pytest.mark.sandbox
def test_paths_printed_in_a_failing_traceback_are_not_inspections(tmp_path):
    traj = run_episode(tmp_path, [
        "printf 'def answer():\\n    raise RuntimeError(\"cannot open /app/data/input.csv\")\\n' > solution.py",
    ], TRACEBACK_TEST)
    verifier = traj["verifier"]
    assert verifier["reward"] == 0.0 and "/app/data/input.csv" in verifier["output"]
    assert verifier["E_source"] == "trace"  # so the sources' text is not used: no /app/expected_answer.txt either
    E = set(verifier["E"])
    assert "/app/solution.py" in E  # imported (and read again to render its frame): the agent's work
    assert not E & {"/app/data/input.csv", "/app/expected_answer.txt", "/app/cfg/settings.yaml", "/app/source"}


def test_a_failed_lookup_of_a_frame_the_output_shows_is_the_renderers():
    output = textwrap.dedent("""\
        >   ???
        E   ValueError: see /app/cfg/settings.yaml

        /app/ghost.py:2: ValueError
        solution.py:2: RuntimeError
          File "/app/gen/loader.py", line 7, in load
          File "<frozen runpy>", line 88, in _run_code
        """)
    assert traceback_lookups(output, "/app") == {"/app/ghost.py", "/app/solution.py", "/app/gen/loader.py"}
    effects = SegmentEffects(missing={"/app/ghost.py", "/app/gen/loader.py", "/app/source", "/app/out.txt"},
                             reads={"/app/solution.py"})
    assert E_of(effects, output=output) == {"/app/solution.py": "read", "/app/out.txt": "missing"}


def test_static_extraction_reads_the_verifiers_programs_not_its_data(tmp_path):
    (tmp_path / "test_outputs.py").write_text('def test_x():\n    assert open("/app/out.txt").read()\n')
    (tmp_path / "run-checks").write_text("#!/bin/bash\ntest -d /app/ssl\n")
    (tmp_path / "expected_output.txt").write_text(
        'Traceback (most recent call last):\n  File "/app/main.py", line 3, in <module>\n')
    (tmp_path / "reference.json").write_text('{"log": "/app/debug.log"}')
    (tmp_path / "golden").write_bytes(b"\x7fELF\x00/app/libfoo.so\x00")
    records = [d["record"] for d in static_inspection_set(sorted(tmp_path.iterdir()))]
    assert sorted(records) == ["/app/out.txt", "/app/ssl"]


# ---- 4. malformed static extractions -------------------------------------------------------------------------------

REALISTIC_SOURCES = r'''
import os, re, subprocess, time
from pathlib import Path
import requests

OUTPUT_DIR = "/app/output"
def test_log_format():
    unique_path = f"/test-{int(time.time())}"
    requests.get(f"http://localhost:9090{unique_path}")
    requests.get("http://localhost:9090/nonexistent-page?id=3&next=/login")
    assert re.search(r"root\s+/srv/docs", Path("/etc/nginx/conf.d/site.conf").read_text())
    assert re.search(r"error_page\s+404\s+/404\.html;", config)
    assert re.match(r"^/app/[a-z]+\.txt$", name) and re.match(r"/app/output_\d+\.csv", other)
    stamp = r"\d{2}/\w{3}/\d{4}:\d{2}:\d{2}:\d{2}"
def test_outputs(tmp_path):
    for i in range(3):
        assert os.path.exists(f"/app/output/part_{i:03d}.csv"), f"missing /app/output/part_{i}.csv."
        assert Path("/app/results/run_{}.json".format(i)).exists()
        assert Path("/app/results/log_%d.txt" % i).exists()
    report = f"{OUTPUT_DIR}/report.md"
    data = json.load(open(f"/app/data/{CONFIG['name']}.json"))
    body = '/app/{"not": "a field"}'
    assert subprocess.run(["/app/venv/bin/python", "/app/main.py", "--out=/app/o.txt"]).returncode == 0
    assert glob.glob("/app/shards/[0-9]*.bin"), "see https://example.com/docs/page and file:///app/x.txt"
    print(f"/{section}/index.html", "/*", "/app/50% done")
'''


def test_static_extraction_keeps_only_well_formed_paths():
    assert extract_verifier_records(REALISTIC_SOURCES) == [
        "/app/output", "/srv/docs", "/etc/nginx/conf.d/site.conf", "/app/output/part_*.csv",
        "/app/results/run_*.json", "/app/results/log_*.txt", "/app/data/*.json", "/app/venv/bin/python",
        "/app/main.py", "/app/o.txt", "/app/shards/[0-9]*.bin", "tcp:9090"]


@pytest.mark.parametrize("source, records", [
    ('f"/test-{int(time.time())}"', []),  # a URL path; its first directory a wildcard
    ('f"/app/{int(x)}-{y}.log"', ["/app/*-*.log"]),
    ('f"/app/report_{datetime.now():%Y%m%d}.csv"', ["/app/report_*.csv"]),
    ('"/app/{a}{b}/c"', ["/app/*/c"]),
    ('"cat /app/a.txt|grep x; ls /app/logs/"', ["/app/a.txt", "/app/logs"]),
    ('mkdir -p "/app/${NAME}/out" && date > /app/$(hostname).log', ["/app/*/out", "/app/*.log"]),
    ('open("/app/data.txt\\n")', ["/app/data.txt"]),
    ('"/app/x/.."', []),  # the workdir itself
])
def test_static_extraction_cases(source, records):
    assert extract_verifier_records(source) == records


# ---- 5. directories every process walks through -------------------------------------------------------------------

def test_tmp_and_home_directories_are_walked_through_not_inspected():
    effects = SegmentEffects(stats={"/tmp", "/root", "/home", "/tmp/out"}, listed={"/tmp"}, missing={"/srv"})
    assert E_of(effects) == {"/tmp/out": "stat"}


def test_a_record_right_under_the_root_never_tracks_all_of_it():
    assert tracked_roots("/app", ["/tmp"]) == ["/app", "/tmp"]
    assert tracked_roots("/app", ["/answer.txt", "/*.log", "/tmp/out/a.txt", "tcp:80"]) == [
        "/app", "/answer.txt", "/tmp/out"]
    assert VerifierRecords(["/tmp", "/answer.txt", "/*.log", "/app/x"]).directories == ["/answer.txt", "/app", "/tmp"]


# ---- 6. directories as records ---------------------------------------------------------------------------------------

SSL_TEST = """
    import os
    def test_ssl_dir():
        assert os.path.isdir("/app/ssl")
    def test_cert():
        assert open("/app/ssl/cert.pem").read().startswith("CERT")
"""


@pytest.mark.sandbox
def test_mkdir_is_a_write_of_the_directory_in_the_trace(tmp_path):
    shell = TracedShell(tmp_path)
    try:
        effects = shell.run("mkdir -p ssl/private && mkdir tmpdir && rmdir tmpdir")
    finally:
        shell.close()
    assert effects.dirs_created == {shell.path("ssl"), shell.path("ssl/private")}  # tmpdir: temporary, folded


@pytest.mark.sandbox
def test_the_command_that_made_a_directory_the_verifier_checks_gets_write_credit(tmp_path):
    traj = run_episode(tmp_path, ["mkdir -p /app/ssl", "echo CERT > /app/ssl/cert.pem", "ls /app/ssl"], SSL_TEST)
    assert traj["verifier"]["reward"] == 1.0, traj["verifier"]["output"]
    how = {d["record"]: d["how"] for d in traj["verifier"]["E_detail"]}
    assert how["/app/ssl"] == "stat" and how["/app/ssl/cert.pem"] == "read"
    mkdir = traj["commands"][0]
    assert [(w["path"], w["created"], w["hash_after"]) for w in mkdir["writes"]] == [("/app/ssl", True, "dir")]
    assert traj["final"]["files"]["/app/ssl"]["exists"] is True
    credit = compute_credit(traj, CreditConfig())
    assert [c.direct for c in credit.commands] == [1.0, 1.0, 0.0]
