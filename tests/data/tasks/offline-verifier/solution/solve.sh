#!/bin/bash
mkdir -p out && sed -n 's/^word = //p' config/settings.ini > out/greeting.txt
