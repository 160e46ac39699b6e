from pathlib import Path


def test_answer_file_exists():
    assert Path("/app/answer.txt").is_file()


def test_answer_is_the_sum():
    numbers = [int(line) for line in Path("/app/data.txt").read_text().split()]
    assert Path("/app/answer.txt").read_text().strip() == str(sum(numbers))
