"""Which words of an output reveal something (docs/credit.md#salient-tokens, docs/credit-decisions.md#d-incidental).

A word is salient when a pattern of `CreditConfig.salient_token_patterns` matches it whole. Before an output is cut
into words, its *incidental* spans are blanked: text an output shows whatever the task is, such as the clock, the
columns of `ls -l` or a version banner. Without that, `ls -la` (its `08:05` gives the words `08` and `05`) supports
any later command that happens to contain `05`, and the credit depends on the wall clock. Each rule is named, so a
run can switch it off (`credit.incidental_rules`), and `bench/credit_corpus.py` counts the edges each one removes.

A command *displays* what its output shows when every program it runs only prints existing text (`cat`, `grep`,
`ls` …); otherwise it *computes* it. `credit.prefer_computed` lets a token computed by a later command credit that
command rather than an earlier one that merely displayed the same string (docs/credit-decisions.md#d-first-revealed).
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

from depgpo.inference.commands import WRAPPERS, unwrap

if TYPE_CHECKING:  # config.py imports the rule names from here
    from depgpo.credit.config import CreditConfig

_ESCAPES = re.compile(r"\\[ntr]")
_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
          r"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\b\.?")
_WEEKDAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)(?:day|sday|nesday|rsday|urday)?\b,?"


def _blank(pattern: str, flags: int = 0) -> Callable[[str, str], str]:
    regex = re.compile(pattern, flags)
    return lambda output, _command: regex.sub(" ", output)


def _blank_unless_displayed(pattern: str) -> Callable[[str, str], str]:
    """A clock rule: what `cat`, `grep` or `tail` shows of a file is the task's data (a log's timestamps), what
    any other program prints of the clock is not. `ls -l`'s dates are the ls_long rule's."""
    regex = re.compile(pattern)
    # The search first: most outputs show no clock, and reading the command's words costs more than the regex.
    return lambda output, command: regex.sub(" ", output) if regex.search(output) and not displays_only(command) \
        else output


# A time of day: 08:05, 08:05:33, 08:05:33.123, 8:05 PM; not a port (host:8080) nor a line:column (x.py:12:5).
_CLOCK_TIME = r"(?<![\w.:/-])\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:\s?[AaPp][Mm])?(?![\w:]|\.\d)"
# Dates: 2026-12-01 (with a time, zone), Dec  1 2026, 1 Dec 2026, Tue Dec  1 (date(1), ls, banners, HTTP headers).
_DATE = (rf"\b\d{{4}}-\d{{2}}-\d{{2}}(?:[T ]\d{{2}}:\d{{2}}(?::\d{{2}})?(?:[.,]\d+)?(?:Z|\s?[+-]\d{{2}}:?\d{{2}})?)?\b"
         rf"|\b(?:{_WEEKDAY}\s+)?{_MONTH}\s+\d{{1,2}}\s+\d{{1,2}}:\d{{2}}(?::\d{{2}})?(?:\s+[A-Z]{{3,4}})?\s+\d{{4}}"
         rf"(?:\s+[+-]\d{{4}})?"  # git log, date(1), asctime: Wed Jan 17 11:00:00 [UTC] 2024 [+0000]
         rf"|\b(?:{_WEEKDAY}\s+)?{_MONTH}\s+\d{{1,2}}(?:,?\s+\d{{4}})?\b(?!:)"
         rf"|\b(?:{_WEEKDAY}\s+)?\d{{1,2}}\s+{_MONTH}(?:\s+\d{{4}})?\b"
         rf"|\b(?:UTC|GMT)\s+\d{{4}}\b")
# Elapsed times and rates: 0.12s, 3 seconds, real 0m0.003s, 12.3 MB/s, 45ms.
_DURATION = (r"\b\d+m\d+(?:\.\d+)?s\b"
             r"|\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds?|min|mins|minutes?|[kKMG]i?B/s|it/s)\b")
# A memory address in a repr: <object at 0x7f3a2c1b9e50> (not readelf's entry point, which is the binary's own).
_ADDRESS = r"(?<=\bat )0x[0-9a-fA-F]{8,16}\b"
# `ls -l`: mode, links, owner, group, size and date, up to the name; and its `total N` line.
_LS_LONG = re.compile(
    r"(?m)^(?:\d+\s+)?(?P<mode>[-dlcbps])[rwxsStT-]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+(?P<size>(?:\d+,\s*)?[\d.,]+[KMGT]?)\s+"
    r"(?:\S+\s+\d{1,2}\s+(?:\d{1,2}:\d{2}|\d{4})|\d{4}-\d{2}-\d{2}(?:\s+\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?"
    r"(?:\s+[+-]\d{4})?)\s|^total\s+[\d.]+[KMGT]?\s*$")
# Process ids: job control `[1] 12345`, `pid 123`, `PID: 123`, terminals (pts/0), the PID column of a `ps` table.
# Job control only at the start of a line, within it: `x[0]` and the next line's number are no job.
_PID = re.compile(r"(?m)^\[\d+\][ \t]+\d+\b|\b(?:pid|PID|process)[ =:#]+\d+\b|\b(?:pts|tty)/?\d+\b")
# A command made only of version or system queries: `python3 --version`, `openssl version && uname -a 2>&1`.
_VERSION_QUERY = re.compile(
    r"\s*(?:(?:[\w./+-]+\s+(?:--version|-V|-version|version)|(?:node|npm|gcc|g\+\+|ruby|php|go|perl)\s+-v"
    r"|uname(?:\s+-\w+)*|lsb_release(?:\s+-\w+)*)"
    r"(?:\s+[12]?>&[12])?(?:\s*\|\s*head(?:\s+-n?\s*\d+)?)?\s*(?:&&|;|\|\||\n|$)\s*)+")


def _ls_long(output: str, _command: str) -> str:
    """Blank the columns up to the name, but keep a regular file's size: "how many bytes" may be the task."""
    def blank(match: re.Match[str]) -> str:
        if match.group("mode") != "-":
            return " " * len(match.group())
        return " " * (match.start("size") - match.start()) + match.group("size") + " " * (match.end() - match.end("size"))
    return _LS_LONG.sub(blank, output)


