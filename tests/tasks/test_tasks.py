"""Task loading (Harbor, Terminal-Bench-1), the Dockerfile replay plan, offline verifiers and task-set checks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from depgpo.env.checks.task_check import TaskReport, check_task, check_task_set, format_reports
from depgpo.tasks import (TaskFormatError, load_task, load_task_set, offline_test_command, task_dirs,
    verifier_offline_blockers)
from depgpo.tasks.dockerfile import (CopyStep, DockerfileError, network_fetch_commands, package_install_commands,
    parse_dockerfile, resolve_copies)
from depgpo.tasks.task import ISOLATED_PYTEST
from tests.helpers import DATA, REPO

FIXTURES = DATA / "tasks"
SHOWN = "tests/data/tasks"  # how messages quote fixture paths when loaded by relative path


@pytest.fixture(autouse=True)
def _run_from_repo_root(monkeypatch):
    monkeypatch.chdir(REPO)


def make_task(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def harbor_files(**overrides: str) -> dict[str, str]:
    files = {
        "instruction.md": "Say hello.\n",
        "task.toml": "",
        "environment/Dockerfile": "FROM python:3.12-slim\nWORKDIR /app\n",
        "tests/test.sh": "python3 -m pytest /tests/test_hello.py -rA\n",
        "tests/test_hello.py": "def test_hello():\n    pass\n",
    }
    return {**files, **overrides}


def tb1_files(**overrides: str) -> dict[str, str]:
    files = {
        "task.yaml": "instruction: Say hello.\n",
        "Dockerfile": "FROM python:3.12-slim\nWORKDIR /app\n",
        "run-tests.sh": "python3 -m pytest $TEST_DIR/test_outputs.py -rA\n",
        "tests/test_outputs.py": "def test_hello():\n    pass\n\ndef test_bye():\n    pass\n",
    }
    return {**files, **overrides}


# --- fixture tasks: every field ---------------------------------------------------------------------------------


def test_harbor_write_answer_fields():
    task = load_task(f"{SHOWN}/write-answer")
    root = FIXTURES.resolve() / "write-answer"
    assert task.id == "write-answer"
    assert task.root == root
    assert task.format == "harbor"
    assert task.instruction == ("The file /app/data.txt holds one integer per line.\n"
                                "Write their sum to /app/answer.txt, as a single line with nothing else on it.\n")
    assert task.workdir == "/app"
    assert task.env == {"FOO": "bar"}
    assert task.app_files == [(root / "environment" / "data.txt", "/app/data.txt")]
    pip = "mkdir -p /app && cd /app || exit 1; pip install --no-cache-dir pyyaml==6.0.2"
    apt = ("mkdir -p /app && cd /app || exit 1; apt-get update && apt-get install -y --no-install-recommends jq"
           "     && rm -rf /var/lib/apt/lists/*")
    assert task.setup_commands == [pip, apt]
    assert task.unreplayable == []
    assert task.solution_script == root / "solution" / "solve.sh"
    assert task.tests_dir == root / "tests"
    assert task.test_command == "bash /tests/test.sh"
    assert task.verifier_files == [(root / "tests" / "test.sh", "/tests/test.sh"),
                                   (root / "tests" / "test_outputs.py", "/tests/test_outputs.py")]
    assert task.verifier_env == {}
    assert task.test_weights is None
    assert task.verifier_timeout_s == 120.0
    assert task.agent_timeout_s == 600.0
    assert task.docker_image is None
    assert task.allow_internet is True
    assert task.metadata == {"difficulty": "easy", "category": "data-processing", "tags": ["arithmetic", "files"]}


def test_harbor_offline_verifier_fields():
    task = load_task(FIXTURES / "offline-verifier")
    root = FIXTURES.resolve() / "offline-verifier"
    assert task.format == "harbor"
    assert task.workdir == "/srv/app"  # WORKDIR /srv, then WORKDIR app
    assert task.env == {"GREETING_FILE": "out/greeting.txt", "LANG": "C.UTF-8"}
    assert task.app_files == [(root / "environment" / "config", "/srv/app/config")]
    assert task.setup_commands == [] and task.unreplayable == []
    assert task.verifier_env == {"EXPECTED_GREETING": "hello"}
    assert task.verifier_timeout_s == 30.0
    assert task.agent_timeout_s is None
    assert task.docker_image == "example/greeting:1"
    assert task.allow_internet is False
    assert task.metadata == {}


def test_tb1_weighted_sum_fields():
    task = load_task(FIXTURES / "weighted-sum")
    root = FIXTURES.resolve() / "weighted-sum"
    assert task.id == "weighted-sum"
    assert task.format == "tb1"
    assert task.instruction == ("/app/inventory.csv lists items with a quantity and a unit price.\n"
                                "Write /app/report.txt with a single line: the total value of the inventory\n"
                                "(the sum of quantity times price), with two decimals.")
    assert task.workdir == "/app"
    assert task.env == {"REPORT_DECIMALS": "2"}  # from docker-compose.yaml; its TEST_DIR is the harness's
    assert task.app_files == [(root / "inventory.csv", "/app/inventory.csv")]
    assert task.setup_commands == ["mkdir -p /app && cd /app || exit 1; mkdir -p /app/archive"]
    assert task.unreplayable == []
    assert task.solution_script == root / "solution.sh"
    assert task.tests_dir == root / "tests"
    assert task.test_command == "bash /tests/run-tests.sh"
    assert task.verifier_files == [(root / "run-tests.sh", "/tests/run-tests.sh"),
                                   (root / "tests" / "test_outputs.py", "/tests/test_outputs.py")]
    assert task.verifier_env == {"TEST_DIR": "/tests"}
    assert task.test_weights == {"test_report_exists": 0.3, "test_report_total": 0.7}
    assert task.verifier_timeout_s == 45.0
    assert task.agent_timeout_s == 300.0
    assert task.docker_image is None
    assert task.allow_internet is True
    assert task.metadata == {"author_name": "depgpo fixtures", "author_email": "fixtures@example.invalid",
                             "difficulty": "easy", "category": "data-processing", "tags": ["csv", "arithmetic"],
                             "parser_name": "pytest", "run_tests_in_same_shell": False}


def test_unreplayable_environment_still_loads():
    task = load_task(FIXTURES / "unreplayable-env")
    assert task.workdir == "/home/builder"
    assert task.app_files == [] and task.setup_commands == []
    assert task.solution_script is None
    assert task.unreplayable == [
        "FROM ubuntu:24.04: episodes run on this host's Debian root, not on this image",
        "ADD https://example.invalid/tool.tar.gz /opt/: downloads https://example.invalid/tool.tar.gz",
        "RUN git clone https://example.invalid/tool.git /opt/tool: downloads from the network",
        "USER builder: episodes run as root",
        'ENTRYPOINT ["/opt/tool/start.sh"]: nothing starts it before the agent\'s shell',
    ]


# --- malformed tasks: exact messages ------------------------------------------------------------------------------


@pytest.mark.parametrize("name, message", [
    ("missing-instruction", f"{SHOWN}/missing-instruction/instruction.md: file is missing; "
                            "write the agent's task prompt there"),
    ("bad-toml", f"{SHOWN}/bad-toml/task.toml: not valid TOML (Expected ']' at the end of a table declaration "
                 "(at line 1, column 10)); fix the syntax"),
    ("bad-timeout", f"{SHOWN}/bad-timeout/task.toml: [verifier] timeout_sec must be a positive number of seconds, "
                    "got 'abc'; write e.g. timeout_sec = 600.0"),
    ("missing-tests", f"{SHOWN}/missing-tests/tests: directory is missing; "
                      "add tests/test.sh (the verifier entry point) and its test files"),
    ("bad-weights", f"{SHOWN}/bad-weights/weights.json: weights must sum to 1, got 0.9; "
                    "rescale them so they add up to 1 (within 1e-06)"),
])
def test_malformed_fixture_message(name, message):
    with pytest.raises(TaskFormatError) as caught:
        load_task(f"{SHOWN}/{name}")
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("files, message", [
    (harbor_files(**{"task.toml": "[agent]\ntimeout_sec = 0\n"}),
     "task.toml: [agent] timeout_sec must be a positive number of seconds, got 0; write e.g. timeout_sec = 900.0"),
    (harbor_files(**{"task.toml": "[environment]\nallow_internet = 'no'\n"}),
     "task.toml: [environment] allow_internet must be true or false, got 'no'; write allow_internet = true"),
    (harbor_files(**{"task.toml": "[environment]\ndocker_image = 3\n"}),
     "task.toml: [environment] docker_image must be a string, got 3; "
     'write e.g. docker_image = "user/image:tag", or remove it'),
    (harbor_files(**{"task.toml": "verifier = 5\n"}),
     "task.toml: verifier must be a table, got 5; write it as a [verifier] section"),
    (harbor_files(**{"instruction.md": "  \n"}), "instruction.md: file is empty; write the agent's task prompt there"),
    (harbor_files(**{"tests/test.sh": None}),
     "tests/test.sh: file is missing; add the verifier entry point; "
     "it must leave the reward in /logs/verifier/reward.txt"),
    (harbor_files(**{"environment/Dockerfile": None}),
     "environment/Dockerfile: file is missing; "
     "add the task's Dockerfile, or name a prebuilt image in [environment] docker_image"),
    (harbor_files(**{"environment/Dockerfile": "FROM python:3.12-slim\nCOPY nowhere.txt /app/\n"}),
     "environment/Dockerfile: line 2: COPY source nowhere.txt is not in the build context {root}/environment; "
     "add the file to the build context or fix the path"),
    (harbor_files(**{"environment/Dockerfile": "FROM python:3.12-slim\nFETCH x\n"}),
     "environment/Dockerfile: line 2: unknown instruction FETCH; use a Dockerfile instruction"),
    (tb1_files(**{"task.yaml": "instruction: [1, 2\n"}),
     "task.yaml: not valid YAML at line 2, column 1 (expected ',' or ']', but got '<stream end>'); fix the syntax"),
    (tb1_files(**{"task.yaml": "difficulty: easy\n"}),
     "task.yaml: instruction must be non-empty text, got None; write the agent's task prompt as instruction: |"),
    (tb1_files(**{"task.yaml": "instruction: Say hello.\nmax_test_timeout_sec: soon\n"}),
     "task.yaml: max_test_timeout_sec must be a positive number of seconds, got 'soon'; "
     "write e.g. max_test_timeout_sec: 60.0"),
    (tb1_files(**{"run-tests.sh": None}),
     "run-tests.sh: file is missing; add the verifier entry point; "
     "it runs pytest with -rA on $TEST_DIR/test_outputs.py"),
    (tb1_files(**{"Dockerfile": None}), "Dockerfile: file is missing; add the task's Dockerfile"),
    (tb1_files(**{"weights.json": '{"test_hello": -0.5, "test_bye": 1.5}'}),
     'weights.json: must map test names to non-negative numbers, got {\'test_hello\': -0.5, \'test_bye\': 1.5}; '
     'write e.g. {"test_output_exists": 0.3, "test_output_correct": 0.7}'),
    (tb1_files(**{"weights.json": "[0.5, 0.5]"}),
     "weights.json: must map test names to non-negative numbers, got [0.5, 0.5]; "
     'write e.g. {"test_output_exists": 0.3, "test_output_correct": 0.7}'),
    ({**harbor_files(), "task.yaml": "instruction: hi\n"},
     ": has both task.toml/instruction.md (Harbor) and task.yaml (Terminal-Bench-1); keep the files of one format"),
    ({"README.md": "not a task\n"},
     ": has neither instruction.md + task.toml (Harbor) nor task.yaml (Terminal-Bench-1); "
     "add the task files, or point at the directory that holds them"),
])
def test_malformed_task_message(tmp_path, files, message):
    root = make_task(tmp_path / "task", {name: text for name, text in files.items() if text is not None})
    with pytest.raises(TaskFormatError) as caught:
        load_task(root)
    separator = "" if message.startswith(":") else "/"
    assert str(caught.value) == f"{root}{separator}" + message.replace("{root}", str(root.resolve()))


def test_weights_sum_within_tolerance(tmp_path):
    ok = make_task(tmp_path / "ok", tb1_files(**{"weights.json": '{"test_hello": 0.3, "test_bye": 0.7000005}'}))
    assert load_task(ok).test_weights == {"test_hello": 0.3, "test_bye": 0.7000005}
    off = make_task(tmp_path / "off", tb1_files(**{"weights.json": '{"test_hello": 0.3, "test_bye": 0.700002}'}))
    with pytest.raises(TaskFormatError, match=r"weights must sum to 1, got 1\.000002;"):
        load_task(off)


# --- format defaults and environment sources ----------------------------------------------------------------------


def test_harbor_defaults(tmp_path):
    task = load_task(make_task(tmp_path / "t", harbor_files()))
    assert (task.verifier_timeout_s, task.agent_timeout_s, task.allow_internet) == (600.0, None, True)
    assert task.metadata == {} and task.solution_script is None


def test_harbor_prebuilt_image_without_dockerfile(tmp_path):
    files = harbor_files(**{"task.toml": '[environment]\ndocker_image = "someone/img:1"\n'})
    del files["environment/Dockerfile"]
    files["environment/docker-compose.yaml"] = "services: {}\n"
    task = load_task(make_task(tmp_path / "t", files))
    assert task.docker_image == "someone/img:1"
    assert task.workdir == "/app" and task.app_files == [] and task.env == {}
    assert task.unreplayable == [
        "the environment is the prebuilt image someone/img:1, whose Dockerfile is not here",
        "environment/docker-compose.yaml is not read: what it adds to the environment is missing",
    ]


def test_tb1_defaults_without_compose(tmp_path):
    task = load_task(make_task(tmp_path / "t", tb1_files()))
    assert (task.verifier_timeout_s, task.agent_timeout_s) == (60.0, 360.0)
    assert task.test_weights is None and task.env == {} and task.metadata == {}


def test_tb1_compose_services_and_images(tmp_path):
    compose = ("services:\n"
               "  client:\n    build:\n      context: env\n    working_dir: /work\n"
               "    environment:\n      MODE: fast\n      TOKEN: ${HOST_TOKEN}\n      TEST_DIR: ${T_BENCH_TEST_DIR}\n"
               "  db:\n    image: postgres:16\n")
    files = tb1_files(**{"docker-compose.yaml": compose, "env/Dockerfile": "FROM debian:12\nENV MODE=slow\n"})
    task = load_task(make_task(tmp_path / "t", files))
    assert task.workdir == "/work"
    assert task.env == {"MODE": "fast"}
    assert task.unreplayable == ["docker-compose.yaml: service db is not started",
                                 "docker-compose.yaml sets TOKEN=${HOST_TOKEN}, which the harness fills in"]

    prebuilt = tb1_files(**{"docker-compose.yaml": "services:\n  client:\n    image: someone/tb:2\n"})
    task = load_task(make_task(tmp_path / "p", prebuilt))
    assert task.docker_image == "someone/tb:2"
    assert task.unreplayable == ["docker-compose.yaml runs the prebuilt image someone/tb:2, whose Dockerfile is "
                                 "not here"]

    shared = tb1_files(**{"docker-compose.yaml": "services:\n  client:\n    build:\n"
                                                 "      context: ${T_BENCH_REPO_ROOT}\n"
                                                 "      dockerfile: docker/base/Dockerfile.x\n"})
    task = load_task(make_task(tmp_path / "s", shared))
    assert task.unreplayable == ["docker-compose.yaml builds docker/base/Dockerfile.x in ${T_BENCH_REPO_ROOT}, "
                                 "outside the task"]


# --- task sets ----------------------------------------------------------------------------------------------------


def test_task_dirs_natural_order_and_single_task(tmp_path):
    for name in ("10", "2", "1", ".git", "__pycache__"):
        (tmp_path / name).mkdir()
    (tmp_path / "README.md").write_text("x")
    assert [d.name for d in task_dirs(tmp_path)] == ["1", "2", "10"]
    assert task_dirs(FIXTURES / "write-answer") == [FIXTURES / "write-answer"]


def test_load_task_set(tmp_path):
    for name in ("write-answer", "weighted-sum", "offline-verifier"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    assert [t.id for t in load_task_set(tmp_path)] == ["offline-verifier", "weighted-sum", "write-answer"]
    with pytest.raises(TaskFormatError, match=r"bad-timeout/task\.toml: \[verifier\] timeout_sec"):
        load_task_set(FIXTURES)  # the first malformed task in order stops the load


# --- Dockerfile parser ----------------------------------------------------------------------------------------------


def test_continuations_comments_and_blank_lines():
    plan = parse_dockerfile(
        "# syntax=docker/dockerfile:1\n"
        "FROM debian:bookworm-slim\n"
        "\n"
        "RUN apt-get update && \\\n"
        "    # a comment inside the continuation is dropped\n"
        "\n"
        "    apt-get install -y jq \\   \n"
        "    && echo done\n"
        "run\techo lower-case keyword and a tab\n")
    assert plan.base_image == "debian:bookworm-slim"
    assert plan.workdir is None
    assert plan.run_commands == [
        "mkdir -p / && cd / || exit 1; apt-get update &&     apt-get install -y jq     && echo done",
        "mkdir -p / && cd / || exit 1; echo lower-case keyword and a tab",
    ]


def test_json_array_run_and_shell():
    plan = parse_dockerfile(
        'FROM python:3.13-slim-bookworm\n'
        'WORKDIR /app\n'
        'RUN ["python3", "-c", "print(\'a b\')"]\n'
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\n'
        'RUN ls | wc -l\n')
    assert plan.run_commands == [
        "mkdir -p /app && cd /app || exit 1; python3 -c 'print('\"'\"'a b'\"'\"')'",
        "/bin/bash -o pipefail -c 'mkdir -p /app && cd /app || exit 1; ls | wc -l'",
    ]


def test_env_forms_and_substitution():
    plan = parse_dockerfile(
        'FROM debian:12\n'
        'ENV GREETING="hello world" PLAIN=one\\ two LITERAL=\'$HOME\'\n'
        'ENV NAME John Q. Public\n'
        'ENV PATH=/opt/tool/bin:$PATH PREFIX=${GREETING}! SEEN_BEFORE=$PLAIN\n'
        'ENV PLAIN=changed SAME_LINE=$PLAIN\n'
        'ENV FALLBACK=${MISSING:-default} ALT=${GREETING:+set} NO_ALT=${MISSING:+set}\n')
    assert plan.env == {
        "GREETING": "hello world", "PLAIN": "changed", "LITERAL": "$HOME", "NAME": "John Q. Public",
        "PATH": "/opt/tool/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",  # the image's PATH
        "PREFIX": "hello world!", "SEEN_BEFORE": "one two",
        "SAME_LINE": "one two",  # values on one ENV line see the variables as they were before it
        "FALLBACK": "default", "ALT": "set", "NO_ALT": "",
    }


def test_arg_defaults_reach_from_copy_and_run():
    plan = parse_dockerfile(
        "ARG BASE=python\n"
        "ARG TAG=3.12-slim\n"
        "ARG VERSION=1.2\n"
        "FROM ${BASE}:$TAG\n"
        "ARG VERSION\n"
        "ARG DEST=/opt/tool\n"
        "ARG UNSET\n"
        "WORKDIR $DEST\n"
        "COPY tool-$VERSION.txt ./\n"
        "RUN echo $VERSION ${UNSET} > version.txt\n"
        "ENV DEST=/elsewhere\n"
        "RUN echo $DEST\n")
    assert plan.base_image == "python:3.12-slim"
    assert plan.workdir == "/opt/tool"
    assert plan.copies == [CopyStep(9, ["tool-1.2.txt"], "/opt/tool", True)]
    assert plan.run_commands == [
        "mkdir -p /opt/tool && cd /opt/tool || exit 1; export VERSION=1.2; export UNSET=''; "
        "echo $VERSION ${UNSET} > version.txt",
        "mkdir -p /opt/tool && cd /opt/tool || exit 1; echo $DEST",  # ENV DEST shadows the ARG; env carries it
    ]
    assert "VERSION" not in plan.env  # ARGs exist at build time only


def test_replayed_commands_run_where_docker_runs_them(tmp_path):
    workdir = tmp_path / "made" / "by-workdir"
    plan = parse_dockerfile(f"FROM debian:12\nARG WHO=docker\nWORKDIR {workdir}\n"
                            "RUN echo built by $WHO > out.txt & wait; pwd >> out.txt\n")
    subprocess.run(["/bin/sh", "-c", plan.run_commands[0]], check=True)
    assert (workdir / "out.txt").read_text() == f"built by docker\n{workdir}\n"


def test_workdir_and_copy_destinations(tmp_path):
    context = make_task(tmp_path / "ctx", {"a.txt": "a", "b.txt": "b", "src/x.py": "x", "src/sub/y.py": "y",
                                           "script.sh": "s", "conf.ini": "c"})
    plan = parse_dockerfile(
        "FROM debian:12\n"
        "WORKDIR /srv\n"
        "WORKDIR app/../app2\n"
        "COPY a.txt .\n"               # into the workdir
        "COPY b.txt renamed.txt\n"     # a file path
        "COPY src/ ./src/\n"           # a directory's contents
        "COPY *.txt /data/\n"          # a glob
        "COPY script.sh /usr/local/bin\n"  # an existing image directory
        "COPY conf.ini /srv/app2\n"    # the workdir, which exists
        'COPY ["a.txt", "b.txt", "/multi/"]\n'
        "ADD conf.ini /etc/tool.ini\n")
    assert plan.workdir == "/srv/app2"
    ctx = context.resolve()
    assert resolve_copies(plan, context) == [
        (ctx / "a.txt", "/srv/app2/a.txt"),
        (ctx / "b.txt", "/srv/app2/renamed.txt"),
        (ctx / "src", "/srv/app2/src"),
        (ctx / "a.txt", "/data/a.txt"), (ctx / "b.txt", "/data/b.txt"),
        (ctx / "script.sh", "/usr/local/bin/script.sh"),
        (ctx / "conf.ini", "/srv/app2/conf.ini"),
        (ctx / "a.txt", "/multi/a.txt"), (ctx / "b.txt", "/multi/b.txt"),
        (ctx / "conf.ini", "/etc/tool.ini"),
    ]
    assert plan.unreplayable == []


def test_copy_sources_must_stay_in_the_context(tmp_path):
    (tmp_path / "secret.txt").write_text("s")
    (tmp_path / "ctx").mkdir()
    plan = parse_dockerfile("FROM debian:12\nCOPY ../secret.txt /app/\n")
    with pytest.raises(DockerfileError) as caught:
        resolve_copies(plan, tmp_path / "ctx")
    assert str(caught.value) == "line 2: COPY source ../secret.txt lies outside the build context"


def test_multi_stage_builds():
    plan = parse_dockerfile(
        "FROM golang:1.22 AS builder\n"
        "RUN go build -o /out/tool ./cmd/tool\n"
        "FROM python:3.12-slim AS base\n"
        "ENV MODE=base\n"
        "WORKDIR /app\n"
        "COPY requirements.txt .\n"
        "FROM base\n"
        "COPY --from=builder /out/tool /usr/local/bin/tool\n"
        "COPY --chown=1000:1000 main.py .\n"
        "RUN python3 main.py --check\n")
    assert plan.base_image == "python:3.12-slim"  # the builder stage's golang image does not matter
    assert plan.env == {"MODE": "base"}
    assert [(c.sources, c.dest) for c in plan.copies] == [(["requirements.txt"], "/app"), (["main.py"], "/app")]
    assert plan.run_commands == ["mkdir -p /app && cd /app || exit 1; python3 main.py --check"]
    assert plan.unreplayable == ["COPY --from=builder /out/tool /usr/local/bin/tool: copies from another image or "
                                 "build stage"]


@pytest.mark.parametrize("line, unreplayable", [
    ("ADD https://example.com/x.tar.gz /opt/", "ADD https://example.com/x.tar.gz /opt/: downloads "
                                               "https://example.com/x.tar.gz"),
    ("ADD git@github.com:o/r.git /src", "ADD git@github.com:o/r.git /src: downloads git@github.com:o/r.git"),
    ("ADD vendor.tar.gz /opt/", "ADD vendor.tar.gz /opt/: Docker unpacks the archive vendor.tar.gz"),
    ("COPY --chmod=755 run.sh /app/", "COPY --chmod=755 run.sh /app/: the file modes it sets are not applied"),
    ("RUN curl -fsSL https://example.com/install.sh | sh", "RUN curl -fsSL https://example.com/install.sh | sh: "
                                                           "downloads from the network"),
    ("RUN apt-get install -y curl && wget -q https://example.com/f",
     "RUN apt-get install -y curl && wget -q https://example.com/f: downloads from the network"),
    ("RUN --mount=type=secret,id=tok cat /run/secrets/tok", "RUN --mount=type=secret,id=tok cat /run/secrets/tok: "
                                                            "needs the build mount --mount=type=secret,id=tok"),
    ("USER app", "USER app: episodes run as root"),
    ('ENTRYPOINT ["nginx", "-g", "daemon off;"]', 'ENTRYPOINT ["nginx", "-g", "daemon off;"]: nothing starts it '
                                                  "before the agent's shell"),
])
def test_unreplayable_steps(line, unreplayable):
    plan = parse_dockerfile(f"FROM debian:12\n{line}\n")
    assert plan.unreplayable == [unreplayable]
    assert plan.run_commands == [] and plan.copies == []


@pytest.mark.parametrize("image, replayable", [
    ("debian:bookworm-slim", True), ("python:3.13-slim-bookworm", True), ("docker.io/library/python:3.11", True),
    ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", True), ("python:3.12-alpine", False),
    ("ubuntu:24.04", False), ("alexgshaw/some-task:20251031", False), ("scratch", False),
])
def test_base_images(image, replayable):
    assert (parse_dockerfile(f"FROM {image}\n").unreplayable == []) is replayable


def test_ignored_and_harmless_instructions():
    plan = parse_dockerfile(
        "FROM debian:12\nUSER root\nEXPOSE 8080\nLABEL a=b\nVOLUME /data\nHEALTHCHECK CMD true\n"
        'CMD ["python3", "-m", "http.server"]\n'
        "RUN --mount=type=cache,target=/root/.cache/pip pip install flask\n")
    assert plan.unreplayable == []
    assert plan.run_commands == ["mkdir -p / && cd / || exit 1; pip install flask"]


def test_heredoc_runs():
    plan = parse_dockerfile(
        "FROM debian:12\n"
        "WORKDIR /app\n"
        "RUN cat > notes.txt <<'EOF'\n"
        "FROM is not an instruction here\n"
        "EOF\n"
        "RUN <<EOT\n"
        "\techo one\n"
        "echo two\n"
        "EOT\n"
        "COPY <<EOF /app/inline.txt\n"
        "inline\n"
        "EOF\n"
        "ENV AFTER=1\n")
    assert plan.run_commands == [
        "mkdir -p /app && cd /app || exit 1; cat > notes.txt <<'EOF'\nFROM is not an instruction here\nEOF",
        "mkdir -p /app && cd /app || exit 1; \techo one\necho two",
    ]
    assert plan.unreplayable == ["COPY <<EOF /app/inline.txt: files written from a heredoc are not replayed"]
    assert plan.env == {"AFTER": "1"}


@pytest.mark.parametrize("text, message, fix", [
    ("", "line 1: no FROM instruction", "start the Dockerfile with FROM <image>"),
    ("RUN true\n", "line 1: RUN before the first FROM", "start the Dockerfile with FROM <image>"),
    ("FROM debian:12\nFETCH x\n", "line 2: unknown instruction FETCH", "use a Dockerfile instruction"),
    ("FROM debian:12\nENV ONLY\n", "line 2: ENV ONLY has no value", "write ENV ONLY=value"),
    ("FROM debian:12\nENV A=1 B\n", "line 2: ENV expects NAME=value, got 'B'", "write ENV NAME=value ..."),
    ("FROM debian:12\nCOPY onlyone\n", "line 2: COPY needs a source and a destination", "write COPY <src> <dest>"),
    ("FROM debian:12\nSHELL bash -c\n", "line 2: SHELL needs a JSON array", 'write SHELL ["/bin/bash", "-c"]'),
])
def test_dockerfile_errors(text, message, fix):
    with pytest.raises(DockerfileError) as caught:
        parse_dockerfile(text)
    assert (str(caught.value), caught.value.fix) == (message, fix)


def test_shell_command_classification():
    script = ("#!/bin/bash\n"
              "# curl in a comment does not count\n"
              "apt-get update; apt-get install -y curl git\n"
              "curl -LsSf https://astral.sh/uv/install.sh | sh\n"
              "if [ ! -d repo ]; then git clone https://example.com/r.git repo; fi\n"
              "sudo /usr/bin/wget -q https://example.com/f\n"
              "git status && python3 -m pip install --user numpy && uvx pytest\n"
              "DEBIAN_FRONTEND=noninteractive apt-get -y upgrade\n")
    assert network_fetch_commands(script) == ["curl -LsSf https://astral.sh/uv/install.sh",
                                              "git clone https://example.com/r.git repo",
                                              "/usr/bin/wget -q https://example.com/f"]
    assert package_install_commands(script) == ["apt-get update", "apt-get install -y curl git",
                                                "python3 -m pip install --user numpy", "uvx pytest",
                                                "apt-get -y upgrade"]


# --- verifiers without network ------------------------------------------------------------------------------------


def test_offline_command_for_harbor_rewrites_the_download_and_keeps_the_reward_file():
    task = load_task(FIXTURES / "write-answer")
    assert verifier_offline_blockers(task) == [
        "test.sh downloads: curl -LsSf https://astral.sh/uv/0.9.5/install.sh",
        "test.sh installs packages: apt-get update",
        "test.sh installs packages: apt-get install -y curl",
        "test.sh installs packages: uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA",
    ]
    command = offline_test_command(task)
    assert command == (f"mkdir -p /logs/verifier; cd /app && {ISOLATED_PYTEST} "
                       "-rA --junitxml=/logs/verifier/junit.xml /tests/test_outputs.py; "
                       "status=$?; if [ $status -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt; "
                       "exit $status")
    subprocess.run(["/bin/sh", "-n", "-c", command], check=True)  # valid shell


def test_offline_command_keeps_a_verifier_that_needs_no_network():
    task = load_task(FIXTURES / "offline-verifier")
    assert verifier_offline_blockers(task) == []
    assert offline_test_command(task) == "bash /tests/test.sh"


def test_offline_command_for_weighted_tb1_leaves_scoring_to_the_weights():
    command = offline_test_command(load_task(FIXTURES / "weighted-sum"))
    assert command == (f"mkdir -p /logs/verifier; cd /app && {ISOLATED_PYTEST} "
                       "-rA --junitxml=/logs/verifier/junit.xml /tests/test_outputs.py")


def test_offline_command_when_helper_scripts_are_missing(tmp_path):
    files = tb1_files(**{"run-tests.sh": "source $TEST_DIR/setup-uv-pytest.sh\nbash $TEST_DIR/run-uv-pytest.sh\n",
                         "tests/test_more.py": "def test_more():\n    pass\n", "tests/helpers.py": ""})
    task = load_task(make_task(tmp_path / "t", files))
    assert verifier_offline_blockers(task) == [
        "run-tests.sh runs /tests/run-uv-pytest.sh, which the task does not provide",
        "run-tests.sh runs /tests/setup-uv-pytest.sh, which the task does not provide",
    ]
    # The script names no test file, so every test file runs.
    assert offline_test_command(task).endswith("/tests/test_more.py /tests/test_outputs.py; status=$?; if [ $status "
                                               "-eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt; "
                                               "exit $status")


def test_offline_command_needs_a_test_file(tmp_path):
    files = harbor_files(**{"tests/test.sh": "curl -s https://example.com/check.sh | bash\n"})
    del files["tests/test_hello.py"]
    task = load_task(make_task(tmp_path / "t", files))
    with pytest.raises(ValueError) as caught:
        offline_test_command(task)
    assert str(caught.value) == ("t: test.sh needs the network and the task has no test_*.py file to run offline "
                                 "instead")


# --- task-set check -------------------------------------------------------------------------------------------------


def test_check_task_set_over_the_fixtures(wheel_cache):
    reports = {r.path.name: r for r in check_task_set(SHOWN, wheels=wheel_cache, build=False)}
    assert sorted(name for name, r in reports.items() if r.ok) == ["offline-verifier", "weighted-sum", "write-answer"]
    for name in ("missing-instruction", "bad-toml", "bad-timeout", "missing-tests", "bad-weights"):
        with pytest.raises(TaskFormatError) as caught:
            load_task(f"{SHOWN}/{name}")
        assert (reports[name].format, reports[name].problems) == (None, [str(caught.value)])
    # auto: the host stands for debian:bookworm-slim with only COPY/ENV/WORKDIR; the others need their image
    assert {name: reports[name].backend for name in ("offline-verifier", "weighted-sum", "write-answer")} == {
        "offline-verifier": "host", "weighted-sum": "image", "write-answer": "image"}
    assert reports["unreplayable-env"].problems == [
        "the build downloads: git clone https://example.invalid/tool.git /opt/tool",
        "the build downloads: ADD https://example.invalid/tool.tar.gz /opt/",
        "test.sh asks uv for Python 3.12; the image has none, and uv would download one (no network in episodes)",
        "no oracle solution (solution/solve.sh)",
    ]
    assert any("FROM ubuntu:24.04: approximated from Debian trixie" in note
               for note in reports["unreplayable-env"].notes)
    assert reports["offline-verifier"].notes == []


def test_check_tb1_scoring(tmp_path):
    files = tb1_files(**{"task.yaml": "instruction: hi\nparser_name: swebench\nrun_tests_in_same_shell: true\n",
                         "weights.json": '{"test_hello": 0.5, "test_outputs.py::test_bye": 0.25, "test_gone": 0.25}',
                         "solution.sh": "true\n"})
    report = check_task(make_task(tmp_path / "t", files), build=False)
    assert report.format == "tb1"
    assert report.problems == ["parser_name 'swebench': only pytest results can be scored",
                               "weights.json weighs test_gone, which no test file defines"]
    assert report.notes[-1] == "run_tests_in_same_shell: the verifier runs in a fresh shell here, not the agent's"


def test_check_reports_a_verifier_that_cannot_run_offline(tmp_path):
    files = harbor_files(**{"tests/test.sh": "wget -q https://example.com/t.py && python3 t.py\n",
                            "solution/solve.sh": "true\n"})
    del files["tests/test_hello.py"]
    report = check_task(make_task(tmp_path / "t", files), build=False)
    assert report.problems == ["test.sh downloads: wget -q https://example.com/t.py"]  # run as written: it fails


def test_format_reports():
    reports = [TaskReport(Path("set/good"), "harbor", [], ["a note"]),
               TaskReport(Path("set/bad"), None, ["set/bad/task.toml: broken; fix it"])]
    assert format_reports(reports) == ("ok   good (harbor)\n"
                                       "    note: a note\n"
                                       "FAIL bad (unreadable)\n"
                                       "    problem: set/bad/task.toml: broken; fix it\n"
                                       "1 of 2 tasks ok")
