"""The per-program handlers: what running one program does to the simulated session, by its arguments.

A handler gets the shell, the program name (after wrappers such as `sudo` or `timeout`), its argument values (None
where the text does not fix one) and its standard input, records the program's effects through the shell, and
returns its standard output when the text determines it ("" for a program that prints nothing on success).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from depgpo.inference.commands import (
    FILE_TEST_OPERATORS, INSPECTORS, INTERPRETERS, JQ_TWO_VALUE_OPTIONS, PATTERN_FIRST, PYTHON, READERS, SHELLS,
    parse_args, url_port,
)
from depgpo.inference.scripts import patch_effects, python_file_effects
from depgpo.tasks.shell_words import HOME, echo, join_outputs, printf

if TYPE_CHECKING:
    from depgpo.inference.simulator import ShellSimulator

Handler = Callable[["ShellSimulator", str, list[str | None], str | None], str | None]
HANDLERS: dict[str, Handler] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for name in names:
            HANDLERS[name] = handler
        return handler

    return register


def run_program(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    """Run a program by name or path: a script file, a handled program, or an interpreter."""
    if "/" in name:
        return _execute_file(shell, shell.resolve(name), stdin)
    base = posixpath.basename(name)
    handler = HANDLERS.get(base)
    if handler is not None:
        return handler(shell, base, args, stdin)
    interpreter = "python" if PYTHON.fullmatch(base) else base
    if interpreter in INTERPRETERS:
        return _interpret(shell, interpreter, args, stdin)
    return None


def _execute_file(shell: ShellSimulator, path: str | None, stdin: str | None) -> str | None:
    """`./run.sh`: the file is read (executed); a shell script whose text is known is followed."""
    script = shell.fs.read(path)
    if script is None:
        return None
    shebang = script.split("\n", 1)[0][2:].split() if script.startswith("#!") else ["sh"]
    if any(posixpath.basename(word) in SHELLS for word in shebang):
        return shell.run_script(script, subshell=True)
    return None


def _interpret(shell: ShellSimulator, interpreter: str, args: list[str | None], stdin: str | None) -> str | None:
    """`python3 x.py` reads the script; a shell also runs it, or its `-c` code, or its standard input; Python code
    whose text is known has the file effects its literal paths show (inference.scripts)."""
    inline_options, value_options = INTERPRETERS[interpreter]
    words = iter(args)
    for arg in words:
        if arg is None:
            return None  # a script name the text does not fix
        shell_code_option = interpreter in SHELLS and re.fullmatch(r"-[a-z]*c[a-z]*", arg)
        if arg in inline_options or shell_code_option:  # `bash -lc CODE` bundles -c with other flags
            code = next(words, None)
            if shell_code_option and code is not None:
                return shell.run_script(code, subshell=True)
            if interpreter == "python" and arg == "-c" and code is not None:
                _python_effects(shell, code)
            return None
        if arg in value_options:
            next(words, None)
        elif arg == "-":
            break  # the script comes on standard input
        elif not arg.startswith("-"):
            script = shell.fs.read(shell.resolve(arg))
            if interpreter in SHELLS and script is not None:
                return shell.run_script(script, subshell=True)
            if interpreter == "python" and script is not None:
                _python_effects(shell, script)
            return None
    if interpreter in SHELLS and stdin is not None:
        return shell.run_script(stdin, subshell=True)
    if interpreter == "python" and stdin is not None:
        _python_effects(shell, stdin)
    return None


def _python_effects(shell: ShellSimulator, code: str) -> None:
    for action, literal in python_file_effects(code):
        path = shell.resolve(literal)
        if action == "read":
            shell.fs.read(path)
        elif action == "delete":
            shell.fs.delete(path, recursive=False)
        else:  # what the script writes is not in its text: content unknown
            shell.fs.write(path, None, append=action == "append")


@handles("apply_patch")
def _apply_patch(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    """Codex's patch tool: the patch is its argument or its standard input."""
    patch = next((arg for arg in args if arg is not None and "*** " in arg), stdin)
    edited: str | None = None
    for action, literal, content in patch_effects(patch or ""):
        path = shell.resolve(literal)
        if action == "write":
            shell.fs.write(path, content)
        elif action == "delete":
            shell.fs.delete(path, recursive=False)
        elif action == "edit":
            shell.fs.read(path)
            shell.fs.write(path, None)
            edited = path
        elif edited is not None and path is not None:  # "*** Move to:" the file just edited
            shell.fs.transfer(edited, path, move=True)
    return None


# ---- builtins ----------------------------------------------------------------------------------------------------

