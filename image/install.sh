#!/bin/sh
# Installs mcpnode into /opt/mcpnode inside the image's root file system. The one install step
# shared by both builds, so they cannot drift apart:
#   - Containerfile: `RUN --mount=type=bind,source=build/image/wheels,target=/tmp/wheels`
#   - image/build.sh (`make image`): copied with the wheels into the rootfs, run under chroot.
# Input: /tmp/wheels holds the mcpnode wheel, every dependency as a wheel for this Python and
# this architecture, and pip's own wheel (prepared by `image/build.sh wheels`). Nothing is
# fetched: pip runs with --no-index.
#
# The venv has no pip, no setuptools and no ensurepip: pip runs from its wheel (a wheel is a
# zip that Python can run, `python pip.whl/pip`, as pip's documentation notes for bootstrap),
# so the image carries nothing that installs more code. That is also why Debian's python3-venv
# package is not needed: `venv --without-pip` only needs the standard library.
set -eu

WHEELS=/tmp/wheels
PREFIX=/opt/mcpnode
# The image's non-root user: 65532 is the uid distroless and Chainguard images call "nonroot".
UID_NONROOT=65532

pip_whl=$(ls "$WHEELS"/pip-*.whl)
python3 -m venv --without-pip "$PREFIX"
# --no-compile is not given: byte-compiling now means a container with a read-only root file
# system (the DaemonSet's readOnlyRootFilesystem) still starts from .pyc files.
PIP_DISABLE_PIP_VERSION_CHECK=1 "$PREFIX/bin/python" "$pip_whl/pip" install \
    --no-index --find-links "$WHEELS" --no-cache-dir --quiet mcpnode
"$PREFIX/bin/mcpnode" --version

if ! getent passwd "$UID_NONROOT" >/dev/null; then
    # A system account above SYS_UID_MAX (999): -K raises the limit for this call only.
    groupadd --system -K SYS_GID_MAX="$UID_NONROOT" --gid "$UID_NONROOT" mcpnode
    useradd --system -K SYS_UID_MAX="$UID_NONROOT" --uid "$UID_NONROOT" --gid "$UID_NONROOT" \
        --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin mcpnode
fi
# The directories the agent writes on a host are host mounts in Kubernetes
# (deploy/kubernetes/daemonset.yaml); inside the image they only need to exist as mount points.
mkdir -p /etc/mcpnode /run/mcpnode /var/lib/mcpnode
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
    /var/cache/debconf/*-old /var/lib/dpkg/*-old
