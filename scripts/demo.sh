#!/usr/bin/env bash
# `make demo`: placeholder until the eugen-nerf method lands; trains nothing yet.
set -euo pipefail
echo "demo: the eugen-nerf method is not available yet" >&2
exit 1
