"""Extract chosen real Terminal-Bench 2.0 tasks (Harbor format) from a fetched git dir, for the conformance benchmark.

    python bench/tb2_tasks.py --mirror GITDIR --out DIR [--tasks a,b,c]

The tasks carry a canary string against training on benchmarks: they are extracted into a directory outside this
repository (the script refuses one inside it) and must never be committed. Each task tree is written exactly as
published (`git archive`), as DIR/<task>/{task.toml, instruction.md, environment/, solution/, tests/}.

Where the tasks come from. The official repository (github.com/laude-institute/terminal-bench-2, now
harbor-framework/terminal-bench-2; Harbor's registry pins terminal-bench@2.0 at commit
69671fbaac6d67a7ef0dfec016cc38a64ef7a77c) had no snapshot in the session's store, nor did its forks that were tried. The
snapshot used is `fetch github:yujianll/skill-usage` (HEAD f9f89fadc42150d0b3de9dfa8ff31da31607ca89, 2026-04-07,
"add skills"; git dir /work/.mirror/yujianll+skill-usage/repo), a paper's code that vendors the whole benchmark
unchanged under terminal-bench-2/ (tree 7f81efe1e373df6ef4a9a00242b226a5bd7b3f7d, 89 tasks, the upstream README
and LICENSE). Checked against a third party's sha256 list of files at the pinned 2.0 commit
(TengQinglong/hicode, hicode-eval/config/terminal-bench.json): 140 of 141 files compared match, among them every
file compared of the tasks below; the one difference is query-optimize/task.toml, which that list may itself have
altered. The snapshot lacks files of 4 MiB and more, so three tasks cannot be extracted whole
(pytorch-model-recovery, sqlite-with-gcov, train-fasttext); none is chosen. An official clone (task dirs at the
repository root) works as --mirror too: the prefix is detected.

What all chosen tasks share (Terminal-Bench 2.0 conventions): task.toml [environment] has build_timeout_sec = 600,
cpus, memory, storage and docker_image = "alexgshaw/<task>:20251031", and no allow_internet or gpus key (no task of
the 89 asks for a GPU). tests/test.sh does `apt-get update; apt-get install -y curl; curl -LsSf
https://astral.sh/uv/0.9.5/install.sh | sh; source $HOME/.local/bin/env`, refuses to run with PWD=/, then `uvx -p 3.13
-w pytest==8.4.1 [-w task pins] -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json
/tests/test_outputs.py -rA` and writes 1 or 0 to /logs/verifier/reward.txt (never reward.json; /logs/verifier must
already exist). So every task needs, offline, uv 0.9.5 and a Python 3.13 that uv can find (the base image's own on
python:3.13 and trixie, a uv-managed one on ubuntu:24.04 and python:3.11) plus the pinned wheels and their
dependencies.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

DEFAULT_MIRROR = "/work/.mirror/yujianll+skill-usage/repo"
REPO_ROOT = Path(__file__).resolve().parent.parent

# task: why chosen / what it exercises / runnable offline?
RUNNABLE = {
    "regex-log": "ubuntu:24.04, no RUN at all, stock test.sh (uv-managed 3.13 on ubuntu); solve writes a regex. yes",
    "cancel-async-tasks": "python:3.13-slim-bookworm bare; test.sh copies /tests/test.py to /app before pytest; "
    "tests call `python`. yes",
    "sqlite-db-truncate": "python:3.13, COPY a binary .db into /app; solve is pure Python. yes",
    "schemelike-metacircular-eval": "python:3.13, COPY tests/interp.py and a directory tests/test into /app; "
    "tests call `python3 interp.py`. yes",
    "llm-inference-batching-scheduler": "python:3.13, COPY ./task_file directory; tests/ has __init__.py and a helper "
    "module. yes",
    "large-scale-text-editing": "python:3.13, apt vim, RUN python3 generator at build; test.sh deletes and "
    "regenerates the CSV with system python3 and cd /app before pytest. yes",
    "openssl-selfsigned-cert": "python:3.13, apt openssl; tests run openssl and `python`. yes",
    "distribution-search": "python:3.13, pip numpy==2.1.2 scipy==1.15.3; test -w numpy==2.3.0, pytest -v. yes",
    "model-extraction-relu-logits": "python:3.13, COPY then pip numpy==2.2.5; test -w numpy==2.3.1 (other "
    "version than the image's); tests run `python3 /app/steal.py`. yes",
    "largest-eigenval": "python:3.13, pip numpy==2.3.0; test.sh without uv: pip install pytest (+ctrf) "
    "--break-system-packages, then `python -m pytest`; solve does pip install eigenpy==3.10.3. "
    "yes if solve-time pip reads the wheel cache",
    "portfolio-optimization": "python:3.13, apt gcc g++ build-essential, 5 COPYs, pip numpy==2.3.2 "
    "setuptools==78.1.1; C extension built by solve; test -w the same pins. yes",
    "tune-mjcf": "python:3.13, pip --no-cache-dir mujoco==3.3.5 (binary wheel); test -w mujoco==3.3.5. yes",
    "multi-source-data-merger": "python:3.11-slim (not 3.13), apt tmux asciinema, pip pandas==2.2.3 "
    "pyarrow==17.0.0, COPY data /data, ENV PYTHONPATH; test -w pandas==2.3.3 pyarrow==22.0.0 on a uv-managed 3.13. yes",
    "constraints-scheduling": "ubuntu:24.04, apt --no-install-recommends python3 python3-pip, COPY inputs/ dir. yes",
    "db-wal-recovery": "ubuntu:24.04, apt python3 python3-pip sqlite3 xxd, COPY db + WAL. yes",
    "git-leak-recovery": "ubuntu:24.04, apt git, RUN a COPY'd setup script that builds a repo offline. yes",
    "sparql-university": "ubuntu:24.04, COPY .ttl; test -w rdflib==7.1.4 (own test.sh). yes",
    "polyglot-rust-c": "ubuntu:24.04, apt rustc g++; tests compile with both. yes",
    "write-compressor": "ubuntu:24.04, apt gcc rustc bc, RUN gcc at build. yes",
    "prove-plus-comm": "ubuntu:24.04, apt coq, WORKDIR /workspace (not /app), COPY renames a file. yes",
    "winning-avg-corewars": "debian:13.0-slim (trixie), apt build-essential devscripts ..., adds a deb-src line "
    "and builds pmars from `apt-get source pmars` at build. yes if the Debian mirror serves sources",
}
NOT_OFFLINE = {
    "fix-git": "python:3.13, COPY setup.sh + resources then WORKDIR /app/personal-site; setup.sh does git clone "
    "from github.com at build, hidden in the COPY'd script. no (build)",
    "query-optimize": "ubuntu:24.04, RUN curl of a large sqlite db from huggingface.co at build. no (build)",
    "gpt2-codegolf": "ubuntu:24.04, RUN curl of the GPT-2 124M checkpoint (~500 MB) from openaipublic at build. "
    "no (build, huge)",
    "count-dataset-tokens": "python:3.13 bare; solve pip installs datasets/transformers and downloads a dataset and "
    "tokenizer from the Hugging Face hub. no (solve)",
    "log-summary-date-ranges": "python:3.13, RUN python3 generator at build (fine), but solve.sh starts with "
    "set -euo pipefail; apt-get update && apt-get install grep coreutils, so the oracle aborts offline. no (solve)",
    "sam-cell-seg": "python:3.11; test.sh curls MobileSAM weights from github.com and uvx -w git+https://..., "
    "torch from the PyTorch CPU index. no (test)",
}
CHOSEN = {**RUNNABLE, **NOT_OFFLINE}


def git(mirror: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", f"--git-dir={mirror}", *args], capture_output=True, check=False)


def task_prefix(mirror: str) -> str:
    """Where the task dirs live: terminal-bench-2/ in the vendored copy, the root in an official clone."""
    if git(mirror, "cat-file", "-e", "HEAD:terminal-bench-2/regex-log/task.toml").returncode == 0:
        return "terminal-bench-2/"
    return ""


def extract(mirror: str, prefix: str, task: str, out: Path) -> str:
    """Write out/<task>/ from HEAD, as published; returns a one-line summary."""
    result = git(mirror, "archive", "--format=tar", f"--prefix={task}/", f"HEAD:{prefix}{task}")
    if result.returncode != 0:
        raise RuntimeError(result.stderr.decode(errors="replace").strip() or "git archive failed")
    with tempfile.TemporaryFile() as tmp:
        tmp.write(result.stdout)
        tmp.seek(0)
        with tarfile.open(fileobj=tmp) as tar:
            files = [m for m in tar.getmembers() if m.isfile()]
            safe = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}  # Python >= 3.11.4
            tar.extractall(out, **safe)
    root = out / task
    froms = re.findall(r"^\s*FROM\s+(\S+)", (root / "environment/Dockerfile").read_text(), re.M)
    test_sh = (root / "tests/test.sh").read_text()
    uv = re.findall(r"astral\.sh/uv/([\d.]+)/", test_sh)
    pins = re.findall(r"(?:-w|--with)\s+(\S+)", test_sh)
    return f"{task}: {len(files)} files, FROM {' / '.join(froms)}, uv {uv[0] if uv else '-'}, pins {' '.join(pins)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", default=DEFAULT_MIRROR, help="git dir of the fetched snapshot")
    ap.add_argument("--out", required=True, help="directory outside this repository")
    ap.add_argument("--tasks", help="comma-separated subset (default: all chosen, runnable and not)")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    if out == REPO_ROOT or REPO_ROOT in out.parents:
        sys.exit(f"refusing to write benchmark tasks inside the repository: {out}")
    tasks = args.tasks.split(",") if args.tasks else list(CHOSEN)
    prefix = task_prefix(args.mirror)
    head = git(args.mirror, "rev-parse", "HEAD").stdout.decode().strip()
    out.mkdir(parents=True, exist_ok=True)
    print(f"mirror {args.mirror} at {head}, tasks under '{prefix or '/'}', into {out}")
    failed = []
    for task in tasks:
        try:
            line = extract(args.mirror, prefix, task, out)
        except (RuntimeError, OSError, tarfile.TarError) as e:
            failed.append(task)
            print(f"{task}: NOT extracted: {e}")
            continue
        print(f"{line}\n    {CHOSEN.get(task, 'not in the chosen list')}")
    print(f"{len(tasks) - len(failed)} of {len(tasks)} tasks written to {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
