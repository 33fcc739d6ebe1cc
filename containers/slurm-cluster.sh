#!/bin/bash
# Local Slurm test cluster on one host: munge, mariadb, slurmdbd, slurmctld and
# four slurmd (gpu1..gpu4, 4 fake GPUs each) started with `slurmd -N`.
#
#   containers/slurm-cluster.sh up      install/configure/start (idempotent: verifies if already up)
#   containers/slurm-cluster.sh down    stop every daemon by the PID in its pid file
#   containers/slurm-cluster.sh status  show daemons and sinfo; exit 0 when the cluster is up
#
# Environment:
#   TIRESIAS_PROLOG / TIRESIAS_EPILOG / TIRESIAS_TASK_PROLOG  source files installed as the node hooks
#       (default: the repo's prolog/tiresias_prolog.py, epilog/tiresias_epilog.py, prolog/task_prolog.py).
#       slurm.conf ALWAYS names the fixed copies $HOOK_DIR/{prolog,epilog,task_prolog}, so every
#       engineer's `up` writes the same slurm.conf; `up` refreshes the copies even when the cluster runs.
#   TIRESIAS_MPS_STANDIN_DIR  a directory put first on PATH of the slurmd daemons this script starts
#       (e.g. tests/fakes, for the recording nvidia-cuda-mps-control). Only affects slurmd started by
#       this `up`; the tests use /etc/tiresias/node.conf `mps_control=` instead, which needs no restart.
#   TIRESIAS_SLURM_FRESH=1   start slurmctld with -c (discard saved job state)
#   TIRESIAS_SLURM_WAIT_S    readiness bound per step in seconds (default 60)
#
# Written for Debian 12 (Slurm 22.05) and Debian 13 (Slurm 24.11); see
# /work/shared/spec/slurm.md for the recipe this follows. Needs root.
set -u -o pipefail

# Close every file this script inherited beyond stdin/stdout/stderr (255 is bash's own
# copy of the script), so that no daemon started here inherits them. Run as
# `flock /tmp/tiresias-slurm.lock containers/slurm-cluster.sh up`, the daemons would
# otherwise share flock's open lock file and hold the lock for as long as they run
# (an flock lock belongs to the open file, not to the process that took it).
for fd in /proc/$$/fd/*; do
    fd=${fd##*/}
    if [ "$fd" -gt 2 ] && [ "$fd" -lt 255 ]; then { eval "exec $fd>&-"; } 2>/dev/null; fi
done

ETC=/etc/slurm
LOGDIR=/var/log/slurm
CTLD_SPOOL=/var/spool/slurmctld
SLURMD_SPOOL=/var/spool/slurmd
FAKEGPU_DIR=/var/tmp/fakegpu
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HOOK_DIR=$ETC/tiresias
NODES=(gpu1 gpu2 gpu3 gpu4)
CTLD_PID=/run/slurmctld.pid
DBD_PID=/run/slurmdbd.pid
MARIADB_PID=/run/mysqld/mariadb.pid
MUNGE_PID=/run/munge/munged.pid
WAIT_S=${TIRESIAS_SLURM_WAIT_S:-60}
DB_NAME=slurm_acct_db
DB_USER=slurm
DB_PASS=slurmpw
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server slurm-wlm-basic-plugins)

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
log() { echo "[slurm-cluster] $*"; }

# die MESSAGE [LOGFILE]: print the message (and the log's tail) and exit 1.
die() {
    echo "[slurm-cluster] ERROR: $1" >&2
    if [ -n "${2:-}" ] && [ -f "$2" ]; then
        echo "----- last 30 lines of $2 -----" >&2
        tail -n 30 "$2" >&2
        echo "-----" >&2
    fi
    exit 1
}

