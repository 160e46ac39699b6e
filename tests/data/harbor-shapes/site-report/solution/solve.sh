#!/bin/bash
cd /app/site
for f in $(ls pages | sort); do echo "$f $(wc -w < pages/$f)"; done > report.txt
