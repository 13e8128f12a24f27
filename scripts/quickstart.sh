#!/usr/bin/env bash
# quickstart.sh: installs dependencies, builds tern and runs its main job: a chat with the model bundled in
# models/ (a one-shot generation instead when stdin is not a terminal).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
if [ -t 0 ] && [ -t 1 ]; then
  exec ./build/tern chat
else
  exec ./build/tern run --chat -p "Tell me a short story about a cat." -n 96 --temp 0.7 --seed 1
fi