_PS_COLUMNS = frozenset(("TTY", "CMD", "COMMAND", "STAT", "TIME", "USER", "%CPU", "%MEM", "UID", "START"))


def _pid(output: str, _command: str) -> str:
    output = _PID.sub(" ", output)
    lines = output.split("\n")
    for number, line in enumerate(lines):  # a ps header: blank its PID and PPID columns in the rows below
        header = line.split()
        columns = [i for i, name in enumerate(header) if name in ("PID", "PPID", "PGID", "SID", "TGID")]
        if not columns or _PS_COLUMNS.isdisjoint(header):  # a line of code that mentions PID is no table
            continue
        blanked = set(columns)
        for row in range(number + 1, len(lines)):
            fields = lines[row].split()
            if len(fields) <= columns[-1] or not all(fields[i].isdigit() for i in columns):
                break
            lines[row] = " ".join(" " if i in blanked else field for i, field in enumerate(fields))
    return "\n".join(lines)


def _version_banner(output: str, command: str) -> str:
    return "" if _VERSION_QUERY.fullmatch(command) else output


INCIDENTAL_RULES: dict[str, Callable[[str, str], str]] = {  # applied in this order
    "version_banner": _version_banner,
    "ls_long": _ls_long,
    "pid": _pid,  # before the clock rules: a ps row keeps its columns
    "date": _blank_unless_displayed(_DATE),
    "clock_time": _blank_unless_displayed(_CLOCK_TIME),
    "duration": _blank_unless_displayed(_DURATION),
    "memory_address": _blank(_ADDRESS),
}


def salient_tokens(text: str, config: CreditConfig) -> set[str]:
    is_salient = config.salient_regex.fullmatch
    return {word for word in set(config.token_regex.findall(_ESCAPES.sub(" ", text))) if is_salient(word)}


def revealing_tokens(output: str, command: str, config: CreditConfig) -> set[str]:
    """The salient tokens of a command's output once its incidental spans are blanked."""
    for name in config.incidental_rules:
        output = INCIDENTAL_RULES[name](output, command)
    return salient_tokens(output, config)


# Programs that print text that already exists (a file, a listing, history) rather than compute it. Not awk, wc,
# `grep -c` or `uniq -c`: they print a value of their own (a sum, a count).
DISPLAY_PROGRAMS = frozenset((
    "cat", "tac", "head", "tail", "less", "more", "grep", "egrep", "fgrep", "rg", "ls", "tree", "find", "stat",
    "file", "nl", "sed", "column", "cut", "sort", "uniq", "strings", "xxd", "od", "hexdump", "diff", "echo", "printf",
    "jq", "yq", "cd", "pwd", "true", "tr", "readlink", "realpath", "basename", "dirname", "which", "type", "tee",
    "sleep", "zcat",
    # shell words, which run nothing of their own
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "in", "[", "[[",
    "]", "]]", "test", "export", "set", "unset", "local", "return", "exit", "!", "{", "}",
))
_COUNTING_OPTIONS = {"grep": ("-c", "--count"), "egrep": ("-c",), "fgrep": ("-c",), "uniq": ("-c", "--count")}
_MAX_LEXED = 100_000  # characters; a longer text (a huge heredoc) counts as computing rather than cost seconds
_SEPARATORS = frozenset(("|", "||", "&&", ";", "&", "(", ")", ";;", "|&"))


@functools.lru_cache(maxsize=4096)  # asked once per rule and per config for the same command
def displays_only(command: str) -> bool:
    """Whether every program the command text runs only displays existing text. Read from the words of the text
    (quotes respected; a wrapper such as `timeout 60` or `sudo` stands for the program it runs); text that does
    not split into words, arithmetic `$((…))` and command substitution count as computing."""
    if "$(" in command or "`" in command or len(command) > _MAX_LEXED:
        return False
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:  # an unclosed quote
        return False
    segment: list[str] = []
    for word in [*words, ";"]:
        if word not in _SEPARATORS:
            segment.append(word)
            continue
        if segment and not _segment_displays(segment):
            return False
        segment = []
    return True


def _segment_displays(words: list[str]) -> bool:
    while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0], re.DOTALL):  # VAR=value before the program
        words = words[1:]
    while words and words[0] in WRAPPERS:
        words = [word or "" for word in unwrap(words[0], list(words[1:]))]
    if not words or re.fullmatch(r"[<>&\d]+.*", words[0]):  # only a redirection
        return True
    program = words[0].rsplit("/", 1)[-1]
    if program in _COUNTING_OPTIONS and any(word in _COUNTING_OPTIONS[program] for word in words[1:]):
        return False
    return program in DISPLAY_PROGRAMS
