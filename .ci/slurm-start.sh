#!/usr/bin/env bash
# Start a single-node SLURM cluster on this machine (Debian/Ubuntu slurm-wlm) for CI, as root.
#   bash .ci/slurm-start.sh            installs slurm-wlm + munge if missing, starts munged, slurmctld, slurmd
#   bash .ci/slurm-start.sh stop       stops them again
# The node offers all CPUs and memory of this machine and no GPUs (partition "ci"); no cgroups, so it
# also runs inside a container. Snakemake's slurm executor then submits real sbatch jobs to it.
set -euo pipefail
state=/tmp/specrepro-slurm
conf=/etc/slurm/slurm.conf

stop() {
  for d in slurmd slurmctld munged; do
    [ -f "$state/$d.pid" ] && kill "$(cat "$state/$d.pid")" 2>/dev/null || true
    rm -f "$state/$d.pid"
  done
}
if [ "${1:-}" = stop ]; then stop; exit 0; fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi
mkdir -p "$state" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /etc/slurm
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
cat > "$conf" <<CONF
ClusterName=specrepro-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
SchedulerType=sched/backfill
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
# munge needs a key readable by root only
[ -s /etc/munge/munge.key ] || { mkdir -p /etc/munge; dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; }
chown -R root:root /etc/munge /run/munge; chmod 700 /etc/munge; chmod 400 /etc/munge/munge.key
stop
munged --force --pid-file="$state/munged.pid" 2>/dev/null || munged --force
[ -f "$state/munged.pid" ] || pgrep -n munged > "$state/munged.pid"
# -c: start without the saved state, so jobs left by an earlier cluster's killed run cannot hold the node busy
slurmctld -c
slurmd
for _ in $(seq 1 30); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE '^idle'; then
    echo "slurm up: $(sinfo -h -o '%P %D %c %m %T')"
    exit 0
  fi
  sleep 1
done
echo "slurm did not come up; see /var/log/slurm/*.log" >&2
tail -n 5 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
