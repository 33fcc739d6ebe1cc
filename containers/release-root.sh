#!/usr/bin/env bash
# Other Debian releases' Slurm, on the same machine: a debootstrap root of each release
# this host does not run (Debian 12 host -> trixie with Slurm 24.11 and sid with 26.05;
# Debian 13 host -> bookworm with 22.05 and sid), in which the same test cluster
# (containers/slurm-cluster.sh) runs and the real-Slurm tests run against it.
#
#   containers/release-root.sh suites           the suites this host tests in roots
#   containers/release-root.sh build            build the root and its venv (cached)
#   containers/release-root.sh test [ARGS...]   run `pytest ARGS` (default: -m slurm) inside it
#   containers/release-root.sh shell [CMD...]   a shell (or CMD) inside it, cluster not started
#
# Each command works on TIRESIAS_OTHER_SUITE (default: the first of `suites`). Roots of
# different suites are independent (own files, own namespaces), so `test` of two suites
# can run at the same time (the Makefile's `test` does).
#
# The root lives in /var/cache/tiresias/rootfs-SUITE and is built only when missing
# (debootstrap is installed with apt when absent); its venv /opt/tiresias-venv holds the
# project's dependencies from PyPI. Each `test` runs in new mount, PID and network
# namespaces (unshare): the root's munge, mariadb, slurmdbd, slurmctld and slurmd use the
# usual ports on their own loopback, so they never meet the host's test cluster, and
# they all die with the namespace when the command ends. The checkout is bind-mounted
# at the same path inside, so the tests run this checkout's code and hooks.
#
# Environment: TIRESIAS_OTHER_SUITE (bookworm, trixie or sid; default: the first of `suites`),
#   TIRESIAS_ROOTFS_DIR (default /var/cache/tiresias), DEBIAN_MIRROR. Needs root.
set -euo pipefail

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${TIRESIAS_ROOTFS_DIR:-/var/cache/tiresias}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
VENV=/opt/tiresias-venv
# The same packages as files: the namespaces of `test` have no network, so a test that
# runs the documented `pip install .` installs from here (PIP_NO_INDEX, PIP_FIND_LINKS),
# as a site with an offline mirror would.
WHEELS=/opt/tiresias-wheels

log() { echo "[release-root${SUITE:+ $SUITE}] $*"; }
die() { echo "[release-root${SUITE:+ $SUITE}] ERROR: $*" >&2; exit 1; }

# The suites this host does not run, of the three releases the project is tested on:
# bookworm (Slurm 22.05), trixie (24.11) and sid (unstable, 26.05 today).
other_suites() {
    local here
    here=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    case "$here" in
        bookworm) echo trixie sid ;;
        trixie) echo bookworm sid ;;
        *) die "host release '$here' is neither bookworm nor trixie; set TIRESIAS_OTHER_SUITE" ;;
    esac
}

if [ "${1:-}" = suites ]; then other_suites; exit 0; fi
SUITE=${TIRESIAS_OTHER_SUITE:-$(other_suites | cut -d' ' -f1)}
case "$SUITE" in bookworm|trixie|sid) ;; *) die "TIRESIAS_OTHER_SUITE '$SUITE': use bookworm, trixie or sid" ;; esac
ROOT=$CACHE/rootfs-$SUITE
DONE=$ROOT/.tiresias-root-complete

# in_chroot CMD...: run CMD in the root (for building; host network, no namespaces).
in_chroot() {
    mount -t proc proc "$ROOT/proc"
    local rc=0
    chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
        DEBIAN_FRONTEND=noninteractive "$@" || rc=$?
    umount "$ROOT/proc"
    return $rc
}

