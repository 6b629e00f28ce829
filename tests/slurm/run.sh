#!/usr/bin/env bash
# make test-slurm: stand up a real single-node SLURM cluster on this machine (as
# root), run config/test.yaml through the SLURM profile, and check that every
# number equals a local run of the same config.
#
#   1. install slurm-wlm and munge with apt if their binaries are missing;
#   2. write slurm.conf (one node named after `hostname -s`, the machine's CPUs
#      and memory from `slurmd -C`) into a temp folder, start munged (unless one
#      already answers), slurmctld and slurmd in the foreground as background
#      processes, record their pids, wait until `sinfo` shows the node idle;
#   3. run the tiny config locally and through
#      `snakemake --workflow-profile workflow/profiles/slurm` in two temp folders;
#   4. tests/slurm/test_slurm_run.py: same numbers (lowtemp.store.compare, bit for bit),
#      jobs really went through sbatch, short jobs grouped, profile settings used;
#   5. on exit (success or failure) cancel the cluster's jobs and stop the
#      daemons by their recorded pids.
#
# Fails (non-zero, with the reason and the daemons' logs) whenever SLURM cannot be
# installed or started; it never skips. Environment:
#   LOWTEMP_SLURM_STATE  the temp folder (default /tmp/lowtemp-slurm-test); its
#                        pid file lets a later run stop daemons a killed run left
#   KEEP=1               keep the folder after a successful run
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=$REPO/.venv/bin/python
SNAKEMAKE=$REPO/.venv/bin/snakemake
STATE=${LOWTEMP_SLURM_STATE:-/tmp/lowtemp-slurm-test}
PIDFILE=$STATE/daemons.pids
T0=$SECONDS

say() { echo "test-slurm: $*"; }
fail() {
    echo "test-slurm: FAIL: $*" >&2
    exit 1
}

