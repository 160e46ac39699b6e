"""A directory is a file record (docs/credit.md#resources): the command that made the directory E holds earns for it."""

from __future__ import annotations

from depgpo.credit import CreditConfig, compute_credit
from tests.helpers.credit_examples import command, text_write

DIRECTORY = {"path": "/app/ssl", "created": True, "text": False, "lines_written": [], "content_after": None,
             "hash_after": "dir"}


def direct_credit(commands: list[dict], E: list[str]) -> list[float]:
    trajectory = {"instruction": "", "workdir": "/app", "tracked_roots": ["/app"], "commands": commands,
                  "verifier": {"E": E, "E_source": "trace"}}
    return [c.direct for c in compute_credit(trajectory, CreditConfig()).commands]


def test_mkdir_of_a_directory_in_E_is_a_surviving_record_level_write():
    commands = [command(0, "mkdir -p /app/ssl", writes=(DIRECTORY,)),
                command(1, "echo CERT > /app/ssl/cert.pem",
                        writes=(text_write("/app/ssl/cert.pem", ["CERT"], ["CERT"]),)),
                command(2, "ls /app/ssl", stats=("/app/ssl",))]
    assert direct_credit(commands, ["/app/ssl", "/app/ssl/cert.pem"]) == [1.0, 1.0, 0.0]
    assert direct_credit(commands, ["/app/ssl/cert.pem"]) == [0.0, 1.0, 0.0]  # E does not hold the directory


def test_a_directory_removed_later_earns_nothing_and_the_one_that_made_it_again_does():
    commands = [command(0, "mkdir /app/ssl", writes=(DIRECTORY,)),
                command(1, "rmdir /app/ssl", deletions=("/app/ssl",)),
                command(2, "mkdir /app/ssl", writes=(DIRECTORY,))]
    assert direct_credit(commands, ["/app/ssl"]) == [0.0, 0.0, 1.0]
