"""The PTY reader's marker search: a read that ends anywhere inside the marker line leaves nothing of it behind."""

from __future__ import annotations

from depgpo.env.sandbox.shell import _Output

NONCE = "0123456789abcdef"


def test_a_marker_split_across_reads_leaves_no_byte_for_the_next_command():
    # What the shell's `__depgpo_mark 3 NONCE` prints after a command's output, with the PTY's CR before LF.
    output, line = b"1 /app/todo.txt\r\n", f"\x1eDEPGPO 3 {NONCE} 0\x1e\r\n".encode()
    for split in range(len(line) + 1):
        reads = [output + line[:split], line[split:]]
        buffer, taken = _Output(), None
        for chunk in reads:  # every read arrives; what follows the marker stays for the next command
            buffer.append(chunk)
            match = None if taken else buffer.find(3, NONCE)
            if match:
                taken = buffer.take(match.start(), match.end())
        assert taken == (output, 0), split
        assert bytes(buffer.data) == b"", f"split at byte {split} left {bytes(buffer.data)!r} for the next command"
