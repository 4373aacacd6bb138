#!/bin/busybox sh
# PID 1 of a case-study VM (see reproduce.sh): load the virtio block driver
# and pfprof.ko, swap on the first virtio disk, describe the machine, run
# /experiment in /results, and print /results as a base64 tar between
# markers on the console for reproduce.sh to unpack. Then power off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /tmp /results && mount -t tmpfs tmpfs /tmp

fail() { echo "PFPROF-CASE-FAILED $*"; poweroff -f; }

# In the order of modules.dep: each after what it needs.
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk; do
	insmod "/modules/$m.ko" || fail "insmod $m"
done
insmod /pfprof.ko || fail "insmod pfprof.ko"
# The disk appears asynchronously after the driver probes it.
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -b /dev/vda ] && break; sleep 1; done
mkswap /dev/vda >/dev/null && swapon /dev/vda || fail "swap on /dev/vda"

cd /results || fail "no /results"
{
	echo "kernel $(uname -r)"
	echo "cpus $(grep -c ^processor /proc/cpuinfo)"
	grep -E '^(MemTotal|MemAvailable|SwapTotal):' /proc/meminfo
	echo "page-cluster $(cat /proc/sys/vm/page-cluster) swappiness $(cat /proc/sys/vm/swappiness)"
	echo "pfprof period_ms $(cat /sys/module/pfprof/parameters/period_ms 2>/dev/null)"
} >machine.txt
cat machine.txt

# The whole guest's CPU time (user, nice, system, idle, iowait, ...) around
# the run: where the time went that the profiled processes did not use.
grep '^cpu ' /proc/stat >cpu-stat.txt
sh /experiment >experiment.log 2>&1
echo "exit $?" >>experiment.log
grep '^cpu ' /proc/stat >>cpu-stat.txt
cat experiment.log
grep -E '^(pgmajfault|pswpin|pswpout|pgfault) ' /proc/vmstat >vmstat.txt

echo "PFPROF-RESULTS-BEGIN"
tar czf - . | base64
echo "PFPROF-RESULTS-END"
poweroff -f
