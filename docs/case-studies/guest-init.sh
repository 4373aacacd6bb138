#!/bin/busybox sh
# PID 1 of a case-study VM (see reproduce.sh): load the virtio block driver
# and pfprof.ko, swap on the disk with serial "swap", describe the machine,
# run /experiment in /results, and write /results as a tar archive onto the
# disk with serial "results" for reproduce.sh to unpack. Then power off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /tmp /results && mount -t tmpfs tmpfs /tmp

fail() { echo "PFPROF-CASE-FAILED $*"; poweroff -f; }

# The virtio disk whose serial is $1 (the order of vda, vdb is not promised).
disk() {
	for s in /sys/block/vd*/serial; do
		[ "$(cat "$s")" = "$1" ] && { echo "/dev/$(basename "$(dirname "$s")")"; return 0; }
	done
	return 1
}

# In the order of modules.dep: each after what it needs.
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk; do
	insmod "/modules/$m.ko" || fail "insmod $m"
done
insmod /pfprof.ko || fail "insmod pfprof.ko"
# The disks appear asynchronously after the driver probes them.
for _ in 1 2 3 4 5 6 7 8 9 10; do disk results >/dev/null && disk swap >/dev/null && break; sleep 1; done
swap=$(disk swap) || fail "no disk with serial swap"
results=$(disk results) || fail "no disk with serial results"
mkswap "$swap" >/dev/null && swapon "$swap" || fail "swap on $swap"

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
{ sh /experiment; echo "exit $?"; } 2>&1 | tee experiment.log
grep '^cpu ' /proc/stat >>cpu-stat.txt
grep -E '^(pgmajfault|pswpin|pswpout|pgfault|workingset_refault_anon|workingset_refault_file|pgscan_kswapd|pgscan_direct) ' /proc/vmstat >vmstat.txt
# The whole guest's memory stall (PSI totals, µs) after the run.
cat /proc/pressure/memory >pressure.txt 2>/dev/null

tar cf "$results" . && sync || fail "writing the results to $results"
echo "PFPROF-RESULTS-WRITTEN"
poweroff -f
