"""Terminal-Bench-1 task directories (terminal-bench 0.x, SETA's seta-env).

    <task>/task.yaml            instruction, max_agent_timeout_sec, max_test_timeout_sec, parser_name, metadata
    <task>/Dockerfile           with docker-compose.yaml naming the build context (the task directory by default)
    <task>/solution.sh          the oracle solution
    <task>/run-tests.sh         the verifier entry point
    <task>/tests/               test_outputs.py and helper files
    <task>/weights.json         SETA: {"test_name": weight, ...}, summing to 1; the reward is the passing tests' sum

Sandbox layout of the verifier, as Terminal-Bench-1's harness does it: run-tests.sh and the contents of tests/ are
copied together into /tests, TEST_DIR=/tests is set (its docker-compose passes it), and `bash /tests/run-tests.sh`
runs in the WORKDIR. The harness, not the script, scores the run from pytest's `-rA` summary.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from depgpo.tasks.dockerfile import DockerfilePlan
from depgpo.tasks.task import Task, TaskFormatError, read_environment, seconds, tree_files

TB1_AGENT_TIMEOUT_S = 360.0  # defaults of Terminal-Bench-1's task.yaml schema
TB1_TEST_TIMEOUT_S = 60.0
WEIGHT_SUM_TOLERANCE = 1e-6
_COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml")


def is_tb1_task(path: Path) -> bool:
    return (path / "task.yaml").exists()


def load_tb1_task(shown: Path) -> Task:
    """Load the Terminal-Bench-1 task at `shown` (a path as the user gave it; messages quote it)."""
    root = shown.resolve()
    config_file = shown / "task.yaml"
    config = _read_config(config_file)
    instruction = config.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFormatError(config_file, f"instruction must be non-empty text, got {instruction!r}",
                              "write the agent's task prompt as instruction: |")

    tests_dir = root / "tests"
    if not tests_dir.is_dir():
        raise TaskFormatError(shown / "tests", "directory is missing", "add tests/ with the pytest files")
    run_tests = root / "run-tests.sh"
    if not run_tests.is_file():
        raise TaskFormatError(shown / "run-tests.sh", "file is missing",
                              "add the verifier entry point; it runs pytest with -rA on $TEST_DIR/test_outputs.py")

    plan, app_files, docker_image = _environment(root, shown)
    solution = root / "solution.sh"
    return Task(
        id=root.name,
        root=root,
        format="tb1",
        instruction=instruction,
        tests_dir=tests_dir,
        test_command="bash /tests/run-tests.sh",
        verifier_timeout_s=seconds(config.get("max_test_timeout_sec", TB1_TEST_TIMEOUT_S), config_file,
                                   "max_test_timeout_sec", "max_test_timeout_sec: 60.0"),
        agent_timeout_s=seconds(config.get("max_agent_timeout_sec", TB1_AGENT_TIMEOUT_S), config_file,
                                "max_agent_timeout_sec", "max_agent_timeout_sec: 360.0"),
        workdir=plan.workdir or "/app",
        env=plan.env,
        app_files=app_files,
        setup_commands=plan.run_commands,
        unreplayable=plan.unreplayable,
        verifier_files=[(run_tests, "/tests/run-tests.sh"), *tree_files(tests_dir, "/tests")],
        verifier_env={"TEST_DIR": "/tests"},
        solution_script=solution if solution.is_file() else None,
        test_weights=_read_weights(root / "weights.json", shown / "weights.json"),
        docker_image=docker_image,
        dockerfile=root / "Dockerfile" if (root / "Dockerfile").is_file() else None,
        build_context=root,
        metadata={k: v for k, v in config.items()
                  if k not in ("instruction", "max_test_timeout_sec", "max_agent_timeout_sec")},
    )


def _read_config(config_file: Path) -> dict:
    try:
        config = yaml.safe_load(config_file.read_text(errors="replace"))
    except yaml.YAMLError as e:
        raise TaskFormatError(config_file, _yaml_problem(e), "fix the syntax") from None
    if not isinstance(config, dict):
        raise TaskFormatError(config_file, f"must be a mapping of fields, got {config!r}",
                              "write fields like instruction: | ...")
    return config


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"not valid YAML{where} ({getattr(error, 'problem', None) or error})"


def _read_weights(path: Path, shown: Path) -> dict[str, float] | None:
    if not path.is_file():
        return None
    try:
        weights = json.loads(path.read_text(errors="replace"))
    except json.JSONDecodeError as e:
        raise TaskFormatError(shown, f"not valid JSON ({e})", "fix the syntax") from None
    if not isinstance(weights, dict) or not weights or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in weights.values()):
        raise TaskFormatError(shown, f"must map test names to non-negative numbers, got {weights!r}",
                              'write e.g. {"test_output_exists": 0.3, "test_output_correct": 0.7}')
    total = sum(weights.values())
    if not math.isclose(total, 1.0, rel_tol=0.0, abs_tol=WEIGHT_SUM_TOLERANCE):
        raise TaskFormatError(shown, f"weights must sum to 1, got {total:.10g}",
                              f"rescale them so they add up to 1 (within {WEIGHT_SUM_TOLERANCE:g})")
    return {name: float(w) for name, w in weights.items()}


def _environment(root: Path, shown: Path) -> tuple[DockerfilePlan, list[tuple[Path, str]], str | None]:
    """The Dockerfile plan, its files and any prebuilt image, with docker-compose.yaml's settings applied."""
    compose_file = next((root / name for name in _COMPOSE_FILES if (root / name).is_file()), None)
    service, notes = _main_service(compose_file, shown) if compose_file else ({}, [])
    docker_image = None
    if "build" not in service and "image" in service:
        docker_image = str(service["image"])
        plan, app_files = DockerfilePlan(), []
        plan.unreplayable.append(f"docker-compose.yaml runs the prebuilt image {docker_image}, whose Dockerfile "
                                 f"is not here")
    else:
        plan, app_files = _build(root, shown, service.get("build", {}))
    plan.unreplayable.extend(notes)
    environment = service.get("environment", {})
    if isinstance(environment, list):
        environment = dict(entry.partition("=")[::2] for entry in environment)
    for name, value in environment.items():
        value = str(value)
        if name == "TEST_DIR":  # the harness's own; verifier_env sets it
            continue
        if "${" in value:
            plan.unreplayable.append(f"docker-compose.yaml sets {name}={value}, which the harness fills in")
        else:
            plan.env[name] = value
    if isinstance(service.get("working_dir"), str) and "$" not in service["working_dir"]:
        plan.workdir = service["working_dir"]
    return plan, app_files, docker_image


