#!/usr/bin/env bash
# Installs the Debian packages the test suite needs, only those missing, in one
# apt-get call: Slurm (controller, node daemon, client, accounting daemon), munge,
# MariaDB for slurmdbd, PostgreSQL for the store tests, Lua for job_submit.lua.
# Works on Debian 12 (Slurm 22.05) and Debian 13 (Slurm 24.11). Needs root.
set -euo pipefail
packages=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server postgresql lua5.3 make)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "system packages: all present"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install-system-deps: need root to install: ${missing[*]}" >&2
    exit 1
fi
echo "system packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Keep the packages' own service starts out of the way: the tests start each
# daemon themselves, with their own configs (the usual policy-rc.d convention).
made_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/tiresias-apt.log 2>&1 || {
    tail -20 /tmp/tiresias-apt.log >&2
    echo "install-system-deps: apt-get install failed (log: /tmp/tiresias-apt.log)" >&2
    exit 1
}