# pid_alive PIDFILE: true when the file names a running process.
pid_alive() {
    local pid
    [ -f "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# wait_until SECONDS CMD...: run CMD every 0.2 s until it succeeds or time is up.
wait_until() {
    local limit=$1; shift
    local deadline=$(( $(date +%s) + limit ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    return 1
}

# "22.05.8" -> 2205 ; used to guard options that differ between releases.
slurm_version_num() {
    slurmctld -V 2>/dev/null | awk '{ split($2, v, "."); printf "%d%02d\n", v[1], v[2] }'
}

install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    local t0; t0=$(now)
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
            >/tmp/slurm-cluster-apt.log 2>&1; then
        # The package lists may be missing on a fresh image.
        apt-get update -q >>/tmp/slurm-cluster-apt.log 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
            >>/tmp/slurm-cluster-apt.log 2>&1 || die "apt-get install failed" /tmp/slurm-cluster-apt.log
    fi
    log "packages installed in $(elapsed "$t0") s"
}

prepare_host() {
    if [ ! -s /etc/munge/munge.key ]; then
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile=/etc/munge/munge.key
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        fi
        chown munge:munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi
    # Fake GPUs: slurmd only needs the File= paths to exist. Character devices
    # are closest to real ones; fall back to plain files where mknod is refused.
    mkdir -p "$FAKEGPU_DIR"
    local i
    for i in 0 1 2 3; do
        [ -e "$FAKEGPU_DIR/nvidia$i" ] && continue
        mknod "$FAKEGPU_DIR/nvidia$i" c 195 "$i" 2>/dev/null || touch "$FAKEGPU_DIR/nvidia$i"
    done
    local u
    for u in alice bob; do
        id "$u" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$u" \
            || die "useradd $u failed"
    done
    # The client's socket directory: /run/mysqld up to MariaDB 10.11 (Debian 12, 13),
    # /run/mariadbd from 11.8 (Debian sid); my_print_defaults names it.
    MARIADB_SOCKET_DIR=$(dirname "$(my_print_defaults --mysqld 2>/dev/null | sed -n 's/^--socket=//p' | tail -1)")
    [ "$MARIADB_SOCKET_DIR" = . ] && MARIADB_SOCKET_DIR=/run/mysqld
    mkdir -p "$LOGDIR" "$CTLD_SPOOL" /run/munge /run/mysqld "$MARIADB_SOCKET_DIR"
    for n in "${NODES[@]}"; do mkdir -p "$SLURMD_SPOOL/$n"; done
    chown slurm:slurm "$LOGDIR" "$CTLD_SPOOL"
    chown munge:munge /run/munge
    chown mysql:mysql /run/mysqld "$MARIADB_SOCKET_DIR"
}

# write_if_changed PATH MODE OWNER: stdin -> PATH; returns 0 when the content changed.
write_if_changed() {
    local tmp; tmp=$(mktemp)
    cat >"$tmp"
    if [ -f "$1" ] && cmp -s "$tmp" "$1"; then
        rm -f "$tmp"; return 1
    fi
    install -m "$2" -o "${3%%:*}" -g "${3##*:}" "$tmp" "$1"
    rm -f "$tmp"
    return 0
}

# install_hook SRC NAME: copy SRC to $HOOK_DIR/NAME atomically (temp + rename), so a
# slurmd starting the hook mid-copy sees the old or the new file, never half of one.
install_hook() {
    local src=$1 dest=$HOOK_DIR/$2 tmp
    [ -f "$src" ] || die "hook source $src not found"
    if [ -f "$dest" ] && cmp -s "$src" "$dest"; then return 0; fi
    tmp=$(mktemp "$HOOK_DIR/.$2.XXXXXX") || die "cannot write in $HOOK_DIR"
    if ! { cat "$src" >"$tmp" && chmod 755 "$tmp" && chown root:root "$tmp" && mv -f "$tmp" "$dest"; }; then
        rm -f "$tmp"
        die "installing $dest failed"
    fi
    log "installed $dest from $src"
}

# The node hooks (stdlib Python 3). The epilog and TaskProlog load the shared node
# code from the installed prolog file next to them.
install_hooks() {
    mkdir -p "$HOOK_DIR"
    chmod 755 "$HOOK_DIR"
    install_hook "${TIRESIAS_PROLOG:-$REPO_DIR/prolog/tiresias_prolog.py}" prolog
    install_hook "${TIRESIAS_EPILOG:-$REPO_DIR/epilog/tiresias_epilog.py}" epilog
    install_hook "${TIRESIAS_TASK_PROLOG:-$REPO_DIR/prolog/task_prolog.py}" task_prolog
}

# The scheduling, priority, requeue and time-out settings every instance shares (the default
# cluster and the isolated ones differ only in names, paths, ports and accounting).
scheduling_conf_lines() {
    cat <<'CONF'
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
# No mail on a test cluster (the default /bin/mail is absent).
MailProg=/bin/true
ReturnToService=2
# The nodes claim 8 CPUs on a host that may have 2.
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2,sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# SiteFactor is added unweighted; keep the other factors small so it dominates.
PriorityType=priority/multifactor
PriorityWeightAge=1
PriorityMaxAge=1-0
PriorityWeightJobSize=0
PriorityWeightFairshare=0
PriorityWeightPartition=1000
PriorityWeightQOS=0
PriorityCalcPeriod=1
JobRequeue=1
# The checkpoint helpers exit 85 once the checkpoint is written: Slurm requeues such a job.
RequeueExit=85
GresTypes=gpu,mps
JobAcctGatherType=jobacct_gather/linux
MinJobAge=300
KillWait=10
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
CONF
}

# slurm.conf lines every instance has, from its names and paths:
# cluster name, slurmctld port, state dir, slurmd spool dir, slurmctld pid file,
# slurmd pid file (with %n), log dir.
instance_conf_lines() {
    cat <<EOF
ClusterName=$1
SlurmctldHost=localhost
SlurmctldPort=$2
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation=$3
SlurmdSpoolDir=$4/%n
SlurmctldPidFile=$5
SlurmdPidFile=$6
SlurmctldLogFile=$7/slurmctld.log
SlurmdLogFile=$7/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
EOF
    scheduling_conf_lines
}

# NodeName lines: a command that prints a node's Gres, the first slurmd port, then the
# node names.
node_lines() {
    local gres_of=$1 port=$2 n
    shift 2
    for n in "$@"; do
        # an isolated instance's first node alone has feature ib (tests/test_slurm_resources.py: --constraint)
        local features=""
        case $n in *[a-z0-9]g1) features=" Features=ib" ;; esac
        echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$port CPUs=8 RealMemory=16000$features Gres=$("$gres_of" "$n") State=UNKNOWN"
        port=$((port + 1))
    done
}

# NodeName lines: the first slurmd port, then the node names (4 GPUs, 400 MPS shares each).
node_conf_lines() {
    node_lines plain_node_gres "$@"
}

plain_node_gres() {
    echo "gpu:4,mps:400"
}

# gres.conf lines of the nodes $1 (a hostlist): 4 fake GPUs and 400 MPS shares each.
plain_gres_conf_lines() {
    cat <<EOF
NodeName=$1 Name=gpu File=$FAKEGPU_DIR/nvidia[0-3]
NodeName=$1 Name=mps Count=400 File=$FAKEGPU_DIR/nvidia[0-3]
EOF
}

# gres.conf (fake GPU device files) and, from 23.11, cgroup.conf into folder $1 for the
# nodes $2 (a hostlist); gres.conf's lines come from the command $3 given $2
# (plain_gres_conf_lines unless named). Sets CONFIG_CHANGED=1 when a file changed.
write_node_side_confs() {
    { echo "AutoDetect=off"; "${3:-plain_gres_conf_lines}" "$2"; } \
        | write_if_changed "$1/gres.conf" 644 root:root && CONFIG_CHANGED=1
    # From 23.11 slurmd always loads a cgroup plugin; there is no usable cgroup
    # tree for four slurmd sharing one host, so switch it off.
    if [ "$(slurm_version_num)" -ge 2311 ]; then
        write_if_changed "$1/cgroup.conf" 644 root:root <<EOF && CONFIG_CHANGED=1
CgroupPlugin=disabled
EOF
    fi
    return 0
}

write_configs() {
    local ver; ver=$(slurm_version_num)
    [ -n "$ver" ] || die "cannot read the Slurm version from 'slurmctld -V'"
    mkdir -p "$ETC"
    CONFIG_CHANGED=0
    install_hooks
    local hooks
    hooks="Prolog=$HOOK_DIR/prolog"$'\n'"Epilog=$HOOK_DIR/epilog"$'\n'"TaskProlog=$HOOK_DIR/task_prolog"$'\n'
    # SwitchType=switch/none and CredType are left at their defaults: switch/none
    # was removed in 23.11 and the defaults are what we want on every release.
    {
        echo "# Generated by containers/slurm-cluster.sh (Slurm $(slurmctld -V | awk '{print $2}')); edits are overwritten."
        instance_conf_lines testcluster 6817 "$CTLD_SPOOL" "$SLURMD_SPOOL" "$CTLD_PID" "/run/slurmd-%n.pid" "$LOGDIR"
        cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu,gres/mps
# Keep --comment in sacct as well.
AccountingStoreFlags=job_comment
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGDIR/jobcomp.txt
JobAcctGatherFrequency=5
EOF
        printf '%s' "$hooks"
        node_conf_lines 17001 "${NODES[@]}"
        cat <<EOF
PartitionName=batch Nodes=gpu[1-4] Default=YES MaxTime=INFINITE State=UP PriorityJobFactor=1
PartitionName=urgent Nodes=gpu[1-4] MaxTime=INFINITE State=UP PriorityJobFactor=10
PartitionName=small Nodes=gpu[1-2] MaxTime=INFINITE State=UP
EOF
    } | write_if_changed "$ETC/slurm.conf" 644 root:root && CONFIG_CHANGED=1

    write_node_side_confs "$ETC" "gpu[1-4]"

    write_if_changed "$ETC/slurmdbd.conf" 600 slurm:slurm <<EOF || true
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
LogFile=$LOGDIR/slurmdbd.log
PidFile=$DBD_PID
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=$DB_NAME
EOF
}

start_munge() {
    pid_alive "$MUNGE_PID" && return 0
    local t0; t0=$(now)
    runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGE_PID" >/dev/null 2>&1 \
        || die "munged failed to start" /var/log/munge/munged.log
    wait_until "$WAIT_S" munge -n || die "munge does not answer" /var/log/munge/munged.log
    log "munge up in $(elapsed "$t0") s"
}

start_mariadb() {
    if ! pid_alive "$MARIADB_PID"; then
        local t0; t0=$(now)
        if [ ! -d /var/lib/mysql/mysql ]; then
            mariadb-install-db --user=mysql --datadir=/var/lib/mysql >"$LOGDIR/mariadb-install.log" 2>&1 \
                || die "mariadb-install-db failed" "$LOGDIR/mariadb-install.log"
        fi
        # --datadir: the one mariadb-install-db filled (11.8's built-in default is /var/lib/mariadb).
        setsid mariadbd --user=mysql --datadir=/var/lib/mysql --bind-address=127.0.0.1 --pid-file="$MARIADB_PID" \
            --log-error="$LOGDIR/mariadb.log" </dev/null >/dev/null 2>&1 &
        wait_until "$WAIT_S" mariadb-admin --connect-timeout=2 ping \
            || die "mariadb does not answer" "$LOGDIR/mariadb.log"
        log "mariadb up in $(elapsed "$t0") s"
    fi
    mariadb -e "CREATE DATABASE IF NOT EXISTS $DB_NAME;
                CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
                GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';" \
        || die "creating the accounting database failed" "$LOGDIR/mariadb.log"
}

start_slurmdbd() {
    pid_alive "$DBD_PID" && return 0
    local t0; t0=$(now)
    slurmdbd || die "slurmdbd failed to start" "$LOGDIR/slurmdbd.log"
    wait_until "$WAIT_S" timeout 3 sacctmgr -n list cluster \
        || die "slurmdbd does not answer within ${WAIT_S} s" "$LOGDIR/slurmdbd.log"
    log "slurmdbd up in $(elapsed "$t0") s"
}

start_slurmctld() {
    if pid_alive "$CTLD_PID"; then
        [ "${TIRESIAS_SLURM_FRESH:-0}" = 1 ] && log "slurmctld already running; TIRESIAS_SLURM_FRESH ignored (run 'down' first)"
        if [ "${CONFIG_CHANGED:-0}" = 1 ]; then
            log "slurm.conf changed: scontrol reconfigure"
            timeout 10 scontrol reconfigure || log "scontrol reconfigure failed (GRES changes need 'down' + 'up')"
        fi
        return 0
    fi
    local t0 flags=(); t0=$(now)
    [ "${TIRESIAS_SLURM_FRESH:-0}" = 1 ] && flags+=(-c)
    slurmctld "${flags[@]}" || die "slurmctld failed to start" "$LOGDIR/slurmctld.log"
    wait_until "$WAIT_S" timeout 3 scontrol ping \
        || die "slurmctld does not answer within ${WAIT_S} s" "$LOGDIR/slurmctld.log"
    log "slurmctld up in $(elapsed "$t0") s${flags[*]:+ (flags ${flags[*]})}"
}

register_accounts() {
    local t0; t0=$(now)
    if [ -z "$(timeout 10 sacctmgr -n -P list account research format=account 2>/dev/null)" ]; then
        timeout 10 sacctmgr -i add account research >/dev/null \
            || die "sacctmgr add account research failed" "$LOGDIR/slurmdbd.log"
    fi
    local u
    for u in alice bob; do
        if [ -z "$(timeout 10 sacctmgr -n -P list user "$u" format=user 2>/dev/null)" ]; then
            timeout 10 sacctmgr -i add user "$u" account=research >/dev/null \
                || die "sacctmgr add user $u failed" "$LOGDIR/slurmdbd.log"
        fi
    done
    log "accounts registered in $(elapsed "$t0") s"
}

idle_node_count() {
    timeout 3 sinfo -h -N -p batch -t idle,mixed,allocated -o %N 2>/dev/null | sort -u | wc -l
}

# Waits, bounded by WAIT_S, until COUNT_FUNCTION prints EXPECTED idle nodes; on
# time-out shows sinfo and dies with the tail of LOGFILE.
wait_nodes_idle() {
    local count_function=$1 expected=$2 label=$3 logfile=$4
    local deadline=$(( $(date +%s) + WAIT_S )) count=0
    while [ "$(date +%s)" -lt "$deadline" ]; do
        count=$("$count_function")
        [ "$count" = "$expected" ] && return 0
        sleep 0.2
    done
    timeout 3 sinfo -N >&2
    die "${label}only $count of $expected nodes are up after ${WAIT_S} s" "$logfile"
}

start_slurmds() {
    local t0 n; t0=$(now)
    local path=$PATH
    [ -n "${TIRESIAS_MPS_STANDIN_DIR:-}" ] && path="$TIRESIAS_MPS_STANDIN_DIR:$PATH"
    for n in "${NODES[@]}"; do
        pid_alive "/run/slurmd-$n.pid" && continue
        PATH=$path slurmd -N "$n" || die "slurmd -N $n failed to start" "$LOGDIR/slurmd-$n.log"
    done
    wait_nodes_idle idle_node_count "${#NODES[@]}" "" "$LOGDIR/slurmd-gpu1.log"
    log "${#NODES[@]} nodes up in $(elapsed "$t0") s"
}

cmd_up() {
    [ "$(id -u)" = 0 ] || die "must run as root"
    local t0; t0=$(now)
    install_packages
    prepare_host
    write_configs
    start_munge
    start_mariadb
    start_slurmdbd
    start_slurmctld
    register_accounts
    start_slurmds
    log "cluster up; total $(elapsed "$t0") s"
    timeout 5 sinfo
}

# stop_pidfile NAME PIDFILE: TERM, wait up to 10 s, then KILL (slurmd may ignore TERM).
stop_pidfile() {
    local pid
    [ -f "$2" ] || return 0
    pid=$(cat "$2" 2>/dev/null)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        local deadline=$(( $(date +%s) + 10 ))
        while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null
            log "$1 (pid $pid) ignored TERM; killed"
        else
            log "$1 (pid $pid) stopped"
        fi
    fi
    rm -f "$2"
}

cmd_down() {
    local n
    for n in "${NODES[@]}"; do stop_pidfile "slurmd $n" "/run/slurmd-$n.pid"; done
    stop_pidfile slurmctld "$CTLD_PID"
    stop_pidfile slurmdbd "$DBD_PID"
    stop_pidfile mariadb "$MARIADB_PID"
    stop_pidfile munged "$MUNGE_PID"
}

cmd_status() {
    local ok=0 name file n
    for pair in "munged:$MUNGE_PID" "mariadb:$MARIADB_PID" "slurmdbd:$DBD_PID" "slurmctld:$CTLD_PID" \
                $(for n in "${NODES[@]}"; do echo "slurmd-$n:/run/slurmd-$n.pid"; done); do
        name=${pair%%:*}; file=${pair#*:}
        if pid_alive "$file"; then
            echo "$name: running (pid $(cat "$file"))"
        else
            echo "$name: not running"; ok=1
        fi
    done
    if [ "$ok" = 0 ]; then
        timeout 5 sinfo || ok=1
        [ "$(idle_node_count)" = "${#NODES[@]}" ] || { echo "not all nodes are up"; ok=1; }
    fi
    return "$ok"
}

# ======================================================================================
# BEGIN isolated instances (TIRESIAS_CLUSTER_INSTANCE=NAME)
#
# A second, independent cluster on the same host for timing-sensitive tests and
# benchmarks, so they never share slurmctld, nodes or queue with the default one:
#   TIRESIAS_CLUSTER_INSTANCE=iso containers/slurm-cluster.sh up|down|status
#   clients: SLURM_CONF=/etc/slurm-iso/slurm.conf squeue ...
# No slurmdbd (accounting_storage/none, jobcomp/filetxt), 4 nodes NAMEg[1-4] x 4 GPUs
# (the fake GPU devices are shared with the default instance), partitions batch
# (default) and small, JobRequeue=1, cred_expire=10, multifactor with a small age
# weight, backfill with quick intervals. Its own ClusterName, ports, StateSaveLocation,
# spools, pid and log files; munge is shared. The Prolog/Epilog lines are copied from
# the default instance's slurm.conf, so both clusters run the same node hooks.
#   TIRESIAS_CLUSTER_PORT_BASE  slurmctld port (slurmd ports follow it); default derived
#       from NAME in 20000..24990.
#   TIRESIAS_INSTANCE_PARTITIONS  e.g. "left:1-2,right:3-4": these partitions (node
#       ranges of NAMEg[1-4], the first is the default) instead of batch + small.
#   TIRESIAS_INSTANCE_CLI_FILTER=1  install slurm_plugin/cli_filter.lua next to the
#       instance's slurm.conf and set CliFilterPlugins=cli_filter/lua (sbatch then
#       records a job's --signal in its comment).
#   TIRESIAS_INSTANCE_SITE=1  shaped like a site's cluster: two GPU types (NAMEg[1-2]
#       gpu:v100:4, NAMEg[3-4] gpu:a100:4, fake devices with Type=), overlapping
#       partitions batch (NAMEg[1-4], default) and urgent (NAMEg[3-4]), and NAMEg4
#       also shares its GPUs as gres/shard (16). Reservations are made by the tests.
#       With TIRESIAS_INSTANCE_MIXED_NODE=1, NAMEg4 has two GPU types instead
#       (gpu:a100:2,gpu:v100:2, no shards: tests/test_slurm_two_types.py).
#   TIRESIAS_INSTANCE_ACCOUNTING=1  accounting in the default instance's slurmdbd (it must
#       be up) with AccountingStorageEnforce=limits,qos: cluster tNAME, account research
#       with alice and bob, who may use QOS gpu4user (MaxTRESPerUser=gres/gpu=4), so
#       Slurm's own QOS limits hold jobs (QOSMaxGRESPerUser).
#   TIRESIAS_INSTANCE_ACCOUNTING_SETUP=FILE  (with TIRESIAS_INSTANCE_ACCOUNTING=1) a bash
#       script makes the cluster, accounts, users and QOS instead of the rows above
#       (instance_run_accounting_setup).
#   TIRESIAS_INSTANCE_SLURM_PREEMPT=1  (needs TIRESIAS_INSTANCE_ACCOUNTING=1) slurmctld
#       preempts by itself (docs/slurm-preemption.md, tests/test_slurm_native_preemption.py):
#       PreemptType=preempt/qos, PreemptMode=REQUEUE and
#       SlurmctldParameters=preempt_send_user_signal (22.05 has no PreemptParameters;
#       24.11+ read both spellings); PriorityFlags stay unset. QOS rows (idempotent;
#       alice and bob may use them, their default QOS stays normal): tpreempt
#       (PreemptMode=requeue,within GraceTime=10: its jobs preempt each other by strictly
#       higher priority), texempt (the same, GraceTime=0 PreemptExemptTime=00:00:40; a
#       bare number would be minutes), tcross (Preempt=tpreempt, no WITHIN), twithin
#       (PreemptMode=within alone) and, from 25.05, tcrossprio (Preempt=tpreempt
#       PreemptMode=requeue,priority).
#   TIRESIAS_INSTANCE_MEMORY=1  memory is a consumable resource (CR_Core_Memory,
#       DefMemPerCPU=1000, nodes of 16000 MB), as on most sites (tests/test_slurm_resources.py).
#   TIRESIAS_INSTANCE_CONF_EXTRA  a site's settings over all of the above, items separated by
#       ';' or newlines: KEY=VALUE (global), NodeName=ALL|NODE OPT=VAL..., PartitionName=NAME
#       OPT=VAL... ('{inst}' is the instance's name; containers/conf_extra.py).
# Unset, empty or "default": the default cluster above, unchanged.
# ======================================================================================

instance_setup() {
    INST=$1
    [[ "$INST" =~ ^[a-z][a-z0-9]{0,15}$ ]] \
        || die "TIRESIAS_CLUSTER_INSTANCE '$INST': use 1-16 lowercase letters/digits, starting with a letter"
    I_ETC=/etc/slurm-$INST
    I_LOGDIR=/var/log/slurm-$INST
    I_CTLD_SPOOL=/var/spool/slurmctld-$INST
    I_SLURMD_SPOOL=/var/spool/slurmd-$INST
    I_CTLD_PID=/run/slurmctld-$INST.pid
    I_NODES=("${INST}g1" "${INST}g2" "${INST}g3" "${INST}g4")
    local sum; sum=$(printf '%s' "$INST" | cksum | awk '{print $1}')
    I_PORT=${TIRESIAS_CLUSTER_PORT_BASE:-$(( 20000 + (sum % 500) * 10 ))}
    [[ "$I_PORT" =~ ^[0-9]+$ ]] && [ "$I_PORT" -gt 1024 ] && [ "$I_PORT" -lt 65530 ] \
        || die "TIRESIAS_CLUSTER_PORT_BASE '$I_PORT' is not a port number"
    [ "$I_PORT" = 6817 ] && die "port 6817 belongs to the default instance; set TIRESIAS_CLUSTER_PORT_BASE"
    I_PARTITIONS=${TIRESIAS_INSTANCE_PARTITIONS:-}
    I_SITE=${TIRESIAS_INSTANCE_SITE:-0}
    [ "$I_SITE" = 0 ] || [ "$I_SITE" = 1 ] || die "TIRESIAS_INSTANCE_SITE '$I_SITE': use 0 or 1"
    I_ACCT=${TIRESIAS_INSTANCE_ACCOUNTING:-0}
    [ "$I_ACCT" = 0 ] || [ "$I_ACCT" = 1 ] || die "TIRESIAS_INSTANCE_ACCOUNTING '$I_ACCT': use 0 or 1"
    I_PREEMPT=${TIRESIAS_INSTANCE_SLURM_PREEMPT:-0}
    [ "$I_PREEMPT" = 0 ] || [ "$I_PREEMPT" = 1 ] || die "TIRESIAS_INSTANCE_SLURM_PREEMPT '$I_PREEMPT': use 0 or 1"
    [ "$I_PREEMPT" = 0 ] || [ "$I_ACCT" = 1 ] \
        || die "TIRESIAS_INSTANCE_SLURM_PREEMPT=1 needs TIRESIAS_INSTANCE_ACCOUNTING=1 (QOS live in slurmdbd)"
    [ -z "$I_PARTITIONS" ] || [[ "$I_PARTITIONS" =~ ^[a-z][a-z0-9_]*:[1-4](-[1-4])?(,[a-z][a-z0-9_]*:[1-4](-[1-4])?)*$ ]] \
        || die "TIRESIAS_INSTANCE_PARTITIONS '$I_PARTITIONS': use NAME:FIRST-LAST[,NAME:FIRST-LAST...] over nodes 1-4"
    # refused before anything is written: a test must run on the settings it names
    [ -z "${TIRESIAS_INSTANCE_CONF_EXTRA:-}" ] \
        || printf "NodeName=${INST}g%s\n" 1 2 3 4 \
        | python3 "$REPO_DIR/containers/conf_extra.py" "$TIRESIAS_INSTANCE_CONF_EXTRA" "$INST" >/dev/null \
        || die "[$INST] TIRESIAS_INSTANCE_CONF_EXTRA refused (see above)"
    export SLURM_CONF=$I_ETC/slurm.conf
}

instance_partition_lines() {
    if [ "$I_SITE" = 1 ]; then
        echo "PartitionName=batch Nodes=${INST}g[1-4] Default=YES MaxTime=INFINITE State=UP PriorityJobFactor=1"
        echo "PartitionName=urgent Nodes=${INST}g[3-4] MaxTime=INFINITE State=UP PriorityJobFactor=1"
        return
    fi
    if [ -z "$I_PARTITIONS" ]; then
        echo "PartitionName=batch Nodes=${INST}g[1-4] Default=YES MaxTime=INFINITE State=UP PriorityJobFactor=1"
        echo "PartitionName=small Nodes=${INST}g[1-2] MaxTime=INFINITE State=UP"
        return
    fi
    local item default=YES
    for item in ${I_PARTITIONS//,/ }; do
        echo "PartitionName=${item%%:*} Nodes=${INST}g[${item#*:}] Default=$default MaxTime=INFINITE State=UP"
        default=NO
    done
}

# The cli_filter plugin of this checkout, when TIRESIAS_INSTANCE_CLI_FILTER=1 (sbatch
# reads cli_filter.lua from the directory of the slurm.conf it uses).
instance_cli_filter_lines() {
    [ "${TIRESIAS_INSTANCE_CLI_FILTER:-0}" = 1 ] || return 0
    install -m 644 -o root -g root "$REPO_DIR/slurm_plugin/cli_filter.lua" "$I_ETC/cli_filter.lua"
    # The site's policy, in the file the lua files read next to themselves: with slurmctld
    # preempting, the jobs that declared a --signal whose lead time fits in tpreempt's
    # GraceTime (10 s) go to QOS tpreempt (tests/test_slurm_preemption_by_slurm.py,
    # bench/ab_preemption.py); else the shipped file, where none is (a test may write its own).
    if [ "${TIRESIAS_INSTANCE_SLURM_PREEMPT:-0}" = 1 ]; then
        printf 'preemptable_qos = tpreempt\npreemptable_qos_grace_s = 10\n' \
            | write_if_changed "$I_ETC/tiresias-policy.conf" 644 root:root || true
    elif [ ! -f "$I_ETC/tiresias-policy.conf" ]; then
        install -m 644 -o root -g root "$REPO_DIR/slurm_plugin/tiresias-policy.conf" "$I_ETC/tiresias-policy.conf"
    fi
    echo "CliFilterPlugins=cli_filter/lua"
}

# Accounting: none, or (TIRESIAS_INSTANCE_ACCOUNTING=1) the default instance's slurmdbd
# with Slurm's limits and QOS enforced (what a site's QOS and association limits need).
instance_accounting_lines() {
    if [ "$I_ACCT" = 1 ]; then
        cat <<'EOF'
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu
AccountingStorageEnforce=associations,limits,qos
EOF
    else
        echo "AccountingStorageType=accounting_storage/none"
    fi
}

# The instance's cluster, account, users and QOS in slurmdbd (idempotent; before
# slurmctld starts, which then finds its associations).
instance_register_accounting() {
    [ "$I_ACCT" = 1 ] || return 0
    local c="t$INST" q=gpu4user u
    timeout 5 sacctmgr -n list cluster >/dev/null 2>&1 \
        || die "[$INST] TIRESIAS_INSTANCE_ACCOUNTING=1 needs the default instance's slurmdbd: run '$0 up' first"
    [ -n "$(timeout 10 sacctmgr -n -P list cluster "$c" format=cluster)" ] \
        || timeout 10 sacctmgr -i add cluster "$c" >/dev/null || die "[$INST] sacctmgr add cluster $c failed"
    [ -n "$(timeout 10 sacctmgr -n -P list qos "$q" format=name)" ] \
        || timeout 10 sacctmgr -i add qos "$q" MaxTRESPerUser=gres/gpu=4 >/dev/null \
        || die "[$INST] sacctmgr add qos $q failed"
    [ -n "$(timeout 10 sacctmgr -n -P list assoc cluster="$c" account=research format=account)" ] \
        || timeout 10 sacctmgr -i add account research cluster="$c" >/dev/null \
        || die "[$INST] sacctmgr add account research cluster=$c failed"
    for u in alice bob; do
        [ -n "$(timeout 10 sacctmgr -n -P list assoc cluster="$c" user="$u" format=user)" ] \
            || timeout 10 sacctmgr -i add user "$u" account=research cluster="$c" >/dev/null \
            || die "[$INST] sacctmgr add user $u cluster=$c failed"
        case ",$(timeout 10 sacctmgr -n -P list assoc cluster="$c" user="$u" format=qos)," in
            *,$q,*) ;;
            *) timeout 10 sacctmgr -i modify user "$u" where cluster="$c" set qos+="$q" >/dev/null \
                   || die "[$INST] sacctmgr modify user $u cluster=$c qos+=$q failed" ;;
        esac
    done
}

# TIRESIAS_INSTANCE_ACCOUNTING_SETUP=FILE: a bash script that makes the instance's
# cluster, accounts, users and QOS rows in slurmdbd, as a site's admin would, in place of
# the harness's own (instance_register_accounting, instance_register_preempt). It runs
# before slurmctld starts, with SLURM_CONF set; its output is kept in the instance's log
# folder. tests/test_slurm_preemption_install.py runs docs/admin.md's commands this way.
instance_run_accounting_setup() {
    [ "$I_ACCT" = 1 ] || die "[$INST] TIRESIAS_INSTANCE_ACCOUNTING_SETUP needs TIRESIAS_INSTANCE_ACCOUNTING=1"
    [ "$I_PREEMPT" = 0 ] || die "[$INST] TIRESIAS_INSTANCE_ACCOUNTING_SETUP replaces TIRESIAS_INSTANCE_SLURM_PREEMPT's QOS rows: set one of them"
    [ -f "$1" ] || die "[$INST] TIRESIAS_INSTANCE_ACCOUNTING_SETUP '$1': no such file"
    timeout 5 sacctmgr -n list cluster >/dev/null 2>&1 \
        || die "[$INST] TIRESIAS_INSTANCE_ACCOUNTING_SETUP needs the default instance's slurmdbd: run '$0 up' first"
    # Not stopped at a failing command: a rerun's "Nothing new added" exits 1; the test
    # checks the rows the script was to make.
    local rc=0
    timeout 120 bash "$1" >"$I_LOGDIR/accounting-setup.log" 2>&1 || rc=$?
    log "[$INST] accounting set up by $1 (exit $rc; output in $I_LOGDIR/accounting-setup.log)"
}

# Slurm's own preemption (TIRESIAS_INSTANCE_SLURM_PREEMPT=1): slurm.conf lines.
instance_preempt_lines() {
    [ "$I_PREEMPT" = 1 ] || return 0
    cat <<'EOF'
PreemptType=preempt/qos
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
EOF
}

# ... and its QOS rows in slurmdbd (idempotent; after instance_register_accounting).
instance_register_preempt() {
    [ "$I_PREEMPT" = 1 ] || return 0
    local c="t$INST" q u spec specs=(
        "tpreempt PreemptMode=requeue,within GraceTime=10"
        "texempt PreemptMode=requeue,within GraceTime=0 PreemptExemptTime=00:00:40"
        "tcross Preempt=tpreempt" "twithin PreemptMode=within")
    # PreemptMode=PRIORITY exists from 25.05 (sacctmgr refuses it before).
    [ "$(slurm_version_num)" -ge 2505 ] && specs+=("tcrossprio Preempt=tpreempt PreemptMode=requeue,priority")
    for spec in "${specs[@]}"; do
        q=${spec%% *}
        if [ -z "$(timeout 10 sacctmgr -n -P list qos "$q" format=name)" ]; then
            timeout 10 sacctmgr -i add qos "$q" >/dev/null || die "[$INST] sacctmgr add qos $q failed"
        fi
        # shellcheck disable=SC2086  # the settings are words
        timeout 10 sacctmgr -i modify qos "$q" set ${spec#* } >/dev/null \
            || die "[$INST] sacctmgr modify qos $q set ${spec#* } failed"
    done
    for u in alice bob; do
        for spec in "${specs[@]}"; do
            q=${spec%% *}
            case ",$(timeout 10 sacctmgr -n -P list assoc cluster="$c" user="$u" format=qos)," in
                *,$q,*) ;;
                *) timeout 10 sacctmgr -i modify user "$u" where cluster="$c" set qos+="$q" >/dev/null \
                       || die "[$INST] sacctmgr modify user $u cluster=$c qos+=$q failed" ;;
            esac
        done
    done
}

instance_slurmd_pid() { echo "/run/slurmd-$INST-$1.pid"; }

# The node-hook lines of the default instance (whatever it currently names), so
# that both clusters run the same Prolog/Epilog.
instance_hook_lines() {
    if [ -f "$ETC/slurm.conf" ]; then
        grep -E '^(Prolog|Epilog|TaskProlog|TaskEpilog|PrologSlurmctld|EpilogSlurmctld|PrologFlags|PrologEpilogTimeout)=' \
            "$ETC/slurm.conf" || true
    else
        ( install_hooks ) >/dev/null 2>&1 || log "node hooks not installed; instance runs without Prolog/Epilog"
        [ -x "$HOOK_DIR/prolog" ] && echo "Prolog=$HOOK_DIR/prolog"
        [ -x "$HOOK_DIR/epilog" ] && echo "Epilog=$HOOK_DIR/epilog"
        [ -x "$HOOK_DIR/task_prolog" ] && echo "TaskProlog=$HOOK_DIR/task_prolog"
        true
    fi
}

instance_write_configs() {
    mkdir -p "$I_ETC" "$I_LOGDIR" "$I_CTLD_SPOOL"
    chown slurm:slurm "$I_LOGDIR" "$I_CTLD_SPOOL"
    local n
    for n in "${I_NODES[@]}"; do mkdir -p "$I_SLURMD_SPOOL/$n"; done
    CONFIG_CHANGED=0
    {
        echo "# Generated by containers/slurm-cluster.sh for instance '$INST'; edits are overwritten."
        instance_conf_lines "t$INST" "$I_PORT" "$I_CTLD_SPOOL" "$I_SLURMD_SPOOL" "$I_CTLD_PID" \
            "/run/slurmd-$INST-%n.pid" "$I_LOGDIR"
        instance_accounting_lines
        instance_preempt_lines
        # Job ids of their own: the node hooks of every cluster on this host share /run
        # (node-side state by job id), which on a site belongs to one cluster's nodes.
        cat <<EOF
FirstJobId=$(( (I_PORT - 19000) * 100 ))
JobCompType=jobcomp/filetxt
JobCompLoc=$I_LOGDIR/jobcomp.txt
EOF
        instance_hook_lines
        instance_cli_filter_lines
        if [ "$I_SITE" = 1 ]; then
            site_node_conf_lines $((I_PORT + 1))
        else
            node_conf_lines $((I_PORT + 1)) "${I_NODES[@]}"
        fi
        instance_partition_lines
    } | site_gres_types | instance_memory | instance_conf_extra \
        | write_if_changed "$I_ETC/slurm.conf" 644 root:root && CONFIG_CHANGED=1
    if [ "$I_SITE" = 1 ]; then
        write_node_side_confs "$I_ETC" "${INST}g[1-4]" site_gres_conf_lines
    else
        write_node_side_confs "$I_ETC" "${INST}g[1-4]"
    fi
}

# TIRESIAS_INSTANCE_MEMORY=1: memory allocated per job, a default per CPU as sites set one.
instance_memory() {
    case "${TIRESIAS_INSTANCE_MEMORY:-0}" in
        0) cat ;;
        1) sed 's/^SelectTypeParameters=CR_Core$/SelectTypeParameters=CR_Core_Memory\nDefMemPerCPU=1000/' ;;
        *) die "TIRESIAS_INSTANCE_MEMORY '${TIRESIAS_INSTANCE_MEMORY}': use 0 or 1" ;;
    esac
}