def _build(root: Path, shown: Path, build: str | dict) -> tuple[DockerfilePlan, list[tuple[Path, str]]]:
    """The plan of the Dockerfile that docker-compose's `build` names (short form: just the context)."""
    context, dockerfile = (build, "Dockerfile") if isinstance(build, str) else (
        str(build.get("context", ".")), str(build.get("dockerfile", "Dockerfile")))
    if "$" in context + dockerfile:  # filled in by the harness: a build context in the Terminal-Bench repository
        plan = DockerfilePlan()
        plan.unreplayable.append(f"docker-compose.yaml builds {dockerfile} in {context}, outside the task")
        return plan, []
    if not (root / context / dockerfile).is_file():
        raise TaskFormatError(shown / context / dockerfile, "file is missing", "add the task's Dockerfile")
    return read_environment(root / context / dockerfile, root / context, shown / context / dockerfile)


def _main_service(compose_file: Path, shown: Path) -> tuple[dict, list[str]]:
    """The agent's service ("client", as Terminal-Bench-1 names it, else the first) and notes on the others."""
    shown_file = shown / compose_file.name
    try:
        compose = yaml.safe_load(compose_file.read_text(errors="replace"))
    except yaml.YAMLError as e:
        raise TaskFormatError(shown_file, _yaml_problem(e), "fix the syntax") from None
    services = compose.get("services") if isinstance(compose, dict) else None
    if not isinstance(services, dict) or not services or not all(isinstance(s, dict) for s in services.values()):
        raise TaskFormatError(shown_file, "services must map service names to their settings",
                              "write services: client: build: {dockerfile: Dockerfile}")
    name = "client" if "client" in services else next(iter(services))
    others = [f"{compose_file.name}: service {other} is not started" for other in services if other != name]
    return services[name], others
