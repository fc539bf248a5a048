#!/bin/sh
# The container recipe (contrib/container/Containerfile) built and run with podman, from
# Debian's packages only (no image registry is reachable here): the Debian 12 base made by
# mmdebstrap (minbase, what debian:12-slim is) and imported under the name the Containerfile
# starts from, the image built (the build stage compiles the tree), then run: healthy by its
# own HEALTHCHECK (/readyz), a non-root user, no compiler, a photo converted through it equal
# to the host's `animegan convert`. Not in the default suite (minutes: a Debian base, the
# packages and a whole build): `make test-container`. Needs scripts/install-deps.sh
# --container (podman, runc, mmdebstrap) and root (rootful podman).
#
# BASE_TAR=file reuses a base tarball (kept in build/container/ between runs); KEEP=1 keeps
# the images. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1${2:+: $2}"; failed=$((failed + 1)); }
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}

for tool in podman mmdebstrap curl /usr/bin/python3; do
    command -v $tool >/dev/null 2>&1 || {
        bad tools "$tool is missing (scripts/install-deps.sh --container)"
        finish
    }
done
[ "$(id -u)" -eq 0 ] || {
    bad root "rootful podman and mmdebstrap --mode=root need root"
    finish
}

work=$PWD/$BUILD/container
mkdir -p "$work"
BASE=docker.io/library/debian:12-slim
IMAGE=localhost/animegan:test
NAME=animegan-test-$$
PORT=$((20000 + $$ % 20000))

# ---- the base: Debian 12 minbase from deb.debian.org --------------------------------------
tar=${BASE_TAR:-$work/debian12-slim.tar}
if [ ! -s "$tar" ]; then
    t0=$(date +%s)
    if mmdebstrap --quiet --variant=minbase --mode=root --format=tar bookworm "$tar.part" \
        http://deb.debian.org/debian >"$work/mmdebstrap.log" 2>&1 && mv "$tar.part" "$tar"; then
        ok "base_from_debian_packages ($(($(date +%s) - t0)) s, $(du -m "$tar" | cut -f1) MiB)"
    else
        bad base_from_debian_packages "$(tail -n 3 "$work/mmdebstrap.log")"
        finish
    fi
fi
podman import --quiet "$tar" "$BASE" >/dev/null || {
    bad base_import "podman import $tar"
    finish
}

# ---- how podman runs containers here --------------------------------------------------------
# crun refuses a host with cgroup v1 and v2 mounted at once (hybrid), and rootful podman
# raising RLIMIT_NPROC fails without CAP_SYS_RESOURCE (as in this sandbox): then runc and
# limits below the host's.
RUNTIME=""
LIMITS=""
if ! podman run --rm --network host "$BASE" true 2>"$work/probe.txt"; then
    RUNTIME="--runtime runc"
    LIMITS="--ulimit nofile=4096:4096 --ulimit nproc=4096:4096"
    # shellcheck disable=SC2086
    if ! podman $RUNTIME run --rm --network host $LIMITS "$BASE" true 2>>"$work/probe.txt"; then
        bad podman_runs_containers "$(tail -n 2 "$work/probe.txt")"
        finish
    fi
    echo "note: podman runs with runc and lowered limits here ($(head -n 1 "$work/probe.txt"))"
fi

# ---- the image ---------------------------------------------------------------------------
t0=$(date +%s)
# shellcheck disable=SC2086
if podman $RUNTIME build --format docker --pull=never --network host $LIMITS --target animegan \
    -f contrib/container/Containerfile -t "$IMAGE" . >"$work/build.log" 2>&1; then
    size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
    ok "image_built ($(($(date +%s) - t0)) s, $((size / 1048576)) MiB)"
else
    bad image_built "$(tail -n 5 "$work/build.log")"
    finish
fi

# ---- run it ------------------------------------------------------------------------------
trap 'podman rm -f "$NAME" >/dev/null 2>&1' EXIT
# shellcheck disable=SC2086
podman $RUNTIME run -d --name "$NAME" --network host $LIMITS -e ANIMEGAN_PORT=$PORT \
    --memory 3g "$IMAGE" --workers 1 --threads 2 >/dev/null || {
    bad container_runs "podman run failed"
    finish
}
healthy=""
for _ in $(seq 1 90); do
    podman healthcheck run "$NAME" >/dev/null 2>&1 && healthy=1 && break
    sleep 2
done
if [ -n "$healthy" ] && [ "$(podman inspect --format '{{.State.Health.Status}}' "$NAME")" = healthy ]; then
    ok healthcheck_on_readyz
else
    bad healthcheck_on_readyz "$(podman logs "$NAME" 2>&1 | tail -n 3)"
fi
uid=$(podman exec "$NAME" id -u)
if [ -n "$uid" ] && [ "$uid" != 0 ]; then
    ok "runs_as_non_root (uid $uid)"
else
    bad runs_as_non_root "uid '$uid'"
fi
if podman exec "$NAME" sh -c 'command -v cc || command -v gcc || command -v make' >/dev/null; then
    bad runtime_only "a compiler or make in the image"
else
    ok runtime_only_no_compiler
fi
# The cgroup's limit is what the bound was held against (--memory 3g).
if podman logs "$NAME" 2>&1 | grep -q "settings for 3072 MiB (the cgroup's"; then
    ok memory_bound_from_the_container_limit
else
    bad memory_bound_from_the_container_limit "$(podman logs "$NAME" 2>&1 | grep 'settings for')"
fi

# ---- a photo through it, as the host's CLI converts it ------------------------------------
code=$(curl -s -o "$work/served.png" -w '%{http_code}' --data-binary @tests/data/chelsea.png \
    -H 'Content-Type: image/png' "http://127.0.0.1:$PORT/api/v1/convert?model=hayao")
ANIMEGAN_MODEL_PATH=$PWD/models "$BUILD/animegan" convert tests/data/chelsea.png \
    -o "$work/cli.png" -m hayao --threads 2 -q
same=$(/usr/bin/python3 - "$work/served.png" "$work/cli.png" <<'EOF'
import sys
from PIL import Image
a, b = (Image.open(p).convert("RGB") for p in sys.argv[1:3])
diff = max(abs(x - y) for pa, pb in zip(a.getdata(), b.getdata()) for x, y in zip(pa, pb)) \
    if a.size == b.size else -1
print("%dx%d %d" % (a.size[0], a.size[1], diff))
EOF
)
if [ "$code" = 200 ] && [ "$same" = "451x300 0" ]; then
    ok "photo_converted_through_the_container (451x300, equal to the host's CLI)"
else
    bad photo_converted_through_the_container "HTTP $code, size and largest difference: $same"
fi

[ -n "${KEEP:-}" ] || podman rmi -f "$IMAGE" >/dev/null 2>&1
finish