build_root() {
    [ "$(id -u)" = 0 ] || die "need root to build $ROOT"
    if [ ! -f "$DONE" ]; then
        # Two roots are built at the same time (make test): one apt at a time, or the second
        # loses apt's lock ("Could not get lock /var/lib/apt/lists/lock") on a fresh machine.
        command -v debootstrap >/dev/null || {
            log "installing debootstrap"
            flock /run/lock/tiresias-apt.lock bash -c 'command -v debootstrap >/dev/null \
                || { apt-get update -q >/dev/null && apt-get install -y -q debootstrap >/dev/null; }' \
                || die "apt-get install debootstrap failed"
        }
        local t0=$SECONDS
        rm -rf "$ROOT.tmp" && mkdir -p "$CACHE"
        log "debootstrap $SUITE into $ROOT (log $CACHE/debootstrap-$SUITE.log)"
        debootstrap --variant=minbase --include=slurmctld,slurmd,slurm-client,munge,python3,python3-venv \
            "$SUITE" "$ROOT.tmp" "$MIRROR" >"$CACHE/debootstrap-$SUITE.log" 2>&1 \
            || { tail -20 "$CACHE/debootstrap-$SUITE.log" >&2; die "debootstrap $SUITE failed"; }
        rm -rf "$ROOT" && mv "$ROOT.tmp" "$ROOT"
        cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
        # sid's Release file is valid for a week only; a mirror that serves a snapshot of it
        # (as a site's offline mirror may) is "expired" to apt-get update. The root is a test
        # bed built from that same mirror, so it takes the mirror as it is.
        echo 'Acquire::Check-Valid-Until "false";' >"$ROOT/etc/apt/apt.conf.d/99tiresias-mirror-snapshot"
        # The rest of the test cluster's packages (slurmdbd, mariadb, ...), by the same script.
        mkdir -p "$ROOT/tmp/tiresias"
        cp "$REPO_DIR/containers/install-system-deps.sh" "$ROOT/tmp/tiresias/"
        in_chroot bash /tmp/tiresias/install-system-deps.sh || die "installing the test cluster's packages in $ROOT failed"
        touch "$DONE"
        log "root built in $((SECONDS - t0)) s ($(du -sh "$ROOT" | cut -f1))"
    fi
    # slurmctld resolves this host's name (the UTS namespace is the host's).
    grep -qw "$(hostname)" "$ROOT/etc/hosts" || echo "127.0.0.1 $(hostname)" >>"$ROOT/etc/hosts"
    build_venv
}