@handles("cd", "pushd")
def _cd(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    operands = parse_args(args).operands
    target = operands[0] if operands else HOME
    if target == "-":
        shell.cwd, shell.oldpwd = shell.oldpwd, shell.cwd
    else:
        shell.cwd, shell.oldpwd = shell.resolve(target), shell.cwd
    return ""


@handles("echo")
def _echo(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    return echo(args)


@handles("printf")
def _printf(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    parsed = parse_args(args, {"-v"})
    if "-v" in parsed.values:  # `printf -v NAME …` assigns a variable instead of printing
        shell.variables.pop(parsed.values["-v"] or "", None)
        return ""
    if not parsed.operands or parsed.operands[0] is None:
        return None
    return printf(parsed.operands[0], parsed.operands[1:])


@handles("test", "[")
def _test(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    for operator, operand in zip(args, args[1:]):
        if operator in FILE_TEST_OPERATORS and operand not in FILE_TEST_OPERATORS:
            shell.fs.stat(shell.resolve(operand))
    return ""


@handles("source", ".")
def _source_file(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    operands = parse_args(args).operands
    script = shell.fs.read(shell.resolve(operands[0])) if operands else None
    return shell.run_script(script) if script is not None else None  # runs in this shell: cd persists


# ---- reading and inspecting files --------------------------------------------------------------------------------

@handles("cat")
def _cat(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    parsed = parse_args(args)
    if not parsed.operands:
        return stdin if not parsed.flags else None
    parts = [stdin if operand == "-" else shell.fs.read(shell.resolve(operand)) for operand in parsed.operands]
    return join_outputs(parts) if not parsed.flags else None  # -n, -A … change the output


@handles(*READERS)
def _read_operands(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    parsed = parse_args(args, READERS[name])
    for operand in parsed.operands:
        shell.fs.read(shell.resolve(operand))
    for option in ("-o", "--output"):  # `sort -o FILE` writes its (unknown) output there
        if name == "sort" and option in parsed.values:
            shell.fs.write(shell.resolve(parsed.values[option]), None)
    return None


@handles(*PATTERN_FIRST)
def _read_after_pattern(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    value_options, pattern_options = PATTERN_FIRST[name]
    if name == "jq":  # `--arg NAME VALUE`: drop NAME so that VALUE is read as the option's value
        args = [a for i, a in enumerate(args) if i == 0 or args[i - 1] not in JQ_TWO_VALUE_OPTIONS]
    parsed = parse_args(args, value_options)
    given_patterns = pattern_options & set(parsed.values)
    files = parsed.operands if given_patterns else parsed.operands[1:]
    for option in given_patterns & {"-f", "--file", "--from-file"}:
        shell.fs.read(shell.resolve(parsed.values[option]))
    in_place = name == "sed" and any(
        a is not None and (re.match(r"-[A-Za-z]*i", a) or a.startswith("--in-place")) for a in args)
    for operand in files:
        path = shell.resolve(operand)
        shell.fs.read(path)
        if in_place:
            shell.fs.write(path, None)
    return None


@handles(*INSPECTORS)
def _inspect(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    operands = parse_args(args, INSPECTORS[name]).operands
    for operand in operands or ["."]:
        shell.fs.stat(shell.resolve(operand))
    return None


@handles("find")
def _find(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    # Start points come before the first expression word (`-name`, `(`, `!`).
    for arg in args:
        if arg is None or arg.startswith("-") or arg in ("(", "!"):
            break
        shell.fs.stat(shell.resolve(arg))
    return None


# ---- changing files ----------------------------------------------------------------------------------------------

@handles("tee")
def _tee(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    parsed = parse_args(args)
    for operand in parsed.operands:
        shell.fs.write(shell.resolve(operand), stdin, append=bool({"a", "--append"} & parsed.flags))
    return stdin


@handles("touch")
def _touch(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    for operand in parse_args(args, {"-d", "-t", "-r"}).operands:
        path = shell.resolve(operand)
        if path is not None and not shell.fs.state_of(path).exists:
            shell.fs.write(path, "")  # an existing file only gets new timestamps
    return ""


@handles("mkdir")
def _mkdir(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    for operand in parse_args(args, {"-m", "--mode"}).operands:
        shell.fs.make_dir(shell.resolve(operand))
    return ""


@handles("rm", "rmdir", "unlink")
def _rm(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    parsed = parse_args(args)
    recursive = name == "rmdir" or bool({"r", "R", "--recursive", "d", "--dir"} & parsed.flags)
    for operand in parsed.operands:
        shell.fs.delete(shell.resolve(operand), recursive=recursive)
    return ""


@handles("cp", "mv")
def _cp_mv(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    parsed = parse_args(args, {"-t", "--target-directory", "-S", "--suffix"})
    operands = parsed.operands
    directory = parsed.values.get("-t") or parsed.values.get("--target-directory")
    if directory is None:
        if len(operands) < 2 or operands[-1] is None:
            return None
        directory, operands = operands[-1], operands[:-1]
        into = len(operands) > 1 or directory.endswith("/") or shell.fs.state_of(shell.resolve(directory) or "").is_dir
    else:
        into = True
    destination = shell.resolve(directory)
    for operand in operands:
        source = shell.resolve(operand)
        if source is None or destination is None:
            continue
        target = posixpath.join(destination, posixpath.basename(source)) if into else destination
        shell.fs.transfer(source, target, move=name == "mv")
    return ""


# ---- processes and ports -----------------------------------------------------------------------------------------

@handles("kill", "pkill", "killall")
def _kill(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    if name == "kill":
        return ""  # `kill PID` / `kill %1` name no process the text can follow
    parsed = parse_args(args, {"-s", "--signal", "-u", "-U", "-g", "-P"})
    for pattern in parsed.operands:
        for process in shell.matching_processes(pattern, full_command="f" in parsed.flags):
            shell.kill(process)
    return ""


@handles("ps", "pgrep", "pidof")
def _probe(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    parsed = parse_args(args, {"-u", "-U", "-g", "-P", "-o", "-p"})
    if name == "ps":
        shell.probe(shell.processes)
    else:
        shell.probe([p for pattern in parsed.operands for p in shell.matching_processes(pattern, "f" in parsed.flags)])
    return None


@handles("curl", "wget")
def _fetch_url(shell: ShellSimulator, name: str, args: list[str | None], stdin: str | None) -> str | None:
    output_options = {"-o", "--output"} if name == "curl" else {"-O", "--output-document"}
    parsed = parse_args(args, output_options | {"-H", "-d", "-X", "-u", "-A", "--data", "--header", "-w"})
    for operand in parsed.operands:
        port = url_port(operand or "")
        if port is not None:
            shell.connect(port)
    for option in output_options & set(parsed.values):
        shell.fs.write(shell.resolve(parsed.values[option]), None)
    return None
