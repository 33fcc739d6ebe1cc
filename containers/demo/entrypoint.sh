#!/bin/bash
# Entrypoint of the demo containers: ROLE is slurmctld, slurmd or controller.
# The munge key lives on the shared volume /etc/munge: slurmctld creates it once,
# the others wait for it.
set -euo pipefail
ROLE=${1:?usage: entrypoint.sh slurmctld|slurmd|controller}
KEY=/etc/munge/munge.key

if [ "$ROLE" = slurmctld ] && [ ! -s "$KEY" ]; then
    dd if=/dev/urandom of="$KEY.tmp" bs=1024 count=1 status=none
    mv "$KEY.tmp" "$KEY"
fi
for _ in $(seq 1 120); do [ -s "$KEY" ] && break; sleep 0.5; done
[ -s "$KEY" ] || { echo "entrypoint: no munge key at $KEY after 60 s" >&2; exit 1; }
chown munge:munge "$KEY"; chmod 0400 "$KEY"
mkdir -p /run/munge && chown munge:munge /run/munge
runuser -u munge -- /usr/sbin/munged

case "$ROLE" in
slurmctld)
    mkdir -p /var/spool/slurmctld /var/log/slurm
    chown slurm:slurm /var/spool/slurmctld /var/log/slurm
    exec /usr/sbin/slurmctld -D -i
    ;;
slurmd)
    mkdir -p /var/tmp/fakegpu /var/spool/slurmd /var/log/slurm
    for i in 0 1 2 3; do [ -e /var/tmp/fakegpu/nvidia$i ] || touch /var/tmp/fakegpu/nvidia$i; done
    exec /usr/sbin/slurmd -D -N "$(hostname)"
    ;;
controller)
    # SlurmUser is a Slurm administrator: SiteFactor updates and requeues are allowed.
    mkdir -p /var/lib/tiresias && chown slurm:slurm /var/lib/tiresias
    for _ in $(seq 1 60); do scontrol ping >/dev/null 2>&1 && break; sleep 1; done
    exec runuser -u slurm -- /opt/tiresias/bin/tiresias run --config /etc/tiresias/tiresias.yaml
    ;;
*)
    echo "entrypoint: unknown role $ROLE" >&2; exit 2
    ;;
esac