# TIRESIAS_INSTANCE_CONF_EXTRA: a site's own settings over the generated lines
# (containers/conf_extra.py says the forms); a malformed item stops `up`.
instance_conf_extra() {
    if [ -z "${TIRESIAS_INSTANCE_CONF_EXTRA:-}" ]; then cat; return; fi
    python3 "$REPO_DIR/containers/conf_extra.py" "$TIRESIAS_INSTANCE_CONF_EXTRA" "$INST" \
        || die "[$INST] TIRESIAS_INSTANCE_CONF_EXTRA refused (see above)"
}

# The site-shaped instance (TIRESIAS_INSTANCE_SITE=1): shards need their GresType.
site_gres_types() {
    if [ "$I_SITE" = 1 ]; then sed 's/^GresTypes=.*/GresTypes=gpu,shard/'; else cat; fi
}

site_node_conf_lines() {
    node_lines site_node_gres "$1" "${I_NODES[@]}"
}

site_node_gres() {
    case $1 in
        *g1|*g2) echo gpu:v100:4 ;;
        *g3) echo gpu:a100:4 ;;
        *) if [ "${TIRESIAS_INSTANCE_MIXED_NODE:-0}" = 1 ]; then echo gpu:a100:2,gpu:v100:2; else echo gpu:a100:4,shard:16; fi ;;
    esac
}

