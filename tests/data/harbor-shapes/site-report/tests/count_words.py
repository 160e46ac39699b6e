"""Count the words of each page: the verifier's own reference, copied next to the site by test.sh."""
import sys
from pathlib import Path

for page in sorted(Path(sys.argv[1]).iterdir()):
    print(page.name, len(page.read_text().split()))
