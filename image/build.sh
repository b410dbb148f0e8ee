#!/usr/bin/env bash
# `make image`: build the mcpnode container image without a container registry or a container
# runtime, from Debian packages and PyPI wheels, and export it as an OCI archive.
#
#   image/build.sh          everything below; the result is build/image/mcpnode-VERSION.oci.tar
#   image/build.sh wheels   only step 2: build/image/wheels, what the Containerfile installs
#   image/build.sh hash     the source hash an image built now would carry
#
# It builds the same image as the Containerfile (FROM debian:bookworm-slim + python3, then
# image/install.sh, then the same configuration), step for step:
#   1. base   `mmdebstrap --variant=minbase` of Debian bookworm with python3, slimmed the way
#             the official debian:*-slim images are (the dpkg path-excludes of debuerreotype's
#             slimify list: docs, man pages, locales). Cached under build/image/cache, keyed on
#             the exact mmdebstrap command line, so a rebuild costs seconds once it exists.
#   2. wheels the mcpnode wheel (pip wheel .), its dependencies as binary wheels for the base's
#             Python and this architecture, and pip's own wheel (pip download).
#   3. rootfs the base unpacked, image/install.sh run in it under chroot (no network needed).
#   4. OCI    umoci: one layer from the rootfs, then the image configuration (entrypoint,
#             cmd, user, env, exposed port, labels); tar of the OCI layout = an OCI archive
#             (what `skopeo copy oci-archive:...` and `podman load` read).
#   5. build/image/image.json: tag, archive, sizes, build time, the source hash it was built
#             from (tests/deploy/test_image.py compares it with the checkout's).
#
# Needs root (mmdebstrap's root mode and chroot). Installs mmdebstrap, umoci and skopeo with
# apt-get when missing, as `make bench` does with hwloc.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${IMAGE_OUT:-build/image}
PYTHON=${PYTHON:-.venv/bin/python}
SUITE=bookworm
NONROOT=65532:65532
METRICS_PORT=9847

