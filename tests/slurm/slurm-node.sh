#!/usr/bin/env bash
# One container of scripts/slurm.sh's cluster, under the image's byoc-init (PID 1: it reaps and
# forwards signals):
#   slurm-node controller   munged, then slurmctld in the foreground
#   slurm-node node         munged, sshd (the image's dev mode without Jupyter, for horovodrun
#                           inside an allocation), then slurmd in the foreground
# The munge key, slurm.conf and cgroup.conf come read-only from /etc/byoc-slurm (`slurm.sh up`).
set -euo pipefail
role=${1:-}
conf=/etc/byoc-slurm
say() { echo "slurm-node: $*" >&2; }
if ! [ -r "$conf/munge.key" ] || ! [ -r "$conf/slurm.conf" ]; then
    say "error: $conf/munge.key and $conf/slurm.conf are needed (scripts/slurm.sh up)"
    exit 2
fi

# munged refuses a key that others may read or that another user owns.
install -o munge -g munge -m 0400 "$conf/munge.key" /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
runuser -u munge -- /usr/sbin/munged
ln -sf "$conf/slurm.conf" /etc/slurm/slurm.conf
ln -sf "$conf/cgroup.conf" /etc/slurm/cgroup.conf

case $role in
    controller)
        install -d -m 0755 /var/spool/slurmctld
        exec /usr/sbin/slurmctld -D
        ;;
    node)
        install -d -m 0755 /var/spool/slurmd
        # sshd (for horovodrun in an allocation) must be up before slurmd takes jobs.
        python -m byoc.dev &
        for _ in $(seq 60); do
            (exec 3<>/dev/tcp/127.0.0.1/22) 2>/dev/null && break
            kill -0 $! 2>/dev/null || { say "error: sshd (python -m byoc.dev) did not start"; exit 1; }
            sleep 0.5
        done
        exec /usr/sbin/slurmd -D
        ;;
    *)
        say "error: the role is controller or node, not '$role'"
        exit 2
        ;;
esac
