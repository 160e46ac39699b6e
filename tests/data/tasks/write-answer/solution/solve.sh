#!/bin/bash
awk '{ total += $1 } END { print total }' /app/data.txt > /app/answer.txt
