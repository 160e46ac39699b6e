#!/bin/bash
python3 - <<'PY'
import csv
with open("/app/data/orders.csv") as f:
    total = sum(int(r["quantity"]) * float(r["price"]) for r in csv.DictReader(f))
open("/app/project/total.txt", "w").write(f"{total:.2f}\n")
PY
echo processed >> /app/data/status.log
