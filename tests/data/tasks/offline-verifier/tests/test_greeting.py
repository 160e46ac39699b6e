import os
from pathlib import Path


def test_greeting_written():
    path = Path("/srv/app") / os.environ.get("GREETING_FILE", "out/greeting.txt")
    assert path.read_text().strip() == os.environ["EXPECTED_GREETING"]