say() { printf 'image: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }


# What the image is built from: the files that go into the wheel plus the image recipe. The
# label io.mcpnode.source-hash carries it, so a test can tell an image built from this checkout
# from a stale one.
source_hash() {
    { git ls-files -co --exclude-standard -- mcpnode profiles systemd etc pyproject.toml \
          README.md Containerfile image; } | LC_ALL=C sort | while read -r f; do
        [ -f "$f" ] && printf '%s  %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$f"
    done | sha256sum | cut -c1-16
}
hash=$(source_hash)
if [ "${1:-}" = hash ]; then
    printf '%s\n' "$hash"   # what tests/deploy/test_image.py compares with the image's label
    exit 0
fi

[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap in root mode, chroot); run: sudo make image"
[ -x "$PYTHON" ] || die "$PYTHON missing: run make .venv/.installed-dev first"

start=$(date +%s.%N)
version=$("$PYTHON" -c 'import mcpnode; print(mcpnode.__version__)')

ensure_tools() {
    local missing=()
    for tool in "$@"; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get to install them"
    say "installing ${missing[*]} (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# -- 1. base --------------------------------------------------------------------------------
# debuerreotype's slimify excludes (docker-library's debian:*-slim images); copyright files stay.
SLIM=(
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/groff/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/linda/*'
    --dpkgopt='path-exclude=/usr/share/lintian/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-exclude=/usr/share/man/*'
)
# --skip=output/dev: no device nodes in the tarball (a container runtime provides /dev, and
# mknod may be refused where this runs). Recommends off, as `apt-get --no-install-recommends`.
# The merged-usr hook lays out merged /usr with symlinks, as debootstrap does for bookworm;
# without it apt satisfies init-system-helpers' "usrmerge | usr-is-merged" with usrmerge,
# which drags the whole of perl (55 MB) into the image (mmdebstrap(1), "MERGED-/USR").
BASE_ARGS=(
    --variant=minbase --include=python3 --aptopt='APT::Install-Recommends "false"'
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
    "${SLIM[@]}" --skip=output/dev --quiet "$SUITE"
)

base() {
    local key tar
    key=$(printf '%s\n' "${BASE_ARGS[@]}" | sha256sum | cut -c1-16)
    tar="$OUT/cache/base-$SUITE-$key.tar"
    if [ ! -s "$tar" ]; then
        ensure_tools mmdebstrap
        mkdir -p "$OUT/cache"
        say "base: mmdebstrap $SUITE (minbase + python3) -> $tar"
        mmdebstrap --format=tar "${BASE_ARGS[@]}" "$tar.part"
        mv "$tar.part" "$tar"
    fi
    printf '%s\n' "$tar"
}

# -- 2. wheels ------------------------------------------------------------------------------
# Binary wheels for the image's interpreter, not this one: pip download with explicit tags.
# bookworm has glibc 2.36, so any manylinux tag up to 2_36 runs there.
wheels() {
    local pyver=$1 arch plats=()
    arch=$(uname -m)
    for minor in $(seq 17 36); do plats+=(--platform "manylinux_2_${minor}_${arch}"); done
    plats+=(--platform "manylinux2014_${arch}")
    rm -rf "$OUT/wheels" "$OUT/dist"
    mkdir -p "$OUT/wheels"
    say "wheels: mcpnode $version, dependencies for cp$pyver $arch"
    "$PYTHON" -m pip wheel -q --no-deps -w "$OUT/dist" .
    cp "$OUT"/dist/mcpnode-*.whl "$OUT/wheels/"
    "$PYTHON" -m pip download -q --disable-pip-version-check -d "$OUT/wheels" \
        --only-binary=:all: --implementation cp --python-version "$pyver" --abi "cp$pyver" \
        --abi abi3 --abi none "${plats[@]}" "$OUT"/wheels/mcpnode-*.whl pip
    cp image/install.sh "$OUT/wheels/install.sh"
}

# The Python of a base tarball, as "311", read from its file names (no need to run it).
base_python() {
    tar -tf "$1" | sed -n 's#^\./usr/bin/python3\.\([0-9][0-9]*\)$#3\1#p' | head -n1
}

if [ "${1:-}" = wheels ]; then
    # For the Containerfile: wheels for bookworm's Python 3.11.
    wheels "${MCPNODE_IMAGE_PYTHON:-311}"
    say "wheels ready in $OUT/wheels: podman build -f Containerfile ."
    exit 0
fi

ensure_tools mmdebstrap umoci skopeo
base_tar=$(base)
pyver=$(base_python "$base_tar")
[ -n "$pyver" ] || die "no /usr/bin/python3.N in $base_tar"
wheels "$pyver"

# -- 3. rootfs ------------------------------------------------------------------------------
rootfs="$OUT/rootfs"
rm -rf "$rootfs"
mkdir -p "$rootfs"
tar -C "$rootfs" -xf "$base_tar"
cp -r "$OUT/wheels" "$rootfs/tmp/wheels"
mkdir -p "$rootfs/dev"
# A private mount namespace, so the /dev bind mount (for /dev/null) ends with the chroot and
# never shows on the host; the image itself keeps an empty /dev for the runtime to fill.
say "rootfs: image/install.sh under chroot"
unshare --mount --propagation private /bin/sh -c 'mount --rbind /dev "$1/dev" && shift && exec "$@"' \
    sh "$rootfs" chroot "$rootfs" /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    /bin/sh /tmp/wheels/install.sh
rm -rf "$rootfs/tmp/wheels"

# -- 4. OCI ---------------------------------------------------------------------------------
tag=$version
layout="$OUT/oci"
archive="$OUT/mcpnode-$version.oci.tar"
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
case "$(uname -m)" in x86_64) goarch=amd64 ;; aarch64) goarch=arm64 ;; *) goarch=$(uname -m) ;; esac
rm -rf "$layout" "$archive"
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
say "oci: one layer from $rootfs"
umoci insert --image "$layout:$tag" --history.created_by "image/build.sh (mmdebstrap $SUITE + image/install.sh)" "$rootfs" /
# Keep in step with the Containerfile's ENTRYPOINT, CMD, USER, ENV, EXPOSE and LABEL lines
# (tests/deploy/test_image.py compares them with the built image).
umoci config --image "$layout:$tag" --no-history \
    --created "$created" --architecture "$goarch" --os linux \
    --config.entrypoint /opt/mcpnode/bin/mcpnode --config.cmd agent \
    --config.user "$NONROOT" --config.workingdir / \
    --config.env PATH=/opt/mcpnode/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 \
    --config.exposedports "$METRICS_PORT/tcp" --config.stopsignal SIGTERM \
    --config.label org.opencontainers.image.title=mcpnode \
    --config.label "org.opencontainers.image.description=Node agent for GPU inference hosts: discovery, tuning, audit, placement" \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.revision=$revision" \
    --config.label org.opencontainers.image.licenses=Apache-2.0 \
    --config.label "org.opencontainers.image.base.name=debian:$SUITE-slim" \
    --config.label "io.mcpnode.source-hash=$hash"
umoci gc --layout "$layout"
tar -C "$layout" -cf "$archive" .

# -- 5. record --------------------------------------------------------------------------------
end=$(date +%s.%N)
rootfs_bytes=$(du -sb "$rootfs" | cut -f1)
archive_bytes=$(stat -c %s "$archive")
"$PYTHON" - "$OUT/image.json" <<PYEOF
import json, sys
doc = {
    "tag": "$tag",
    "archive": "$archive",
    "layout": "$layout",
    "rootfs": "$rootfs",
    "source_hash": "$hash",
    "python": "$pyver",
    "archive_bytes": $archive_bytes,
    "rootfs_bytes": $rootfs_bytes,
    "build_seconds": round($end - $start, 1),
}
with open(sys.argv[1], "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
PYEOF
say "$archive: $((archive_bytes / 1024 / 1024)) MiB (gzip layer), rootfs $((rootfs_bytes / 1024 / 1024)) MiB, built in $("$PYTHON" -c "print(round($end - $start))") s"
skopeo inspect --config "oci-archive:$archive:$tag" >/dev/null
say "skopeo reads it: skopeo inspect oci-archive:$archive:$tag"
