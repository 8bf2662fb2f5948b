#!/usr/bin/env bash
# Makes a patched smdebug wheel ($SMDEBUG_VERSION+byoc.1) that works beside sagemaker-training's
# protobuf (>= 5) and numpy 2. See docker/patches/smdebug-*.patch for what changes and why.
set -euo pipefail
out=${1:?usage: build-smdebug.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "build-smdebug: $*" >&2; exit 1; }

work=$(mktemp -d)
mkdir -p "$out"
pip download --no-deps --only-binary :all: "smdebug==${SMDEBUG_VERSION}" -d "$work"
whl="$work/smdebug-${SMDEBUG_VERSION}-py2.py3-none-any.whl"
echo "${SMDEBUG_SHA256}  ${whl}" | sha256sum -c - \
    || fail "sha256 of ${whl} is not SMDEBUG_SHA256; check the upload and update the pin"
python -m wheel unpack --dest "$work/src" "$whl"
root="$work/src/smdebug-${SMDEBUG_VERSION}"
patch=$here/patches/smdebug-${SMDEBUG_VERSION}-numpy2-protobuf.patch
patch -d "$root" -p1 --forward < "$patch"
python3 "$here/source_record.py" smdebug --kind pypi-wheel --version "$SMDEBUG_VERSION" \
    --url "https://pypi.org/project/smdebug/${SMDEBUG_VERSION}/#files" --sha256 "$SMDEBUG_SHA256" \
    --patch "$patch"
python "$here/smdebug_pb2_upgrade.py" "$root/smdebug/core/tfevent/proto"
# wheel pack takes name and version from the dist-info directory's name.
mv "$root/smdebug-${SMDEBUG_VERSION}.dist-info" "$root/smdebug-${SMDEBUG_VERSION}+byoc.1.dist-info"
python -m wheel pack --dest-dir "$out" "$root"