# The site-shaped instance's gres.conf lines (its nodes are ${INST}g1..g4).
site_gres_conf_lines() {
    cat <<EOF
NodeName=${INST}g[1-2] Name=gpu Type=v100 File=$FAKEGPU_DIR/nvidia[0-3]
EOF
    if [ "${TIRESIAS_INSTANCE_MIXED_NODE:-0}" = 1 ]; then
        cat <<EOF
NodeName=${INST}g3 Name=gpu Type=a100 File=$FAKEGPU_DIR/nvidia[0-3]
NodeName=${INST}g4 Name=gpu Type=a100 File=$FAKEGPU_DIR/nvidia[0-1]
NodeName=${INST}g4 Name=gpu Type=v100 File=$FAKEGPU_DIR/nvidia[2-3]
EOF
    else
        cat <<EOF
NodeName=${INST}g[3-4] Name=gpu Type=a100 File=$FAKEGPU_DIR/nvidia[0-3]
NodeName=${INST}g4 Name=shard Count=16
EOF
    fi
}

instance_idle_node_count() {
    timeout 3 sinfo -h -N -t idle,mixed,allocated -o %N 2>/dev/null | sort -u | wc -l
}

instance_up() {
    [ "$(id -u)" = 0 ] || die "must run as root"
    local t0; t0=$(now)
    install_packages
    prepare_host
    instance_write_configs
    start_munge
    if [ -n "${TIRESIAS_INSTANCE_ACCOUNTING_SETUP:-}" ]; then
        instance_run_accounting_setup "$TIRESIAS_INSTANCE_ACCOUNTING_SETUP"
    else
        instance_register_accounting
        instance_register_preempt
    fi
    if pid_alive "$I_CTLD_PID"; then
        if [ "$CONFIG_CHANGED" = 1 ]; then
            log "[$INST] slurm.conf changed: scontrol reconfigure"
            timeout 10 scontrol reconfigure || log "[$INST] scontrol reconfigure failed (GRES changes need down + up)"
        fi
    else
        local flags=()
        [ "${TIRESIAS_SLURM_FRESH:-0}" = 1 ] && flags+=(-c)
        # An instance is a test bed: state a stopped one left (a run killed before its
        # `down`) is not recovered; slurmctld would refuse it once slurmdbd knows the
        # cluster under another id ("CLUSTER ID MISMATCH").
        find "$I_CTLD_SPOOL" -mindepth 1 -delete 2>/dev/null || true
        slurmctld "${flags[@]}" || die "[$INST] slurmctld failed to start" "$I_LOGDIR/slurmctld.log"
        wait_until "$WAIT_S" timeout 3 scontrol ping \
            || die "[$INST] slurmctld does not answer within ${WAIT_S} s" "$I_LOGDIR/slurmctld.log"
        log "[$INST] slurmctld up on port $I_PORT in $(elapsed "$t0") s${flags[*]:+ (flags ${flags[*]})}"
    fi
    local n
    for n in "${I_NODES[@]}"; do
        pid_alive "$(instance_slurmd_pid "$n")" && continue
        slurmd -N "$n" || die "[$INST] slurmd -N $n failed to start" "$I_LOGDIR/slurmd-$n.log"
    done
    wait_nodes_idle instance_idle_node_count "${#I_NODES[@]}" "[$INST] " "$I_LOGDIR/slurmd-${I_NODES[0]}.log"
    log "[$INST] cluster up (SLURM_CONF=$SLURM_CONF); total $(elapsed "$t0") s"
    timeout 5 sinfo
}

