from pathlib import Path


def test_total():
    assert Path("/app/project/total.txt").read_text().strip() == "18.50"


def test_the_data_is_marked_and_kept():
    assert Path("/app/data/status.log").read_text().splitlines() == ["processed"]
    assert Path("/app/data/orders.csv").read_text().splitlines()[0] == "id,quantity,price"
