import subprocess
from pathlib import Path


def test_six_is_installed_in_the_image():
    # the Dockerfile's RUN pip install, seen from the image's own python (pytest itself runs in uvx's venv)
    out = subprocess.run(["/usr/local/bin/python", "-c", "import six; print(six.__version__)"],
                         capture_output=True, text=True)
    assert out.stdout.strip() == "1.17.0", out.stderr


def test_report_matches_the_reference():
    expected = subprocess.run(["python", "/app/site/count_words.py", "/app/site/pages"], capture_output=True,
                              text=True, check=True).stdout
    assert Path("/app/site/report.txt").read_text() == expected
