#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the embedded default model (a ViT
# trained on scikit-learn's handwritten digits, config/models/vit-digits.yaml) on a digit image.
# Usage: tools/demo.sh [IMAGE]   (default tests/data/digits/digit-3.png)
# Builds only the `edgevit` program (tools/build.sh --target edgevit), not the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
tools/build.sh --target edgevit  # only what the demo runs; tools/test.sh builds everything
image=${1:-tests/data/digits/digit-3.png}
exec build/bin/edgevit run config/models/vit-digits.yaml --input "$image" --show