instance_down() {
    local n
    for n in "${I_NODES[@]}"; do stop_pidfile "[$INST] slurmd $n" "$(instance_slurmd_pid "$n")"; done
    stop_pidfile "[$INST] slurmctld" "$I_CTLD_PID"
}

instance_status() {
    local ok=0 n
    if pid_alive "$I_CTLD_PID"; then echo "slurmctld: running (pid $(cat "$I_CTLD_PID"))"
    else echo "slurmctld: not running"; ok=1; fi
    for n in "${I_NODES[@]}"; do
        if pid_alive "$(instance_slurmd_pid "$n")"; then echo "slurmd-$n: running (pid $(cat "$(instance_slurmd_pid "$n")"))"
        else echo "slurmd-$n: not running"; ok=1; fi
    done
    if [ "$ok" = 0 ]; then
        timeout 5 sinfo || ok=1
        [ "$(instance_idle_node_count)" = "${#I_NODES[@]}" ] || { echo "not all nodes are up"; ok=1; }
    fi
    echo "SLURM_CONF=$SLURM_CONF"
    return "$ok"
}

if [ -n "${TIRESIAS_CLUSTER_INSTANCE:-}" ] && [ "$TIRESIAS_CLUSTER_INSTANCE" != default ]; then
    instance_setup "$TIRESIAS_CLUSTER_INSTANCE"
    case "${1:-}" in
        up) instance_up ;;
        down) instance_down ;;
        status) instance_status ;;
        *) echo "usage: TIRESIAS_CLUSTER_INSTANCE=NAME $0 up|down|status" >&2; exit 2 ;;
    esac
    exit $?
fi
# END isolated instances
# ======================================================================================

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
