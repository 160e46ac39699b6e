#!/bin/bash
python3 - <<'PY'
import csv
with open("/app/inventory.csv") as f:
    total = sum(int(row["quantity"]) * float(row["price"]) for row in csv.DictReader(f))
open("/app/report.txt", "w").write(f"{total:.2f}\n")
PY
