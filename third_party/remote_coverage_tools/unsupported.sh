#!/bin/sh
echo "coverage is not collected through Bazel in this project" >&2
exit 1
