#!/bin/bash
# Builds what benchmarks/gpu_checklist.sh carries to a lent GPU machine whose
# image has Python 3.12 and torch but none of alf's other dependencies, no
# network, and no OpenGL or X11 libraries (the 2026-11 image):
#
#   bash benchmarks/gpu_deps.sh        # here, with the README's .venv built
#   -> .whl/dsite.tar.xz  site-packages: gin-config, gymnasium, optree,
#                         metadrive-simulator and the dependencies of it
#                         that the image lacks, for CPython 3.12 x86-64,
#                         pruned under the 64 MiB a call carries
#   -> .whl/gl/*.deb      libGL, libX11 and what they need (MetaDrive's
#                         engine loads them even when it renders nothing)
#
# .whl must be ignored (`echo /.whl/ >> .git/info/exclude`) and carried:
#   run(command='DEPS=.whl/dsite.tar.xz GL=.whl/gl bash
#   benchmarks/gpu_checklist.sh', carry=['.whl'])
set -euo pipefail
PY=${PY:-.venv/bin/python}
STAGE=$(mktemp -d)
WHEELS=$(mktemp -d)
trap 'rm -rf "$STAGE" "$WHEELS"' EXIT
mkdir -p .whl/gl
gymnasium=$($PY -c "import gymnasium; print(gymnasium.__version__)")
get() {  # get TAG PACKAGE...: wheels for CPython 3.12 (or TAG's) x86-64
    local version=$1; shift
    python3 -m pip download -q --no-deps --only-binary=:all: \
        --python-version "$version" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$WHEELS" "$@"
}
# metadrive-simulator 0.4.3 says Requires-Python <3.12 but runs on 3.12;
# its pins (panda3d 1.10.13, panda3d-gltf 0.13) have no 3.12 wheel or need
# none.
get 3.11 metadrive-simulator==0.4.3
get 3.12 panda3d==1.10.14 panda3d-gltf==0.13 panda3d-simplepbr gin-config \
    "gymnasium==$gymnasium" farama-notifications optree shapely pygame yapf \
    mediapy
for w in "$WHEELS"/*.whl; do unzip -q -o "$w" -d "$STAGE"; done
# progressbar 2.5 is an sdist only: take the venv's (pure Python).
cp -r "$($PY -c 'import progressbar, os; print(os.path.dirname(progressbar.__file__))')" "$STAGE/"
# What state and top-down observations never load: the 3-D render
# pipeline, tests, packaging tools, model importers and video codecs.
rm -rf "$STAGE"/metadrive/render_pipeline "$STAGE"/metadrive/tests \
    "$STAGE"/deploy_libs "$STAGE"/panda3d_tools "$STAGE"/pandac \
    "$STAGE"/panda3d/libp3assimp.so "$STAGE"/panda3d/libp3ffmpeg.so \
    "$STAGE"/yapftests "$STAGE"/venv
find "$STAGE" -name __pycache__ -prune -exec rm -rf {} +
tar -cJf .whl/dsite.tar.xz -C "$STAGE" .
# Debian/Ubuntu x86-64 packages, fetched without touching this machine's
# apt state.
o="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=$STAGE/lists"
mkdir -p "$STAGE/lists/partial"
apt-get $o update -qq
(cd .whl/gl && apt-get $o download -qq libgl1 libglx0 libglvnd0 libx11-6 \
    libxcb1 libxau6 libxdmcp6 libbsd0 libmd0 libx11-data libxext6)
ls -la .whl .whl/gl