# ------------------------------------------------------------------ daemons by pid
# Each line of the pid file: NAME PID. A pid is only signalled while its command
# line still names this test's folder (so a recycled pid is never touched).
ours() { { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null | grep -qF -- "$STATE"; }

stop_pid() { # NAME PID
    local name=$1 pid=$2 i
    ours "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 50); do
        ours "$pid" || {
            say "stopped $name (pid $pid)"
            return 0
        }
        sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
    say "killed $name (pid $pid) after 10 s"
}

cancel_jobs() { # jobs left by a failed run keep running under slurmstepd otherwise
    [ -f "$STATE/etc/slurm.conf" ] || return 0
    local pid i
    pid=$(awk '$1 == "slurmctld" {print $2}' "$PIDFILE" 2>/dev/null || true)
    [ -n "$pid" ] && ours "$pid" || return 0
    SLURM_CONF=$STATE/etc/slurm.conf scancel --quiet --full --signal=KILL --state=RUNNING 2>/dev/null || true
    SLURM_CONF=$STATE/etc/slurm.conf scancel --quiet 2>/dev/null || true
    for i in $(seq 30); do
        [ -z "$(SLURM_CONF=$STATE/etc/slurm.conf squeue -h -t PD,R,CG 2>/dev/null)" ] && return 0
        sleep 1
    done
    say "warning: jobs still listed by squeue after 30 s"
}

# The jobs' nested `srun` (snakemake-executor-plugin-slurm-jobstep) drops SLURM_*
# variables, SLURM_CONF included, so it reads the default /etc/slurm/slurm.conf:
# the test's config is copied there; a config that is not this test's is set
# aside and put back at the end.
SYS_CONF=/etc/slurm/slurm.conf
MARK="# written by tests/slurm/run.sh"
SYS_BACKUP=$SYS_CONF.lowtemp-test-backup
restore_system_conf() {
    if [ -f "$SYS_CONF" ] && head -n 1 "$SYS_CONF" | grep -qF -- "$MARK"; then
        rm -f "$SYS_CONF"
    fi
    if [ -f "$SYS_BACKUP" ] && [ ! -e "$SYS_CONF" ]; then
        mv "$SYS_BACKUP" "$SYS_CONF"
        say "restored the machine's $SYS_CONF"
    fi
}

stop_daemons() {
    [ -f "$PIDFILE" ] || return 0
    cancel_jobs
    local name pid
    for name in slurmd slurmctld munged; do # reverse start order
        while read -r n pid; do
            [ "$n" = "$name" ] && stop_pid "$name" "$pid"
        done <"$PIDFILE"
    done
    rm -f "$PIDFILE"
}

show_logs() {
    local f
    for f in "$STATE"/log/*.log; do
        [ -f "$f" ] || continue
        echo "----- $f (last 40 lines)" >&2
        tail -n 40 "$f" >&2
    done
}

on_exit() {
    local rc=$?
    trap - EXIT
    if [ "$rc" -ne 0 ]; then
        show_logs
        [ -f "$STATE/slurm.out" ] && {
            echo "----- $STATE/slurm.out (last 60 lines)" >&2
            tail -n 60 "$STATE/slurm.out" >&2
        }
    fi
    stop_daemons
    restore_system_conf
    if [ "$rc" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then
        rm -rf "$STATE"
    else
        say "files kept in $STATE"
    fi
    say "$([ "$rc" -eq 0 ] && echo PASSED || echo FAILED) in $((SECONDS - T0)) s"
    exit "$rc"
}

# ------------------------------------------------------------------ preconditions
[ "$(id -u)" -eq 0 ] || fail "must run as root (it installs packages and starts munged, slurmctld, slurmd)"
[ -x "$SNAKEMAKE" ] || fail "$SNAKEMAKE missing: run 'make venv' first"
"$PY" -c "import snakemake_executor_plugin_slurm" 2>/dev/null ||
    fail "snakemake-executor-plugin-slurm is not installed in .venv (envs/requirements.lock; run 'make venv')"

need_install=0
for bin in munged munge unmunge slurmctld slurmd sinfo sbatch squeue scancel scontrol; do
    command -v "$bin" >/dev/null || need_install=1
done
if [ "$need_install" -eq 1 ]; then
    command -v apt-get >/dev/null || fail "SLURM binaries missing and no apt-get to install slurm-wlm and munge"
    say "installing slurm-wlm and munge with apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || fail "apt-get update failed"
    apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null ||
        fail "apt-get install slurm-wlm munge failed"
    for bin in munged slurmctld slurmd sinfo sbatch squeue; do
        command -v "$bin" >/dev/null || fail "$bin still missing after installing slurm-wlm and munge"
    done
fi
say "$(slurmctld -V), $(munged -V 2>&1 | head -n 1)"

# a run killed before its trap ran may have left daemons: stop them by their recorded pids
stop_daemons
restore_system_conf
rm -rf "$STATE"
mkdir -p "$STATE"/{etc,log,spool/ctld,spool/d,run,local,slurm}
chmod 700 "$STATE"
trap on_exit EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------ munge
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
if munge_ok; then
    say "a munged already answers on the default socket; using it"
else
    id munge >/dev/null 2>&1 || fail "user 'munge' missing (the munge package creates it)"
    mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
    if [ ! -s /etc/munge/munge.key ]; then
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile=/etc/munge/munge.key >/dev/null || fail "mungekey failed"
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        fi
    fi
    chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
    chmod 700 /etc/munge
    chmod 400 /etc/munge/munge.key
    chmod 755 /run/munge
    rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock /run/munge/munged.pid
    # --force: run as root with the key owned by munge; -F: foreground, so $! is munged itself
    munged -F --force --log-file="$STATE/log/munged.log" --pid-file="$STATE/run/munged.pid" \
        --seed-file="$STATE/run/munged.seed" >>"$STATE/log/munged.log" 2>&1 &
    echo "munged $!" >>"$PIDFILE"
    for _ in $(seq 50); do
        munge_ok && break
        sleep 0.2
    done
    munge_ok || fail "munged did not start (munge -n | unmunge fails)"
    say "munged started (pid $!)"
fi

# ------------------------------------------------------------------ slurm.conf
NODE=$(hostname -s)
NODE_LINE=$(slurmd -C 2>/dev/null | head -n 1 || true)
CPUS=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$NODE_LINE")
MEM=$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$NODE_LINE")
[ -n "$CPUS" ] || CPUS=$(nproc)
[ -n "$MEM" ] || MEM=$(free -m | awk '/^Mem:/ {print $2}')
[ "$CPUS" -ge 1 ] && [ "$MEM" -ge 1 ] || fail "cannot read this machine's CPUs ($CPUS) or memory ($MEM MB)"
read -r CTLD_PORT SLURMD_PORT < <("$PY" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)
PARTITION=lowtemp
export SLURM_CONF=$STATE/etc/slurm.conf
cat >"$SLURM_CONF" <<EOF
$MARK: one node, this machine, no accounting
ClusterName=lowtemptest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MinJobAge=300
SchedulerParameters=sched_interval=2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
mkdir -p "$(dirname "$SYS_CONF")"
if [ -e "$SYS_CONF" ] && ! head -n 1 "$SYS_CONF" | grep -qF -- "$MARK"; then
    [ -e "$SYS_BACKUP" ] && fail "both $SYS_CONF and $SYS_BACKUP exist; move one away"
    mv "$SYS_CONF" "$SYS_BACKUP"
    say "set the machine's $SYS_CONF aside as $SYS_BACKUP (put back at the end)"
fi
cp "$SLURM_CONF" "$SYS_CONF"
say "slurm.conf: node $NODE, $CPUS CPUs, $MEM MB, ports $CTLD_PORT/$SLURMD_PORT ($SLURM_CONF)"

# ------------------------------------------------------------------ slurmctld, slurmd
slurmctld -D -c -f "$SLURM_CONF" >>"$STATE/log/slurmctld.stdout.log" 2>&1 &
echo "slurmctld $!" >>"$PIDFILE"
CTLD_PID=$!
for _ in $(seq 100); do
    scontrol ping 2>/dev/null | grep -q "UP" && break
    kill -0 "$CTLD_PID" 2>/dev/null || fail "slurmctld exited at start"
    sleep 0.2
done
scontrol ping 2>/dev/null | grep -q "UP" || fail "slurmctld does not answer 'scontrol ping' after 20 s"
say "slurmctld started (pid $CTLD_PID)"

slurmd -D -f "$SLURM_CONF" >>"$STATE/log/slurmd.stdout.log" 2>&1 &
echo "slurmd $!" >>"$PIDFILE"
SLURMD_PID=$!
state=""
for _ in $(seq 120); do
    kill -0 "$SLURMD_PID" 2>/dev/null || fail "slurmd exited at start"
    state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n 1)
    [ "$state" = idle ] && break
    sleep 0.5
done
if [ "$state" != idle ]; then
    sinfo -R >&2 || true
    scontrol show node "$NODE" >&2 || true
    fail "node $NODE is '$state', not idle, 60 s after slurmd started"
fi
say "slurmd started (pid $SLURMD_PID); node $NODE idle after $((SECONDS - T0)) s"

# a trivial job first: a broken cluster fails here, with its own message
probe=$(sbatch --parsable --wait -p "$PARTITION" -n 1 -c 1 --mem 100 -t 1 -o "$STATE/log/probe.log" \
    --wrap 'echo probe on $(hostname -s)' 2>&1) || {
    cat "$STATE/log/probe.log" >&2 2>/dev/null || true
    fail "a trivial sbatch job failed: $probe"
}
say "probe job $probe ran: $(cat "$STATE/log/probe.log")"

# ------------------------------------------------------------------ the two runs
common=(--snakefile "$REPO/Snakefile" --configfile "$REPO/config/test.yaml")

say "local run (workflow/profiles/default, 2 cores)"
t=$SECONDS
"$SNAKEMAKE" "${common[@]}" --directory "$STATE/local" --workflow-profile "$REPO/workflow/profiles/default" \
    --cores 2 >"$STATE/local.out" 2>&1 || {
    tail -n 60 "$STATE/local.out" >&2
    fail "the local run failed (log: $STATE/local.out)"
}
say "local run done in $((SECONDS - t)) s"

# Test-cluster settings only (a real cluster keeps the profile's defaults): this
# cluster has $CPUS CPUs (--cores bounds every job and group job), no accounting
# database (squeue for job status, no account), and polls status every 2 s.
say "SLURM run (workflow/profiles/slurm)"
t=$SECONDS
"$SNAKEMAKE" "${common[@]}" --directory "$STATE/slurm" --workflow-profile "$REPO/workflow/profiles/slurm" \
    --cores "$CPUS" --default-resources "slurm_partition=$PARTITION" \
    --slurm-status-command squeue --slurm-no-account \
    --slurm-init-seconds-before-status-checks 2 --seconds-between-status-checks 2 \
    --slurm-keep-successful-logs --verbose >"$STATE/slurm.out" 2>&1 ||
    fail "the SLURM run failed (log: $STATE/slurm.out)"
say "SLURM run done in $((SECONDS - t)) s"

# ------------------------------------------------------------------ checks
LOWTEMP_SLURM_STATE=$STATE LOWTEMP_SLURM_PARTITION=$PARTITION \
    "$PY" -m pytest -q -p no:cacheprovider "$REPO/tests/slurm/test_slurm_run.py" ||
    fail "checks of the SLURM run failed"
