"""Harbor task directories (Terminal-Bench 2.x, seta-env-release, TMax-15K-Harbor).

    <task>/instruction.md          the agent's prompt
    <task>/task.toml               [metadata]; [verifier] timeout_sec, env; [agent] timeout_sec;
                                   [environment] docker_image, allow_internet, ...
    <task>/environment/Dockerfile  built with environment/ as its context
    <task>/solution/solve.sh       the oracle solution
    <task>/tests/test.sh           the verifier entry point, next to its test files

Harbor uploads tests/ to /tests once the agent is done and runs `bash /tests/test.sh` in the container's WORKDIR;
the script leaves the reward in /logs/verifier/reward.txt (or reward.json).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from depgpo.tasks.dockerfile import DockerfilePlan
from depgpo.tasks.task import VERIFIER_VIEWS, Task, TaskFormatError, read_environment, seconds, tree_files

HARBOR_VERIFIER_TIMEOUT_S = 600.0  # Harbor's default when task.toml sets none


def is_harbor_task(path: Path) -> bool:
    return (path / "task.toml").exists() or (path / "instruction.md").exists()


def load_harbor_task(shown: Path) -> Task:
    """Load the Harbor task at `shown` (a path as the user gave it; messages quote it)."""
    root = shown.resolve()
    config_file = shown / "task.toml"
    config = _read_config(config_file)
    instruction = _read_instruction(shown / "instruction.md")
    verifier = _table(config, "verifier", config_file)
    agent = _table(config, "agent", config_file)
    environment = _table(config, "environment", config_file)

    docker_image = environment.get("docker_image")
    if docker_image is not None and not isinstance(docker_image, str):
        raise TaskFormatError(config_file, f"[environment] docker_image must be a string, got {docker_image!r}",
                              'write e.g. docker_image = "user/image:tag", or remove it')
    allow_internet = environment.get("allow_internet", True)
    if not isinstance(allow_internet, bool):
        raise TaskFormatError(config_file, f"[environment] allow_internet must be true or false, got "
                              f"{allow_internet!r}", "write allow_internet = true")
    view = verifier.get("view", "image")
    if view not in VERIFIER_VIEWS:
        raise TaskFormatError(config_file, f"[verifier] view must be one of {', '.join(VERIFIER_VIEWS)}, got {view!r}",
                              'write view = "full" where the tests need the agent\'s changes outside its workdir')
    verifier_env = verifier.get("env", {})
    if not isinstance(verifier_env, dict) or not all(isinstance(v, str) for v in verifier_env.values()):
        raise TaskFormatError(config_file, f"[verifier] env must map names to strings, got {verifier_env!r}",
                              'write e.g. env = { NAME = "value" }')

    tests_dir = root / "tests"
    if not tests_dir.is_dir():
        raise TaskFormatError(shown / "tests", "directory is missing",
                              "add tests/test.sh (the verifier entry point) and its test files")
    if not (tests_dir / "test.sh").is_file():
        raise TaskFormatError(shown / "tests" / "test.sh", "file is missing",
                              "add the verifier entry point; it must leave the reward in /logs/verifier/reward.txt")

    plan, app_files = _environment(root, shown, docker_image)
    solution = root / "solution" / "solve.sh"
    return Task(
        id=root.name,
        root=root,
        format="harbor",
        instruction=instruction,
        tests_dir=tests_dir,
        test_command="bash /tests/test.sh",
        verifier_timeout_s=seconds(verifier.get("timeout_sec", HARBOR_VERIFIER_TIMEOUT_S), config_file,
                                   "[verifier] timeout_sec", "timeout_sec = 600.0"),
        agent_timeout_s=seconds(agent["timeout_sec"], config_file, "[agent] timeout_sec", "timeout_sec = 900.0")
        if "timeout_sec" in agent else None,
        workdir=plan.workdir or "/app",
        env=plan.env,
        app_files=app_files,
        setup_commands=plan.run_commands,
        unreplayable=plan.unreplayable,
        verifier_files=tree_files(tests_dir, "/tests"),
        verifier_env=verifier_env,
        verifier_view=view,
        solution_script=solution if solution.is_file() else None,
        docker_image=docker_image,
        dockerfile=root / "environment" / "Dockerfile" if (root / "environment" / "Dockerfile").is_file() else None,
        build_context=root / "environment",
        allow_internet=allow_internet,
        metadata=_table(config, "metadata", config_file),
    )


def _read_config(config_file: Path) -> dict:
    if not config_file.is_file():
        raise TaskFormatError(config_file, "file is missing", "add task.toml with at least [verifier] timeout_sec")
    try:
        return tomllib.loads(config_file.read_text(errors="replace"))
    except tomllib.TOMLDecodeError as e:
        raise TaskFormatError(config_file, f"not valid TOML ({e})", "fix the syntax") from None


def _read_instruction(path: Path) -> str:
    if not path.is_file():
        raise TaskFormatError(path, "file is missing", "write the agent's task prompt there")
    text = path.read_text(errors="replace")
    if not text.strip():
        raise TaskFormatError(path, "file is empty", "write the agent's task prompt there")
    return text


def _table(config: dict, name: str, config_file: Path) -> dict:
    table = config.get(name, {})
    if not isinstance(table, dict):
        raise TaskFormatError(config_file, f"{name} must be a table, got {table!r}", f"write it as a [{name}] section")
    return table


def _environment(root: Path, shown: Path, docker_image: str | None) -> tuple[DockerfilePlan, list[tuple[Path, str]]]:
    dockerfile = root / "environment" / "Dockerfile"
    if dockerfile.is_file():
        plan, app_files = read_environment(dockerfile, root / "environment", shown / "environment" / "Dockerfile")
    elif docker_image:
        plan, app_files = DockerfilePlan(), []
        plan.unreplayable.append(f"the environment is the prebuilt image {docker_image}, whose Dockerfile is not here")
    else:
        raise TaskFormatError(shown / "environment" / "Dockerfile", "file is missing",
                              "add the task's Dockerfile, or name a prebuilt image in [environment] docker_image")
    if (root / "environment" / "docker-compose.yaml").is_file():
        plan.unreplayable.append("environment/docker-compose.yaml is not read: what it adds to the environment "
                                 "is missing")
    return plan, app_files
