#!/bin/bash
grep -c ERROR /app/server.log > /app/errors.txt
