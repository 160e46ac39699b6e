"""The command table: which programs read, inspect or run which of their operands, and how their options are spelled.

A program's records follow from its argument list once we know which options take a value (so that the value is
not taken for a file) and which operand is a pattern or a program rather than a file. The handlers
(`inference.handlers`) read these tables; a program no handler knows has only the records of its redirections
(and, run with `&`, the process it starts).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from depgpo.env.judging.verifier_source import LOCAL_HOST, named_port


@dataclass
class Args:
    flags: set[str]  # short letters ("r", "f") and long names ("--recursive")
    values: dict[str, str | None]  # options that take a value: "-n" -> "5"
    operands: list[str | None]  # None: an argument the text does not determine


def parse_args(args: list[str | None], value_options: Iterable[str] = ()) -> Args:
    """Split an argument list by the usual conventions (`-abc`, `-n5`, `--name=value`, `--`)."""
    value_options = set(value_options)
    parsed = Args(set(), {}, [])
    words = iter(args)
    for arg in words:
        if arg is None or arg == "-" or not arg.startswith("-"):
            parsed.operands.append(arg)
        elif arg == "--":
            parsed.operands.extend(words)
        elif arg.startswith("--"):
            name, has_value, value = arg.partition("=")
            if has_value:
                parsed.values[name] = value
            elif name in value_options:
                parsed.values[name] = next(words, None)
            else:
                parsed.flags.add(name)
        else:
            for position, letter in enumerate(arg[1:], start=1):
                if "-" + letter in value_options:
                    parsed.values["-" + letter] = arg[position + 1:] or next(words, None)
                    break
                parsed.flags.add(letter)
    return parsed


# Commands that only read their file operands (value: options that take a value, so it is not an operand).
READERS: dict[str, set[str]] = {
    "head": {"-n", "-c"}, "tail": {"-n", "-c", "-s"}, "less": set(), "more": set(), "wc": set(), "tac": set(),
    "sort": {"-k", "-t", "-o", "-S", "-T", "--key", "--field-separator", "--output"}, "uniq": {"-f", "-s", "-w"},
    "diff": {"-U", "-C"}, "cmp": set(), "comm": set(), "nl": set(), "od": {"-t", "-N", "-j"}, "xxd": {"-l", "-s"},
    "hexdump": {"-n", "-s"}, "strings": {"-n"}, "base64": set(), "cut": {"-d", "-f", "-c", "-b"},
    "paste": {"-d"}, "column": {"-s", "-t"}, "file": set(), "md5sum": set(), "sha1sum": set(),
    "sha256sum": set(), "iconv": {"-f", "-t"},
}
# Commands that inspect paths without reading them (existence checks).
INSPECTORS: dict[str, set[str]] = {
    "ls": {"-I", "--ignore", "-w", "--width", "-T"}, "stat": {"-c", "--format", "--printf"},
    "du": {"-d", "--max-depth", "-B"}, "tree": {"-I", "-L", "-P"}, "realpath": set(), "readlink": set(),
}
# Commands whose first operand is a pattern or program, not a file, unless an option supplies it.
PATTERN_FIRST: dict[str, tuple[set[str], set[str]]] = {  # name -> (options with a value, options giving the pattern)
    "grep": ({"-e", "-f", "-A", "-B", "-C", "-m", "--regexp", "--file"}, {"-e", "-f", "--regexp", "--file"}),
    "egrep": ({"-e", "-f", "-A", "-B", "-C", "-m"}, {"-e", "-f"}),
    "fgrep": ({"-e", "-f", "-A", "-B", "-C", "-m"}, {"-e", "-f"}),
    "rg": ({"-e", "-f", "-A", "-B", "-C", "-m", "-g", "-t", "--glob", "--type"}, {"-e", "-f", "--regexp"}),
    "awk": ({"-F", "-v", "-f"}, {"-f"}), "gawk": ({"-F", "-v", "-f"}, {"-f"}),
    "sed": ({"-e", "-f", "--expression", "--file"}, {"-e", "-f", "--expression", "--file"}),
    "jq": ({"-f", "--arg", "--argjson", "--slurpfile", "--rawfile", "--indent"}, {"-f", "--from-file"}),
}
# Options of jq that take two values (`--arg name value`): the second is not an operand either.
JQ_TWO_VALUE_OPTIONS = {"--arg", "--argjson", "--slurpfile", "--rawfile"}
FILE_TEST_OPERATORS = {"-e", "-f", "-d", "-s", "-r", "-w", "-x", "-L", "-h", "-p", "-S", "-b", "-c", "-a"}

# Interpreters that run a script file: options whose value is inline code (so no script file), and options that
# take some other value.
INTERPRETERS: dict[str, tuple[set[str], set[str]]] = {
    "python": ({"-c", "-m"}, {"-W", "-X"}), "Rscript": ({"-e"}, set()), "R": ({"-e"}, set()),
    "node": ({"-e", "-p", "--eval", "--print"}, {"-r", "--require"}), "ruby": ({"-e"}, {"-I", "-r"}),
    "perl": ({"-e", "-E"}, {"-I"}), "php": ({"-r"}, set()),
    "bash": ({"-c"}, {"-o", "-O"}), "sh": ({"-c"}, {"-o"}), "zsh": ({"-c"}, {"-o"}), "dash": ({"-c"}, {"-o"}),
}
SHELLS = {"bash", "sh", "zsh", "dash"}
PYTHON = re.compile(r"python[\d.]*|pypy3?")  # python3, python3.12, pypy3: the "python" interpreter
# Builtins run inside the shell: a `cd x && server &` statement starts `server`, not `cd`.
BUILTINS = {"cd", "pushd", "echo", "printf", "test", "[", "source", ".", "true", "false", ":"}

# Wrappers that run the rest of their arguments as a command: options that take a value, and how many leading
# operands are not part of the command (`timeout 10 cmd`).
WRAPPERS: dict[str, tuple[set[str], int]] = {
    "sudo": ({"-u", "-g", "-C", "-D"}, 0), "nohup": (set(), 0), "time": (set(), 0), "command": (set(), 0),
    "exec": (set(), 0), "nice": ({"-n"}, 0), "stdbuf": ({"-i", "-o", "-e"}, 0),
    "timeout": ({"-s", "-k", "--signal", "--kill-after"}, 1), "env": ({"-u", "-C"}, 0),
}


def unwrap(wrapper: str, args: list[str | None]) -> list[str | None]:
    """The command line a wrapper runs: `timeout -s KILL 10 cmd x` gives `cmd x`."""
    value_options, skipped = WRAPPERS[wrapper]
    rest = list(args)
    while rest and rest[0] is not None and (rest[0].startswith("-") or (wrapper == "env" and "=" in rest[0])):
        option = rest.pop(0)
        if option in value_options and rest:
            rest.pop(0)
    return rest[skipped:]


_URL_PORT = re.compile(rf"(https?)://{LOCAL_HOST}(?::(\d+))?")
# A server command names its port in one of these ways (`--port 8000`, `http.server 8080`, `0.0.0.0:5000`).
_SERVER_PORT = re.compile(
    rf"(?:--port[= ]|\s-p\s+|{LOCAL_HOST}:|http\.server\s+|\bport=|\bPORT=)['\"]?(\d{{2,5}})\b")


def url_port(url: str) -> str | None:
    """The local port a URL connects to (`http://localhost:8080/x`); None for other hosts."""
    match = _URL_PORT.match(url)
    if match is None:
        return None
    return f"tcp:{match.group(2) or (443 if match.group(1) == 'https' else 80)}"


def server_ports(program: str, text: str) -> list[str]:
    """The ports a server started by the statement `text` listens on, as far as the text names them."""
    ports = list(dict.fromkeys(p for m in _SERVER_PORT.finditer(text) if (p := named_port(m.group(1)))))
    if program.startswith("python") and "http.server" in text and not ports:
        ports = ["tcp:8000"]  # http.server's default
    return ports
