from pathlib import Path

REPORT = Path("/app/report.txt")


def test_report_exists():
    assert REPORT.is_file()


def test_report_total():
    assert REPORT.read_text().strip() == "52.50"
