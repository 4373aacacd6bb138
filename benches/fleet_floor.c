// The floor of a fleet monitor's cost (docs/benchmarks.md, "A thousand targets"): the
// least one cgroup target needs each period, every file held open and read with one
// pread() from offset 0, nothing parsed: its cgroup.procs (who is inside), cgroup.stat
// (cgroups below), its process's /proc/PID/stat and CPU clock, and its memory.pressure.
// The monitor reads what these do, and more.
//
//   fleet_floor DIR ROUNDS PAUSE_MS
//
// DIR holds the targets t1, t2, ... (benches/fleet_scale.sh makes them), each with one
// process. Prints the CPU this process took a target a round (getrusage), and what that
// is at one round a second: a share of one CPU.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

struct target {
	int procs, stat, pressure, pid_stat;
	clockid_t clock;
};

static double cpu_seconds(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
	       (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/* Target number `i` below `top`, opened; 0 once there is none. */
static int open_target(const char *top, int i, struct target *t)
{
	char path[4096], buf[64];
	snprintf(path, sizeof path, "%s/t%d", top, i);
	int dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return 0;
	t->procs = openat(dir, "cgroup.procs", O_RDONLY | O_CLOEXEC);
	t->stat = openat(dir, "cgroup.stat", O_RDONLY | O_CLOEXEC);
	t->pressure = openat(dir, "memory.pressure", O_RDONLY | O_CLOEXEC);
	close(dir);
	ssize_t got = pread(t->procs, buf, sizeof buf - 1, 0);
	if (got <= 0 || t->stat < 0 || t->pressure < 0)
		return 0;
	buf[got] = 0;
	int pid = atoi(buf);
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	t->pid_stat = open(path, O_RDONLY | O_CLOEXEC);
	return t->pid_stat >= 0 && clock_getcpuclockid(pid, &t->clock) == 0;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: fleet_floor DIR N ROUNDS PAUSE_MS\n");
		return 2;
	}
	int want = atoi(argv[2]), rounds = atoi(argv[3]), pause_ms = atoi(argv[4]);
	int n = 0, cap = 64;
	struct target *targets = malloc(cap * sizeof *targets);
	for (;;) {
		if (n == cap)
			targets = realloc(targets, (cap *= 2) * sizeof *targets);
		if (!targets)
			return 1;
		if (!open_target(argv[1], n + 1, &targets[n]))
			break;
		n++;
	}
	/* A floor of fewer targets than the monitor's is no floor of its. */
	if (n != want || rounds <= 0) {
		fprintf(stderr, "fleet_floor: %d of %d targets opened below %s\n",
			n, want, argv[1]);
		return 1;
	}
	char buf[8192];
	struct timespec ts;
	double spent = 0;
	for (int r = 0; r < rounds; r++) {
		usleep(pause_ms * 1000);
		double before = cpu_seconds();
		for (int i = 0; i < n; i++) {
			struct target *t = &targets[i];
			if (pread(t->procs, buf, sizeof buf, 0) < 0 ||
			    pread(t->stat, buf, sizeof buf, 0) < 0 ||
			    pread(t->pid_stat, buf, sizeof buf, 0) < 0 ||
			    clock_gettime(t->clock, &ts) != 0 ||
			    pread(t->pressure, buf, sizeof buf, 0) < 0)
				return 1;
		}
		spent += cpu_seconds() - before;
	}
	printf("%.1f %.2f\n", spent / rounds / n * 1e6, spent / rounds * 100);
	return 0;
}