# The project's runtime and test dependencies, read from pyproject.toml by the root's Python.
build_venv() {
    local want have
    want=$(sha256sum "$REPO_DIR/pyproject.toml" | cut -c1-16)-wheels
    have=$(cat "$ROOT$VENV/.pyproject" 2>/dev/null || true)
    [ "$want" = "$have" ] && return 0
    local t0=$SECONDS
    mkdir -p "$ROOT/tmp/tiresias"
    cp "$REPO_DIR/pyproject.toml" "$ROOT/tmp/tiresias/pyproject.toml"
    # pip in the root trusts what the host trusts (a site's TLS-inspecting proxy included).
    cp /etc/ssl/certs/ca-certificates.crt "$ROOT/tmp/tiresias/host-ca.crt"
    log "venv $VENV in the root (log $CACHE/venv-$SUITE.log)"
    in_chroot bash -c "python3 -m venv $VENV && $VENV/bin/python -c '
import tomllib
p = tomllib.load(open(\"/tmp/tiresias/pyproject.toml\", \"rb\"))[\"project\"]
print(\"\\n\".join(p[\"dependencies\"] + p[\"optional-dependencies\"][\"test\"]))' >/tmp/tiresias/req.txt \
        && PIP_CERT=/tmp/tiresias/host-ca.crt $VENV/bin/pip install -q -r /tmp/tiresias/req.txt \
        && rm -rf $WHEELS && PIP_CERT=/tmp/tiresias/host-ca.crt $VENV/bin/pip download -q -d $WHEELS \
            -r /tmp/tiresias/req.txt 'setuptools>=77' wheel" >"$CACHE/venv-$SUITE.log" 2>&1 \
        || { tail -20 "$CACHE/venv-$SUITE.log" >&2; die "venv in $ROOT failed"; }
    echo "$want" >"$ROOT$VENV/.pyproject"
    log "venv ready in $((SECONDS - t0)) s"
}

# The ML clients' interpreter (tests/test_slurm_lightning.py): PyPI offers torch here
# only for the host venv's Python (a CPU wheel in the local wheel folder), not for the
# root's 3.13/3.14, so a root runs the Lightning job on the host's own Debian python3.X
# (its binary and standard library, mounted read-only under /opt/host-python) with the
# checkout venv's site-packages. Printed empty when the host has no such interpreter.
client_python_version() {
    local v
    v=$("$REPO_DIR/.venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || return 0
    [ -x "/usr/bin/python$v" ] && [ -d "/usr/lib/python$v" ] && [ -d "$REPO_DIR/.venv/lib/python$v/site-packages" ] \
        && echo "$v"
    return 0
}

# enter SCRIPT: run the bash SCRIPT inside the root in fresh mount/PID/network namespaces.
enter() {
    [ -f "$DONE" ] || die "$ROOT is not built; run '$0 build'"
    mkdir -p "$ROOT$REPO_DIR"
    local pyv client_env=""
    pyv=$(client_python_version)
    if [ -n "$pyv" ]; then
        mkdir -p "$ROOT/opt/host-python/bin" "$ROOT/opt/host-python/lib/python$pyv"
        touch "$ROOT/opt/host-python/bin/python$pyv"
        client_env="TIRESIAS_CLIENT_PYTHON=/opt/host-python/bin/python$pyv TIRESIAS_CLIENT_SITE=$REPO_DIR/.venv/lib/python$pyv/site-packages"
    fi
    # The outer bash runs on the host's binaries (ip) before it chroots.
    unshare --mount --pid --fork --net --propagation private bash -euc '
        root=$1 repo=$2 script=$3 pyv=$4 client_env=$5
        ip link set lo up
        # Slurm 24.11 daemons bind their ports through getaddrinfo(NULL, port) and fail
        # with "getaddrinfo((null):6819)" when the namespace holds loopback addresses
        # only; one more address on lo (reachable from nowhere else) satisfies it.
        ip addr add 10.254.0.1/32 dev lo
        mount -t proc proc "$root/proc"
        mount --rbind /dev "$root/dev"
        mount --rbind /sys "$root/sys"
        mount -t tmpfs tmpfs "$root/run"
        mount -t tmpfs tmpfs "$root/tmp"
        # a checkout under /tmp: its mount point is on the tmpfs just mounted
        mkdir -p "$root$repo"
        mount --bind "$repo" "$root$repo"
        if [ -n "$pyv" ]; then
            mount --bind -o ro "/usr/bin/python$pyv" "$root/opt/host-python/bin/python$pyv"
            mount --bind -o ro "/usr/lib/python$pyv" "$root/opt/host-python/lib/python$pyv"
        fi
        # Every entry starts from an empty cluster: no saved jobs, no accounting rows
        # (job ids from 1, as tests/fixtures/slurm/record.sh needs; nothing a run left).
        for state in var/spool/slurmctld var/spool/slurmd var/lib/mysql; do
            mkdir -p "$root/$state" && mount -t tmpfs -o mode=755 tmpfs "$root/$state"
        done
        # This bash stays PID 1 of the namespace, so that it reaps what the daemons leave
        # (a process that exec-ed into PID 1, pytest, would not: a stopped slurmctld
        # would stay a zombie and its /proc entry would never go).
        rc=0
        chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
            LANG=C.UTF-8 CI="${CI:-}" TZ=UTC PIP_NO_INDEX=1 PIP_FIND_LINKS='"$WHEELS"' $client_env \
            bash -euc "chown mysql:mysql /var/lib/mysql; $script" || rc=$?
        exit $rc
    ' enter "$ROOT" "$REPO_DIR" "$1" "$pyv" "$client_env"
}

cmd_test() {
    build_root
    local args=("$@")
    [ ${#args[@]} -gt 0 ] || args=(-m slurm)
    log "$(chroot "$ROOT" slurmctld -V) in $SUITE: pytest ${args[*]}"
    enter "cd $(printf %q "$REPO_DIR") && bash containers/slurm-cluster.sh up \
        && PYTHONPATH=\$PWD $VENV/bin/python -m pytest -q -p no:cacheprovider $(printf '%q ' "${args[@]}")"
}

case "${1:-}" in
    build) build_root ;;
    test) shift; cmd_test "$@" ;;
    shell) shift; build_root; enter "cd $(printf %q "$REPO_DIR") && ${*:-bash}" ;;
    *) echo "usage: $0 build | test [PYTEST_ARGS...] | shell [CMD...]" >&2; exit 2 ;;
esac
