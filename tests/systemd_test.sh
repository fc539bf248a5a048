#!/bin/sh
# The shipped systemd units (contrib/systemd/, issue 33): `systemd-analyze verify` says
# nothing about either, and the service started with each unit's own ExecStart flags prints
# a memory bound under the unit's MemoryMax (and starts with --max-memory-mb set to it, as it
# would under the unit's cgroup); the template spools video jobs under its StateDirectory and
# trusts the local nginx. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/animegan
export ANIMEGAN_MODEL_PATH=$PWD/models
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

# The value of KEY= in unit file $1 (the last one).
unit_value() { sed -n "s/^$2=//p" "$1" | tail -n 1; }

# verify: the unit with ExecStart pointing at this build; any output is a finding.
verify() { # unit-file instance-name
    sed "s#/usr/local/bin/animegan#$BIN#" "contrib/systemd/$1" >"$tmp/$1"
    (cd "$tmp" && systemd-analyze verify "./$2") >"$tmp/verify.out" 2>&1
}

# Start ExecStart's flags (port 0, the spool in $tmp) under --max-memory-mb MemoryMax; wait
# for "listening on"; print the bound in MiB.
bound_of() { # unit-file
    args=$(unit_value "contrib/systemd/$1" ExecStart | sed 's#^[^ ]*animegan ##;
        s#--port [^ ]*#--port 0#; s#--jobs-dir [^ ]*#--jobs-dir '"$tmp"'/spool#')
    mem=$(unit_value "contrib/systemd/$1" MemoryMax)
    mkdir -p "$tmp/spool"
    # shellcheck disable=SC2086
    "$BIN" $args --max-memory-mb "${mem%M}" >"$tmp/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
        grep -q "listening on" "$tmp/serve.log" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=
    grep -q "listening on" "$tmp/serve.log" || return 1
    sed -n 's/.*memory bound \([0-9.]*\) MiB.*/\1/p' "$tmp/serve.log" | head -n 1
}

for unit in animegan.service animegan@.service; do
    instance=$unit
    [ "$unit" = animegan@.service ] && instance=animegan@8081.service
    if verify "$unit" "$instance" && [ ! -s "$tmp/verify.out" ]; then
        ok "verify_$unit"
    else
        bad "verify_$unit"
        cat "$tmp/verify.out"
    fi

    mem=$(unit_value "contrib/systemd/$unit" MemoryMax)
    bound=$(bound_of "$unit")
    if [ -n "$bound" ] && awk -v b="$bound" -v m="${mem%M}" 'BEGIN { exit !(b + 0 <= m + 0) }'; then
        ok "bound_under_memorymax_$unit ($bound MiB <= $mem)"
    else
        bad "bound_under_memorymax_$unit (bound '${bound:-none}' MiB, MemoryMax $mem)"
        tail -n 3 "$tmp/serve.log"
    fi

    exec_start=$(unit_value "contrib/systemd/$unit" ExecStart)
    state=$(unit_value "contrib/systemd/$unit" StateDirectory)
    case "$exec_start" in
    *"--trusted-proxy 127.0.0.1"*"--jobs-dir /var/lib/$state"*) ok "proxy_and_spool_$unit" ;;
    *) bad "proxy_and_spool_$unit: StateDirectory=$state, ExecStart=$exec_start" ;;
    esac
done

# A unit whose MemoryMax is below the bound is refused at start-up (what the test relies on).
args=$(unit_value contrib/systemd/animegan.service ExecStart | sed 's#^[^ ]*animegan ##;
    s#--port [^ ]*#--port 0#; s#--jobs-dir [^ ]*#--jobs-dir '"$tmp"'/spool#')
# shellcheck disable=SC2086
if ! timeout 60 "$BIN" $args --max-memory-mb 512 >"$tmp/small.log" 2>&1 &&
    grep -q "memory bound is above" "$tmp/small.log"; then
    ok refused_under_small_memorymax
else
    bad refused_under_small_memorymax
    tail -n 2 "$tmp/small.log"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
