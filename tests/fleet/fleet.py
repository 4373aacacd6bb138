#!/usr/bin/env python3
"""pfprof's exporters and cgroup targets against real servers on this machine: Debian's
Prometheus scraping --prometheus (with the repository's scrape config and rules),
VictoriaMetrics receiving --otlp, a fleet of three monitors in network namespaces, bad
input, and a cgroup target started by the repository's systemd unit. Every number is
checked exactly against an independent source: the CSV the same monitor wrote, or the
processes' own /proc counters. Run by tests/fleet/run.sh, which builds and provides what
this needs.

    fleet.py --monitor BIN --work BIN --vm-root ROOT [FILTER...]
"""

import argparse
import gzip
import http.server
import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO, "deploy")
# The PATH systemd gives a service (systemd.exec(5)), where the unit finds `pfprof`.
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# How long anything that should happen may take before the test fails, not hangs.
PATIENCE = 60.0


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def wait_until(what, probe, timeout=PATIENCE, every=0.2):
    """Polls probe() until it says yes: it returns a truth, or (truth, what it saw). Fails
    after timeout, saying what it saw last."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        ok, seen = result if isinstance(result, tuple) else (result, result)
        if ok:
            return seen
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {timeout:.0f} s waiting for {what} (last seen: {seen!r})")
        time.sleep(every)


def final_values_stored(query, want, what):
    """The monitor exits once it has answered the scrape with its final values, which
    Prometheus stores a moment after: query() comes to equal want (it never moves past
    it: the totals only grow to their final values), or the test fails with what it saw."""
    wait_until(f"Prometheus to store {what} {want}", lambda: (lambda got: (got == want, got))(query()),
               timeout=15)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, headers=None, timeout=5):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return answer.read().decode()


def finished(process, what, timeout=PATIENCE * 2):
    """Waits for a process started by a test; kills it and fails if it hangs."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise Failure(f"{what} did not end within {timeout:.0f} s:\n{err}")
    return process.returncode, out, err


def csv_lines(path):
    """A monitor's CSV lines after its `# pfprof {...}` metadata line: the header first."""
    with open(path) as f:
        return [line for line in f.read().splitlines() if not line.startswith("#")]


def csv_totals(path):
    """(minor, major, rows) of a monitor's CSV."""
    lines = csv_lines(path)
    header = lines[0].split(",") if lines else []
    check(header[:4] == ["time_ms", "mono_ns", "minor", "major"], f"bad CSV header in {path}: {header}")
    rows = [line.split(",") for line in lines[1:]]
    return sum(int(r[2]) for r in rows), sum(int(r[3]) for r in rows), len(rows)


def csv_rows(path):
    """A monitor's CSV as one dict a row, its empty cells None."""
    lines = csv_lines(path)
    header = lines[0].split(",")
    return [{k: (int(v) if v and k != "cpu_util" else float(v) if v else None)
             for k, v in zip(header, line.split(","))} for line in lines[1:]]


def judged_stall_seconds(rows):
    """(some, full) memory stall of the rows, seconds, as the verdict judges it: each row's
    cgroup's when it has one, else the system's; None without PSI."""
    totals = [0, 0]
    judged = False
    for r in rows:
        scope = "cgroup_" if r["cgroup_stall_some_us"] is not None and r["cgroup_stall_full_us"] is not None else ""
        if r[f"{scope}stall_some_us"] is None or r[f"{scope}stall_full_us"] is None:
            continue
        judged = True
        totals[0] += r[f"{scope}stall_some_us"]
        totals[1] += r[f"{scope}stall_full_us"]
    return (totals[0] / 1e6, totals[1] / 1e6) if judged else None


def thrashing_bands(stderr):
    """How many thrashing bands the summary reports."""
    return len(re.findall(r"(?m)^  thrashing +from ", stderr))


def close_to(got, want):
    return got is not None and abs(got - want) <= 1e-9 + 1e-9 * abs(want)


def dashboard_exprs():
    """(panel title, expr) of every query of deploy/grafana's dashboard, its variables
    made what "All" selects and its intervals what Grafana would make them at a 1 s
    scrape interval."""
    with open(os.path.join(DEPLOY, "grafana", "pfprof-dashboard.json")) as f:
        dashboard = json.load(f)
    substitutions = {"$__rate_interval": "1m", "$__range": "5m", "$host": ".*", "$target": ".*"}
    exprs = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in substitutions.items():
                expr = expr.replace(variable, value)
            check("$" not in expr, f"panel {panel['title']!r}: an unknown variable in {expr}")
            exprs.append((panel["title"], expr))
    check(exprs, "the dashboard has no panel")
    return exprs


def rusage_minor(stderr):
    m = re.search(r"command rusage\s+(\d+) minor, (\d+) major", stderr)
    check(m, f"no command rusage in the summary:\n{stderr}")
    return int(m.group(1)), int(m.group(2))


def proc_faults(pid):
    """A process's own and reaped children's faults, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command: state is fields[0]; minflt, cminflt, majflt, cmajflt are 7..10.
    return {
        "state": fields[0],
        "minor": int(fields[7]) + int(fields[8]),
        "major": int(fields[9]) + int(fields[10]),
    }


class Prometheus:
    """Debian's Prometheus on loopback with the repository's config and rules: the scrape
    interval made 1 s (only that line), targets written to its file_sd directory."""

    def __init__(self, targets):
        self.dir = tempfile.mkdtemp(prefix="pfprof-prometheus-")
        config = os.path.join(self.dir, "prometheus.yml")
        shutil.copy(os.path.join(DEPLOY, "prometheus", "pfprof-rules.yml"), self.dir)
        with open(os.path.join(DEPLOY, "prometheus", "prometheus.yml")) as f:
            text = f.read()
        text, n = re.subn(r"(?m)^(  (scrape|evaluation)_interval:) 15s$", r"\1 1s", text)
        check(n == 2, "deploy/prometheus/prometheus.yml no longer sets both intervals to 15s")
        with open(config, "w") as f:
            f.write(text)
        os.mkdir(os.path.join(self.dir, "pfprof-targets"))
        for host, addr in targets:
            with open(os.path.join(self.dir, "pfprof-targets", f"{host}.yml"), "w") as f:
                f.write(f"- targets: ['{addr}']\n  labels: {{host: {host}}}\n")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={self.dir}/data",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until("Prometheus to be ready", self.ready)

    def ready(self):
        if self.process.poll() is not None:
            raise Failure(f"Prometheus exited: {self.log_text()}")
        try:
            return http_get(self.url + "/-/ready").startswith("Prometheus")
        except OSError:
            return False

    def log_text(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-3000:]

    def query(self, expr):
        """{labels-without-__name__ as a frozenset: value} of an instant query."""
        url = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        answer = json.loads(http_get(url))
        check(answer["status"] == "success", f"{expr}: {answer}")
        return {
            frozenset((k, v) for k, v in r["metric"].items() if k != "__name__"): float(r["value"][1])
            for r in answer["data"]["result"]
        }

    def one(self, expr):
        """The value of a query that must match one series, None while it matches none."""
        result = self.query(expr)
        check(len(result) <= 1, f"{expr} matches {len(result)} series: {result}")
        return next(iter(result.values()), None)

    def close(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class VictoriaMetrics:
    """Debian 13's VictoriaMetrics in its Debian root (tests/vm/debian-root.sh), on
    loopback, taking OTLP with Prometheus naming."""

    def __init__(self, root):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = f"/tmp/pfprof-fleet-vm-{os.getpid()}-{self.port}"
        self.root = root
        script = '. "$0/tests/vm/lib.sh"; vm_in_root "$1" victoria-metrics "${@:2}"'
        self.process = subprocess.Popen(
            [
                "bash", "-c", script, REPO, root,
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-storageDataPath={self.data}",
                "-opentelemetry.usePrometheusNaming",
                "-search.latencyOffset=0s",
                "-loggerLevel=ERROR",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        wait_until("VictoriaMetrics to be ready", self.ready)

    def ready(self):
        if self.process.poll() is not None:
            raise Failure(f"VictoriaMetrics exited: {self.process.stderr.read()}")
        try:
            return http_get(self.url + "/health").strip() == "OK"
        except OSError:
            return False

    def one(self, expr):
        url = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        answer = json.loads(http_get(url))
        check(answer["status"] == "success", f"{expr}: {answer}")
        result = answer["data"]["result"]
        check(len(result) <= 1, f"{expr} matches {len(result)} series: {result}")
        return float(result[0]["value"][1]) if result else None

    def close(self):
        # The server runs below the wrapper (unshare, chroot): its whole session ends
        # before its data is removed, or it may write some back while it flushes.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    os.killpg(self.process.pid, 0)
                except ProcessLookupError:
                    break
                self.process.poll()
                time.sleep(0.1)
            else:
                continue
            break
        self.process.wait()
        shutil.rmtree(self.root + self.data, ignore_errors=True)


def tls_files(scratch):
    """A CA and a certificate for 127.0.0.1 it signed, made by openssl: (ca, cert, key)."""
    ca, ca_key, cert, key, csr, ext = (scratch(n) for n in ("ca.pem", "ca.key", "cert.pem", "cert.key", "cert.csr", "ext"))
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    for argv in (
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "1",
         "-subj", "/CN=pfprof fleet test CA"],
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        ["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
         "-days", "1", "-extfile", ext],
    ):
        r = subprocess.run(argv, capture_output=True, text=True)
        check(r.returncode == 0, f"{' '.join(argv)}:\n{r.stderr}")
    return ca, cert, key


class RecordingCollector:
    """An HTTPS OTLP endpoint on loopback (Python's http.server and ssl) that answers 200
    and records each request: its path, headers (names in lower case) and gzip-decoded
    body."""

    def __init__(self, cert, key):
        requests = self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Scratch:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="pfprof-fleet-")

    def __call__(self, name):
        return os.path.join(self.dir, name)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class Fleet:
    """The tests, each a method named as a sentence."""

    def __init__(self, monitor, work, vm_root):
        self.monitor = monitor
        self.work = work
        self.vm_root = vm_root
        self.cleanups = []

    def defer(self, f):
        self.cleanups.append(f)

    def run_monitor(self, args, netns=None, **kw):
        argv = [self.monitor] + args
        if netns:
            argv = ["ip", "netns", "exec", netns] + argv
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def work_args(self, mib, accesses, iterations, sleep_ms):
        return [self.work, str(mib), "R", str(accesses), str(iterations), "--sleep-ms", str(sleep_ms)]

    # --- the repository's deployment files --------------------------------------------

    def test_the_scrape_config_rules_and_unit_pass_their_own_tools(self):
        d = os.path.join(DEPLOY, "prometheus")
        for argv in (
            ["promtool", "check", "config", "prometheus.yml"],
            ["promtool", "check", "rules", "pfprof-rules.yml"],
            ["promtool", "test", "rules", "pfprof-rules.test.yml"],
        ):
            r = subprocess.run(argv, cwd=d, capture_output=True, text=True)
            check(r.returncode == 0, f"{' '.join(argv)}:\n{r.stdout}{r.stderr}")
        units = tempfile.mkdtemp(prefix="pfprof-unit-")
        self.defer(lambda: shutil.rmtree(units, ignore_errors=True))
        for unit in ("pfprof-monitor@.service", "pfprof-fleet.service"):
            shutil.copy(os.path.join(DEPLOY, unit), units)
        # Both run pfprof through /bin/sh; one that named `pfprof` itself would be looked
        # for on systemd's PATH, where this build is.
        verify = ["systemd-analyze", "verify", "--man=no",
                  os.path.join(units, "pfprof-monitor@test.service"), os.path.join(units, "pfprof-fleet.service")]
        r = subprocess.run(self.with_this_pfprof(verify), capture_output=True, text=True)
        # It warns and still exits 0: any word from it is a finding.
        check(r.returncode == 0 and not (r.stdout + r.stderr).strip(), f"systemd-analyze verify:\n{r.stdout}{r.stderr}")

    # --- Prometheus ---------------------------------------------------------------------

    def scraped_run(self, *work):
        """A Prometheus on loopback scraping a `monitor run` of `work` (these arguments),
        its CSV in a scratch directory, once the monitor is scraped up: while it runs, it
        is up and its series carry the documented labels."""
        port = free_port()
        prometheus = Prometheus([("local", f"127.0.0.1:{port}")])
        self.defer(prometheus.close)
        scratch = Scratch()
        self.defer(scratch.close)
        monitor = self.run_monitor(
            ["run", "--backend", "procfs", "-o", scratch("prof.csv"), "--prometheus", f"127.0.0.1:{port}",
             "--linger", "30s", "--"] + self.work_args(*work)
        )
        wait_until("the monitor to be scraped up", lambda: prometheus.one('up{host="local"}') == 1)
        return prometheus, scratch, monitor

    def test_prometheus_scrapes_the_csv_totals_exactly_and_the_histogram_counts_the_rows(self):
        prometheus, scratch, monitor = self.scraped_run(48, 30000, 5, 400)
        code, _, err = finished(monitor, "the monitor")
        check(code == 0, f"monitor exited with {code}:\n{err}")
        check("the last ones with the final values" in err, f"the final values were not scraped:\n{err}")
        minor, major, rows = csv_totals(scratch("prof.csv"))
        check(rusage_minor(err) == (minor, major), f"the CSV ({minor}, {major}) is not the command's rusage:\n{err}")
        # The final values: a range selector skips the staleness marker of the monitor's end.
        selector = 'host="local",target="work",backend="procfs",mode="strict",job="pfprof"'
        def got():
            return {
                "minor": prometheus.one(f'last_over_time(process_paging_faults_total{{{selector},system_paging_fault_type="minor"}}[5m])'),
                "major": prometheus.one(f'last_over_time(process_paging_faults_total{{{selector},system_paging_fault_type="major"}}[5m])'),
                "minor periods": prometheus.one(f'last_over_time(pfprof_period_faults_count{{{selector},system_paging_fault_type="minor"}}[5m])'),
                "major periods": prometheus.one(f'last_over_time(pfprof_period_faults_count{{{selector},system_paging_fault_type="major"}}[5m])'),
                "minor sum": prometheus.one(f'last_over_time(pfprof_period_faults_sum{{{selector},system_paging_fault_type="minor"}}[5m])'),
                "lost": prometheus.one(f"last_over_time(pfprof_samples_lost_total{{{selector}}}[5m])"),
            }
        want = {"minor": minor, "major": major, "minor periods": rows, "major periods": rows, "minor sum": minor, "lost": 0}
        final_values_stored(got, want, "the CSV's totals")
        check(minor > 10000, f"too few faults to tell anything: {minor}")
        # The ended target is no longer exported: its series went stale.
        wait_until("the ended target's series to go stale",
                   lambda: prometheus.one(f'process_paging_faults_total{{{selector},system_paging_fault_type="minor"}}') is None)
        # The repository's rules are loaded and evaluated without error.
        def rules_healthy():
            groups = json.loads(http_get(prometheus.url + "/api/v1/rules"))["data"]["groups"]
            rules = [r for g in groups if g["name"] == "pfprof" for r in g["rules"]]
            return len(rules) == 2 and all(r["health"] == "ok" for r in rules), rules
        wait_until("the pfprof rules to be evaluated", rules_healthy)

    def test_every_dashboard_panel_has_data_and_memory_stall_verdict_and_build_are_the_csvs(self):
        started = time.time()
        prometheus, scratch, monitor = self.scraped_run(48, 30000, 30, 500)
        # While it runs (about 15 s), every panel of the dashboard shows something.
        for title, expr in dashboard_exprs():
            wait_until(f"panel {title!r} to have data: {expr}",
                       lambda expr=expr: (lambda r: (len(r) > 0, r))(prometheus.query(expr)), timeout=20)
            check(monitor.poll() is None, f"the monitor ended before panel {title!r} was checked: too slow a machine")
        code, _, err = finished(monitor, "the monitor")
        ended = time.time()
        check(code == 0, f"monitor exited with {code}:\n{err}")
        rows = csv_rows(scratch("prof.csv"))
        last = rows[-1]
        stall = judged_stall_seconds(rows)
        check(stall is not None, "this machine has no PSI: the stall and the verdict cannot be checked")
        selector = f'host="local",target="work",backend="procfs",mode="strict",monitor_pid="{monitor.pid}"'
        def final(name, extra=""):
            return prometheus.one(f"last_over_time({name}{{{selector}{extra}}}[5m])")
        def got():
            return {
                "anon": final("process_memory_usage_bytes", ',pfprof_memory_type="anon"'),
                "file": final("process_memory_usage_bytes", ',pfprof_memory_type="file"'),
                "shmem": final("process_memory_usage_bytes", ',pfprof_memory_type="shmem"'),
                "swap": final("pfprof_memory_swap_bytes"),
                "thrashing": final("pfprof_thrashing"),
                "episodes": final("pfprof_thrashing_episodes_total"),
                "build": final("pfprof_build_info", ',version=~"[0-9].+"'),
            }
        want = {"anon": last["rss_anon"], "file": last["rss_file"], "shmem": last["rss_shmem"], "swap": last["swap"],
                "thrashing": 0, "episodes": thrashing_bands(err), "build": 1}
        final_values_stored(got, want, "the CSV's last memory, the summary's verdict and the build")
        for stall_type, seconds in zip(("some", "full"), stall):
            value = final("pfprof_memory_stall_seconds_total", f',pfprof_stall_type="{stall_type}"')
            check(close_to(value, seconds), f"{stall_type} stall: {value} s exported, the CSV's rows sum to {seconds} s")
        check(max(r["rss_anon"] for r in rows) > 40 << 20, "work's 48 MiB never showed in the rows")
        # When the final values were posted: Unix seconds within the run.
        updated = final("pfprof_last_update_timestamp_seconds")
        check(updated is not None and started <= updated <= ended,
              f"the last update at {updated}, not within the run ({started} to {ended})")

    def test_each_mappings_and_programs_series_holds_all_its_faults_a_hostile_files_name_intact(self):
        """Scraped by Prometheus and pushed to VictoriaMetrics at once. The interval (5 s)
        is longer than the command's run: every fault is in one burst inside one interval,
        and a series named at its end still holds all of them."""
        port = free_port()
        prometheus = Prometheus([("local", f"127.0.0.1:{port}")])
        self.defer(prometheus.close)
        vm = VictoriaMetrics(self.vm_root)
        self.defer(vm.close)
        scratch = Scratch()
        self.defer(scratch.close)
        # On the repository's disk (a tmpfs keeps its pages: --evict would not make the
        # later sweeps major), named to break out of a label: a quote, a backslash, a newline.
        files = tempfile.mkdtemp(prefix="fleet-mapping-", dir=os.path.join(REPO, "target"))
        self.defer(lambda: shutil.rmtree(files, ignore_errors=True))
        textfiles = scratch("textfiles")
        os.mkdir(textfiles)
        # The file's series are in the textfile from the end only (the interval is longer
        # than the run), and the textfile goes once Prometheus and the collector have the
        # final values: a second scraper, which never comes, keeps it the linger for this
        # test to read.
        monitor = self.run_monitor(
            ["run", "--backend", "procfs", "-o", "/dev/null", "--interval", "5s", "--summary", scratch("run.json"),
             "--prometheus", f"127.0.0.1:{port}", "--textfile", textfiles, "--linger-scrapers", "2",
             "--otlp", f"{vm.url}/opentelemetry/v1/metrics", "--linger", "10s", "--",
             self.work, "48", "R", "30000", "4", "--sleep-ms", "300", "--evict", "--file",
             os.path.join(files, 'db "x\\y\nz')]
        )
        wait_until("the monitor to be scraped up", lambda: prometheus.one('up{host="local"}') == 1)
        # The classic text with the file's series parses (node_exporter's parser is promtool's).
        path = os.path.join(textfiles, f"pfprof-work-{monitor.pid}.prom")
        def with_the_file():
            try:
                with open(path) as f:
                    text = f.read()
            except FileNotFoundError:
                return False, None
            return 'mapping_kind="shared"' in text, text
        text = wait_until("the file's series in the textfile", with_the_file, every=0.05)
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        check("error while linting" not in r.stderr and "text format parsing error" not in (r.stdout + r.stderr),
              f"promtool cannot parse the textfile:\n{r.stdout}{r.stderr}\n{text}")
        code, _, err = finished(monitor, "the monitor")
        check(code == 0, f"monitor exited with {code}:\n{err}")
        with open(scratch("run.json")) as f:
            summary = json.load(f)
        notes = "\n".join(summary["notes"])
        check("the last ones with the final values" in notes, f"the final values were not scraped:\n{notes}")
        check(re.search(r"otlp: \d+ pushes to \S+ delivered, the last with the final values", notes),
              f"the final values were not pushed:\n{notes}")
        major = summary["where"]["major"]
        name = major["top"][0]["name"]
        # As /proc/PID/maps shows it: the newline as \012.
        check(name.endswith('db "x\\y\\012z'), f"the file's mapping is not the top one: {major}")
        on_the_file = major["top"][0]["major"]
        everything = major["recorded"] + major["lost"]
        programs = summary["where"]["programs"]
        check(programs and programs[0]["comm"] == "work", f"work is not the first program: {programs}")
        selector = 'host="local",target="work",job="pfprof"'
        def got():
            by_mapping = prometheus.query(f"last_over_time(pfprof_mapping_faults_total{{{selector}}}[5m])")
            on_file = [v for labels, v in by_mapping.items()
                       if ("mapping", name) in labels and ("mapping_kind", "shared") in labels]
            by_program = prometheus.query(f"last_over_time(pfprof_program_faults_total{{{selector}}}[5m])")
            work = [v for labels, v in by_program.items() if ("program", "work") in labels]
            return {"all by mapping": sum(by_mapping.values()), "on the file": on_file,
                    "all by program": sum(by_program.values()), "work's at least the file's": work[0] >= on_the_file if work else None}
        want = {"all by mapping": everything, "on the file": [on_the_file],
                "all by program": everything, "work's at least the file's": True}
        final_values_stored(got, want, "every major fault recorded or lost under a mapping and a program, all the file's its own")
        # The same series over OTLP.
        vm_selector = 'target="work",backend="procfs",service_name="pfprof"'
        for expr, want in {
            f"sum(last_over_time(pfprof_mapping_faults_total{{{vm_selector}}}[10m]))": everything,
            f'last_over_time(pfprof_mapping_faults_total{{{vm_selector},mapping_kind="shared",mapping=~".*db.*"}}[10m])': on_the_file,
            f"sum(last_over_time(pfprof_program_faults_total{{{vm_selector}}}[10m]))": everything,
        }.items():
            def latest(expr=expr, want=want):
                got = vm.one(expr)
                return got == want, got
            wait_until(f"VictoriaMetrics to answer {expr} == {want}", latest, timeout=30)
        check(on_the_file >= 10000, f"too few major faults to tell anything: {major}")

    def test_two_monitors_of_one_command_write_two_textfiles_of_distinct_series(self):
        scratch = Scratch()
        self.defer(scratch.close)
        textfiles = scratch("textfiles")
        os.mkdir(textfiles)
        monitors = [
            self.run_monitor(["run", "--backend", "procfs", "-o", scratch(f"prof{i}.csv"), "--textfile", textfiles,
                              "--linger", "1s", "--"] + self.work_args(16, 5000, 10, 300))
            for i in (1, 2)
        ]
        names = [f"pfprof-work-{m.pid}.prom" for m in monitors]
        wait_until("both textfiles", lambda: (lambda seen: (set(names) <= set(seen), seen))(os.listdir(textfiles)),
                   timeout=10, every=0.05)
        series = []
        for monitor, name in zip(monitors, names):
            with open(os.path.join(textfiles, name)) as f:
                samples = [line.rsplit(" ", 1)[0] for line in f.read().splitlines() if line and not line.startswith("#")]
            check(samples and all(f'monitor_pid="{monitor.pid}"' in s for s in samples), f"{name}:\n{samples}")
            series.append(set(samples))
        check(not series[0] & series[1], f"series in both files: {series[0] & series[1]}")
        for monitor in monitors:
            code, _, err = finished(monitor, "a monitor")
            check(code == 0, f"monitor exited with {code}:\n{err}")
        check(os.listdir(textfiles) == [], f"left behind: {os.listdir(textfiles)}")

    def test_the_textfile_is_replaced_whole_checked_by_promtool_and_removed_at_the_end(self):
        scratch = Scratch()
        self.defer(scratch.close)
        textfiles = scratch("textfiles")
        os.mkdir(textfiles)
        monitor = self.run_monitor(
            ["run", "--backend", "procfs", "-o", scratch("prof.csv"), "--textfile", textfiles,
             "--linger", "2s", "--"] + self.work_args(32, 20000, 8, 300)
        )
        path = os.path.join(textfiles, f"pfprof-work-{monitor.pid}.prom")
        seen = []
        while monitor.poll() is None:
            names = os.listdir(textfiles)
            check(all(n == os.path.basename(path) or n.startswith(".") for n in names), f"stray files: {names}")
            try:
                with open(path) as f:
                    text = f.read()
            except FileNotFoundError:
                text = None
            if text is not None and (not seen or seen[-1] != text):
                r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
                # promtool lints names too; a parse error is what matters here.
                check("error while linting" not in r.stderr and "text format parsing error" not in (r.stdout + r.stderr),
                      f"promtool cannot parse the textfile:\n{r.stdout}{r.stderr}\n{text}")
                check(re.search(r"(?m)^\S+\{[^}]*\} \S+ \d+$", text) is None, f"a sample has a timestamp:\n{text}")
                seen.append(text)
            time.sleep(0.05)
        code, _, err = finished(monitor, "the monitor")
        check(code == 0, f"monitor exited with {code}:\n{err}")
        check(len(seen) >= 3, f"the textfile changed only {len(seen)} times while the profile ran")
        minor, _, rows = csv_totals(scratch("prof.csv"))
        final = re.search(r'(?m)^process_paging_faults_total\{[^}]*system_paging_fault_type="minor"[^}]*\} (\d+)$', seen[-1])
        check(final and int(final.group(1)) == minor, f"the last textfile does not have the CSV's {minor} minor faults:\n{seen[-1]}")
        check(re.search(rf'(?m)^pfprof_period_faults_count\{{[^}}]*"minor"[^}}]*\}} {rows}$', seen[-1]), f"not {rows} periods:\n{seen[-1]}")
        check(os.listdir(textfiles) == [], f"left behind: {os.listdir(textfiles)}")
        check("textfile:" in err and "removed at the end" in err, err)

    # --- VictoriaMetrics over OTLP ------------------------------------------------------

    def test_victoriametrics_receives_the_csv_totals_exactly_over_otlp(self):
        vm = VictoriaMetrics(self.vm_root)
        self.defer(vm.close)
        scratch = Scratch()
        self.defer(scratch.close)
        started = time.time()
        monitor = self.run_monitor(
            ["run", "--backend", "procfs", "-o", scratch("prof.csv"), "--interval", "500ms",
             "--otlp", f"{vm.url}/opentelemetry/v1/metrics", "--linger", "30s", "--"]
            + self.work_args(48, 30000, 5, 400)
        )
        code, _, err = finished(monitor, "the monitor")
        ended = time.time()
        check(code == 0, f"monitor exited with {code}:\n{err}")
        check(re.search(r"otlp: \d+ pushes to \S+ delivered, the last with the final values", err), err)
        minor, major, rows = csv_totals(scratch("prof.csv"))
        check(rusage_minor(err) == (minor, major), f"the CSV is not the command's rusage:\n{err}")
        selector = 'target="work",backend="procfs",mode="strict",service_name="pfprof"'
        expected = {
            f'process_paging_faults_total{{{selector},system_paging_fault_type="minor"}}': minor,
            f'process_paging_faults_total{{{selector},system_paging_fault_type="major"}}': major,
            f'pfprof_period_faults_count{{{selector},system_paging_fault_type="minor"}}': rows,
            f'pfprof_period_faults_count{{{selector},system_paging_fault_type="major"}}': rows,
            f'pfprof_period_faults_bucket{{{selector},system_paging_fault_type="minor",le="+Inf"}}': rows,
            f'pfprof_period_faults_sum{{{selector},system_paging_fault_type="minor"}}': minor,
        }
        for expr, want in expected.items():
            # Pushed data becomes searchable within seconds; the last push has the totals.
            def latest(expr=expr, want=want):
                got = vm.one(f"last_over_time({expr}[10m])")
                return got == want, got
            wait_until(f"VictoriaMetrics to answer {expr} == {want}", latest, timeout=30)
        last = csv_rows(scratch("prof.csv"))[-1]
        for expr, want in {
            f'process_memory_usage_bytes{{{selector},pfprof_memory_type="anon"}}': last["rss_anon"],
            f'process_memory_usage_bytes{{{selector},pfprof_memory_type="file"}}': last["rss_file"],
            f"pfprof_memory_swap_bytes{{{selector}}}": last["swap"],
            f"pfprof_thrashing{{{selector}}}": 0,
            f"pfprof_thrashing_episodes_total{{{selector}}}": thrashing_bands(err),
            f'pfprof_build_info{{{selector},version=~"[0-9].+"}}': 1,
        }.items():
            check(vm.one(f"last_over_time({expr}[10m])") == want, f"VictoriaMetrics: {expr} is not {want}")
        # The OTLP gauge under the name /metrics gives it: Unix seconds within the run.
        updated = vm.one(f"last_over_time(pfprof_last_update_timestamp_seconds{{{selector}}}[10m])")
        check(updated is not None and started <= updated <= ended,
              f"VictoriaMetrics: the last update at {updated}, not within the run ({started} to {ended})")
        stall = judged_stall_seconds(csv_rows(scratch("prof.csv")))
        check(stall is not None, "this machine has no PSI: the stall cannot be checked")
        for stall_type, seconds in zip(("some", "full"), stall):
            got = vm.one(f'last_over_time(pfprof_memory_stall_seconds_total{{{selector},pfprof_stall_type="{stall_type}"}}[10m])')
            check(close_to(got, seconds), f"VictoriaMetrics: {stall_type} stall {got} s, the CSV's {seconds} s")

    def test_victoriametrics_takes_gzip_pushes_with_headers_and_labels_them_with_the_resource(self):
        vm = VictoriaMetrics(self.vm_root)
        self.defer(vm.close)
        scratch = Scratch()
        self.defer(scratch.close)
        # Everything from the standard variables but a header: the base URL completed
        # with /v1/metrics, gzip, headers from both places, the service and an attribute.
        env = dict(os.environ,
                   OTEL_EXPORTER_OTLP_ENDPOINT=f"{vm.url}/opentelemetry/",
                   OTEL_EXPORTER_OTLP_COMPRESSION="gzip",
                   OTEL_EXPORTER_OTLP_HEADERS="X-Scope-OrgID=fleet,X-Note=a%20b",
                   OTEL_SERVICE_NAME="pfprof-fleet",
                   OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=fleet-test")
        monitor = self.run_monitor(
            ["run", "--backend", "procfs", "-o", scratch("prof.csv"), "--interval", "500ms",
             "--otlp", "--otlp-header", "Authorization=Bearer fleet-token", "--linger", "30s", "--"]
            + self.work_args(24, 20000, 4, 300),
            env=env,
        )
        code, _, err = finished(monitor, "the monitor")
        check(code == 0, f"monitor exited with {code}:\n{err}")
        check(re.search(rf"otlp: \d+ pushes to {re.escape(vm.url)}/opentelemetry/v1/metrics delivered, the last with the final values", err), err)
        minor, _, _ = csv_totals(scratch("prof.csv"))
        resource = (f'service_name="pfprof-fleet",deployment_environment_name="fleet-test",os_type="linux",'
                    f'process_pid="{monitor.pid}",process_executable_name="monitor",host_name="{socket.gethostname()}"')
        expr = f'process_paging_faults_total{{target="work",{resource},system_paging_fault_type="minor"}}'
        wait_until(f"VictoriaMetrics to answer {expr} == {minor}",
                   lambda: (lambda got: (got == minor, got))(vm.one(f"last_over_time({expr}[10m])")), timeout=30)

    def test_an_https_collector_trusted_through_the_certificate_variable_gets_gzip_headers_and_the_resource(self):
        scratch = Scratch()
        self.defer(scratch.close)
        ca, cert, key = tls_files(scratch)
        collector = RecordingCollector(cert, key)
        self.defer(collector.close)
        # METRICS_ENDPOINT is used as given, whatever its path.
        env = dict(os.environ,
                   OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=f"https://127.0.0.1:{collector.port}/ingest/otlp",
                   OTEL_EXPORTER_OTLP_CERTIFICATE=ca,
                   OTEL_EXPORTER_OTLP_METRICS_HEADERS="x-tenant=t1")
        code, err = self.profile_with(["--otlp", "--otlp-compression", "gzip", "--otlp-header", "Authorization=Bearer s3cret",
                                       "--linger", "10s"], scratch, seconds_at_most=20, env=env)
        check(code == 0, f"exit {code}:\n{err}")
        check("the last with the final values" in err, err)
        check(collector.requests, "the collector recorded nothing")
        for path, headers, body in collector.requests:
            check(path == "/ingest/otlp", f"pushed to {path}")
            check(headers.get("content-encoding") == "gzip" and headers.get("content-type") == "application/x-protobuf"
                  and headers.get("authorization") == "Bearer s3cret" and headers.get("x-tenant") == "t1", f"headers: {headers}")
            for field in (b"process.paging.faults", b"https://opentelemetry.io/schemas/1.38.0", b"service.name", b"pfprof",
                          b"process.pid", b"process.command_line", b"Authorization=<redacted>"):
                check(field in body, f"{field!r} not in the decoded body")
            check(b"s3cret" not in body, "the header's token is in the resource")
        # Without the CA the collector is not trusted: nothing arrives, and the exit status
        # and the summary say so.
        pushed = len(collector.requests)
        del env["OTEL_EXPORTER_OTLP_CERTIFICATE"]
        code, err = self.profile_with(["--otlp", "--linger", "2s"], scratch, seconds_at_most=15, env=env)
        check(code == 3 and re.search(r"last error: .*(UnknownIssuer|certificate)", err), f"exit {code}:\n{err}")
        check(len(collector.requests) == pushed, "an untrusted push was recorded")

    # --- a fleet of three -------------------------------------------------------------

    def netns(self, i):
        name = f"pfprof-fleet-{os.getpid()}-{i}"
        host, peer = f"pff{i}h{os.getpid() % 10000}", f"pff{i}n{os.getpid() % 10000}"
        subnet = f"10.213.{i}"
        steps = [
            ["ip", "netns", "add", name],
            ["ip", "link", "add", host, "type", "veth", "peer", "name", peer],
            ["ip", "link", "set", peer, "netns", name],
            ["ip", "addr", "add", f"{subnet}.1/24", "dev", host],
            ["ip", "link", "set", host, "up"],
            ["ip", "netns", "exec", name, "ip", "addr", "add", f"{subnet}.2/24", "dev", peer],
            ["ip", "netns", "exec", name, "ip", "link", "set", peer, "up"],
            ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
        ]
        self.defer(lambda: subprocess.run(["ip", "netns", "del", name], capture_output=True))
        self.defer(lambda: subprocess.run(["ip", "link", "del", host], capture_output=True))
        for step in steps:
            r = subprocess.run(step, capture_output=True, text=True)
            check(r.returncode == 0, f"{' '.join(step)}: {r.stderr}")
        return name, f"{subnet}.2:9464"

    def test_a_fleet_of_three_is_scraped_with_each_hosts_own_totals_and_a_killed_monitor_shows_down(self):
        hosts = [(f"host{i}",) + self.netns(i) for i in (1, 2, 3)]
        prometheus = Prometheus([(host, addr) for host, _, addr in hosts])
        self.defer(prometheus.close)
        scratch = Scratch()
        self.defer(scratch.close)
        monitors = {}
        for (host, ns, addr), mib in zip(hosts, (24, 40, 56)):
            # host2's runs long: it is killed while the others still run.
            iterations = 60 if host == "host2" else 20
            monitors[host] = self.run_monitor(
                ["run", "--backend", "procfs", "-o", scratch(f"{host}.csv"), "--prometheus", addr,
                 "--linger", "30s", "--"] + self.work_args(mib, 20000, iterations, 500),
                netns=ns,
                start_new_session=True,
            )
        for host, _, _ in hosts:
            wait_until(f"{host} to be scraped up", lambda h=host: prometheus.one(f'up{{host="{h}"}}') == 1)
        # Killed mid-run with its command: no final values, no summary.
        os.killpg(monitors["host2"].pid, signal.SIGKILL)
        finished(monitors["host2"], "the killed monitor")
        wait_until("host2 to show down while host1 and host3 are up",
                   lambda: (prometheus.query('up{job="pfprof"}') == {
                       frozenset({("host", h), ("instance", a), ("job", "pfprof")}): float(h != "host2")
                       for h, _, a in hosts
                   }, prometheus.query('up{job="pfprof"}')))
        for host in ("host1", "host3"):
            code, _, err = finished(monitors[host], f"{host}'s monitor")
            check(code == 0, f"{host}: monitor exited with {code}:\n{err}")
            check("the last ones with the final values" in err, f"{host}: the final values were not scraped:\n{err}")
            minor, major, rows = csv_totals(scratch(f"{host}.csv"))
            final_values_stored(lambda h=host: (
                prometheus.one(f'last_over_time(process_paging_faults_total{{host="{h}",system_paging_fault_type="minor"}}[5m])'),
                prometheus.one(f'last_over_time(process_paging_faults_total{{host="{h}",system_paging_fault_type="major"}}[5m])'),
                prometheus.one(f'last_over_time(pfprof_period_faults_count{{host="{h}",system_paging_fault_type="minor"}}[5m])'),
            ), (minor, major, rows), f"{host}'s CSV totals")
        # What host2 sent before it was killed is kept, below what it would have reached.
        killed = prometheus.one('last_over_time(process_paging_faults_total{host="host2",system_paging_fault_type="minor"}[5m])')
        check(killed is not None and killed > 0, f"host2's series before the kill: {killed}")

    # --- bad input ----------------------------------------------------------------------

    def profile_with(self, options, scratch, seconds_at_most, env=None):
        """A short `monitor run` of work with these options; its exit code, stderr, and
        whether its CSV is complete (the command's rusage)."""
        started = time.monotonic()
        monitor = self.run_monitor(["run", "--backend", "procfs", "-o", scratch("prof.csv")] + options + ["--"]
                                   + self.work_args(16, 5000, 3, 200), env=env)
        code, _, err = finished(monitor, "the monitor", timeout=seconds_at_most + 30)
        took = time.monotonic() - started
        check(took < seconds_at_most, f"took {took:.1f} s, more than {seconds_at_most} s:\n{err}")
        return code, err

    def test_an_unreachable_or_silent_collector_costs_no_row_and_is_said_in_the_summary_and_exit_status(self):
        scratch = Scratch()
        self.defer(scratch.close)
        # A port nobody listens on, and a collector that accepts and never answers.
        closed = free_port()
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        self.defer(silent.close)
        for url in (f"http://127.0.0.1:{closed}/v1/metrics", f"http://127.0.0.1:{silent.getsockname()[1]}/v1/metrics"):
            # work takes ~0.5 s; the linger 3 s; a push in progress at most 5 s more.
            code, err = self.profile_with(["--otlp", url, "--linger", "3s"], scratch, seconds_at_most=15)
            # Not one push arrived: the exit status says so (3), the summary why.
            check(code == 3, f"{url}: exit {code}:\n{err}")
            check("otlp: the final values were not delivered" in err, f"{url}:\n{err}")
            check("exit status 3: the OTLP collector received none of the pushes" in err, f"{url}:\n{err}")
            minor, major, _ = csv_totals(scratch("prof.csv"))
            check(rusage_minor(err) == (minor, major), f"{url}: the CSV lost rows:\n{err}")

    def test_an_address_in_use_fails_before_the_command_runs(self):
        scratch = Scratch()
        self.defer(scratch.close)
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        self.defer(taken.close)
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        code, err = self.profile_with(["--prometheus", addr], scratch, seconds_at_most=10)
        check(code == 2, f"exit {code}:\n{err}")
        check(f"cannot serve metrics on {addr}" in err and "in use" in err, err)
        check("work:" not in err, f"the command ran:\n{err}")

    def test_an_unwritable_textfile_directory_fails_before_the_command_runs(self):
        scratch = Scratch()
        self.defer(scratch.close)
        readonly = scratch("readonly")
        os.mkdir(readonly)
        # Read-only even for root.
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", readonly], capture_output=True, text=True)
        check(r.returncode == 0, f"mount: {r.stderr}")
        self.defer(lambda: subprocess.run(["umount", readonly]))
        code, err = self.profile_with(["--textfile", readonly], scratch, seconds_at_most=10)
        check(code == 2 and f"cannot write metrics files in {readonly}" in err, f"exit {code}:\n{err}")
        check("work:" not in err, f"the command ran:\n{err}")

    def test_a_path_that_is_not_a_cgroup_and_a_missing_module_are_refused_clearly(self):
        for args, words in (
            (["--cgroup", "/tmp"], "is not a cgroup v2 directory"),
            (["--cgroup", "/nonexistent-pfprof"], "cannot open /nonexistent-pfprof"),
            # The machine running this test has no module loaded (its kernel takes none).
            (["--cgroup", cgroup2_mount(), "--backend", "kernel"], "the pfprof module is not loaded"),
        ):
            code, _, err = finished(self.run_monitor(args), "the monitor", timeout=10)
            check(code == 2 and words in err, f"{args}: exit {code}:\n{err}")

    # --- a cgroup target, started by the repository's unit ---------------------------

    def unit_exec(self, unit, key, instance=""):
        """A unit's `key` (ExecStart, ExecStartPre, ExecStopPost) for `instance`, as
        systemd would run it: continuations joined, %I, %i, %% and $$ resolved; argv."""
        with open(os.path.join(DEPLOY, unit)) as f:
            text = f.read()
        start = re.search(rf"(?m)^{key}=(.*)$", text).start(1)
        line, rest = "", text[start:]
        for piece in rest.splitlines():
            if piece.endswith("\\"):
                line += piece[:-1]
            else:
                line += piece
                break
        escaped = subprocess.run(["systemd-escape", "--", instance], capture_output=True, text=True,
                                 check=True).stdout.strip() if instance else ""
        line = re.sub(r"%([%Ii])", lambda m: {"%": "%", "I": instance, "i": escaped}[m.group(1)], line)
        return shlex.split(line.replace("$$", "$"))

    def with_this_pfprof(self, argv):
        """`argv` with its `pfprof` this build, as /usr/local/bin/pfprof: run in a mount
        namespace of its own where a tmpfs over /usr/local/bin holds it."""
        inner = " ".join(shlex.quote(a) for a in argv)
        setup = (f"mount -t tmpfs tmpfs /usr/local/bin && cp {shlex.quote(self.monitor)} /usr/local/bin/pfprof && "
                 f"exec {inner}")
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", setup]

    def unit_command(self, instance, addr):
        """The template unit's ExecStart for `instance`, as systemd would run it with
        systemd's PATH, its `pfprof` this build."""
        argv = self.with_this_pfprof(self.unit_exec("pfprof-monitor@.service", "ExecStart", instance))
        return argv, dict(os.environ, PFPROF_PROMETHEUS=addr, PATH=SYSTEMD_PATH)

    def test_the_units_remove_a_killed_monitors_textfile_and_nothing_else(self):
        """Each shipped unit with PFPROF_TEXTFILE, as systemd runs it: ExecStartPre, then
        ExecStart, whose monitor is killed (SIGKILL: it removes nothing), then ExecStopPost,
        which systemd runs after any stop. The monitor's file goes; those of other
        monitors (other pids, ours a prefix or a suffix of theirs, a target named with our
        pid) and of others stay. ExecStartPre removes the file a record left by a machine
        that went down names."""
        mount = cgroup2_mount()
        check(mount.startswith("/sys/fs/cgroup"), f"the units expect cgroup2 below /sys/fs/cgroup, not at {mount}")
        top = os.path.join(mount, f"pfprof-units-{os.getpid()}")
        os.makedirs(top)
        self.defer(lambda: os.path.isdir(top) and os.rmdir(top))
        instance = os.path.relpath(top, "/sys/fs/cgroup")
        for unit in ("pfprof-monitor@.service", "pfprof-fleet.service"):
            scratch = Scratch()
            self.defer(scratch.close)
            textfiles, state = scratch("textfiles"), scratch("state")
            os.mkdir(textfiles)
            os.mkdir(state)
            env = dict(os.environ, PATH=SYSTEMD_PATH, STATE_DIRECTORY=state, PFPROF_TEXTFILE=textfiles,
                       PFPROF_PROMETHEUS="", PFPROF_UNDER=top)

            def run(key):
                r = subprocess.run(self.unit_exec(unit, key, instance), env=env, capture_output=True, text=True)
                check(r.returncode == 0 and not r.stderr, f"{unit} {key} exited {r.returncode}:\n{r.stderr}")

            # A record a machine that went down left, of monitor 999999.
            left = os.path.join(textfiles, "pfprof-old-999999.prom")
            open(left, "w").close()
            # Named by the last argument of the unit's commands.
            record_name = self.unit_exec(unit, "ExecStopPost", instance)[-1]
            with open(os.path.join(state, record_name), "w") as f:
                f.write(f"999999\n{textfiles}\n")
            run("ExecStartPre")
            check(os.listdir(state) == [] and not os.path.exists(left),
                  f"{unit}: ExecStartPre left {os.listdir(state)}, {os.listdir(textfiles)}")

            monitor = subprocess.Popen(self.with_this_pfprof(self.unit_exec(unit, "ExecStart", instance)), env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self.defer(lambda monitor=monitor: monitor.poll() is None and (monitor.kill(), monitor.wait()))
            ours = f"-{monitor.pid}.prom"
            written = wait_until(f"{unit}'s monitor to write its textfile",
                                 lambda: (lambda names: (len(names) == 1, names))(
                                     [n for n in os.listdir(textfiles) if n.endswith(ours)]))[0]
            with open(os.path.join(state, record_name)) as f:
                record = f.read()
            check(record == f"{monitor.pid}\n{textfiles}\n", f"{unit} recorded {record!r}, not the monitor's pid")
            stem = written[len("pfprof-"):-len(ours)]
            others = [f"pfprof-{stem}-{monitor.pid}1.prom", f"pfprof-{stem}-1{monitor.pid}.prom",
                      f"pfprof-{stem}-{monitor.pid}-7.prom", f"pfprof-other-{monitor.pid + 1}.prom",
                      f".pfprof-other-{monitor.pid + 1}.prom.tmp", f"node-{monitor.pid}.prom"]
            for name in others:
                open(os.path.join(textfiles, name), "w").close()
            monitor.kill()
            monitor.wait()
            check(os.path.exists(os.path.join(textfiles, written)), f"{unit}: the killed monitor's file is gone by itself")
            run("ExecStopPost")
            left = sorted(os.listdir(textfiles))
            check(left == sorted(others), f"{unit}: after ExecStopPost {left}, not {sorted(others)}")
            check(os.listdir(state) == [], f"{unit}: the record stays: {os.listdir(state)}")

    def test_a_cgroup_target_counts_exactly_what_its_processes_did_inside(self):
        mount = cgroup2_mount()
        check(mount.startswith("/sys/fs/cgroup"), f"the unit expects cgroup2 below /sys/fs/cgroup, not at {mount}")
        name = f"pfprof-fleet-{os.getpid()}"
        top = os.path.join(mount, name)
        os.makedirs(os.path.join(top, "inner"))
        instance = os.path.relpath(top, "/sys/fs/cgroup")
        outside = f"/proc/{os.getpid()}/cgroup"
        with open(outside) as f:
            home = os.path.join(mount, [l for l in f.read().splitlines() if l.startswith("0::")][0][3:].lstrip("/"))

        def move(pid, where):
            with open(os.path.join(where, "cgroup.procs"), "w") as f:
                f.write(str(pid))

        children = []

        def cleanup():
            for c in children:
                if c.poll() is None:
                    c.kill()
                    c.wait()
            for d in (os.path.join(top, "inner"), top):
                if os.path.isdir(d):
                    with open(os.path.join(d, "cgroup.procs")) as f:
                        for pid in f.read().split():
                            move(pid, home)
                    os.rmdir(d)
        self.defer(cleanup)
        port = free_port()
        prometheus = Prometheus([("local", f"127.0.0.1:{port}")])
        self.defer(prometheus.close)
        argv, env = self.unit_command(instance, f"127.0.0.1:{port}")
        monitor = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        children.append(monitor)
        wait_until("the cgroup's monitor to be scraped up", lambda: prometheus.one('up{host="local"}') == 1)
        period = 0.05

        # A: moved in and out while it sleeps between iterations (3 s apart, each a few
        # ms, the first at its start): what it did inside is what its counters say between
        # the moves, its second and third iterations.
        a = subprocess.Popen(self.work_args(128, 20000, 4, 3000), stderr=subprocess.DEVNULL)
        children.append(a)
        time.sleep(1.5)
        before = proc_faults(a.pid)
        move(a.pid, os.path.join(top, "inner"))
        time.sleep(8 * period)
        moved_in = proc_faults(a.pid)
        check(moved_in["minor"] == before["minor"], f"A faulted around its move in ({before} then {moved_in}): the machine is too slow for this test")
        time.sleep(6.0 - 8 * period)
        after = proc_faults(a.pid)
        move(a.pid, home)
        time.sleep(10 * period)
        check(proc_faults(a.pid)["minor"] == after["minor"], "A faulted around its move out: the machine is too slow for this test")

        # B: a shell moved in while blocked on a pipe, then let go: it forks processes
        # that live a millisecond (between two passes: they count through B's reaped
        # counts) and two works (counted from their fork while they run, then through B)
        # and exits; its zombie is left unreaped for a few periods, as a parent outside may.
        r, w = os.pipe()
        b = subprocess.Popen(
            ["sh", "-c", f'read x; for i in 1 2 3 4 5 6 7 8; do /bin/true; done; '
                         f'{shlex.join(self.work_args(24, 15000, 2, 100))}; '
                         f'{shlex.join(self.work_args(24, 15000, 2, 100))} 2>&1'],
            stdin=r, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(r)
        children.append(b)
        time.sleep(0.3)
        move(b.pid, top)
        b_before = proc_faults(b.pid)
        time.sleep(10 * period)
        os.write(w, b"go\n")
        os.close(w)
        wait_until("B to exit", lambda: proc_faults(b.pid)["state"] == "Z")
        b_after = proc_faults(b.pid)
        time.sleep(10 * period)
        b.wait()

        expected_minor = (after["minor"] - before["minor"]) + (b_after["minor"] - b_before["minor"])
        expected_major = (after["major"] - before["major"]) + (b_after["major"] - b_before["major"])
        a.kill()
        a.wait()
        # The cgroup removed: the target ends, its final values are scraped, and it stops.
        for d in (os.path.join(top, "inner"), top):
            os.rmdir(d)
        code, _, err = finished(monitor, "the cgroup's monitor")
        check(code == 0, f"the unit's monitor exited with {code}:\n{err}")
        check("the last ones with the final values" in err, f"the final values were not scraped:\n{err}")
        # The cgroup's own count, beside the samples' (where the memory controller is on).
        check(re.search(rf"note: cgroup \S*/{name}: (its memory.stat counted|no memory.stat)", err), err)
        got = (
            prometheus.one(f'last_over_time(process_paging_faults_total{{host="local",target=~".*/{name}",system_paging_fault_type="minor"}}[5m])'),
            prometheus.one(f'last_over_time(process_paging_faults_total{{host="local",target=~".*/{name}",system_paging_fault_type="major"}}[5m])'),
        )
        check(expected_minor > 5000, f"too few faults inside to tell anything: {expected_minor}")
        check(got == (expected_minor, expected_major),
              f"the cgroup's monitor counted {got}, its processes did {(expected_minor, expected_major)} inside:\n{err}")


    # --- one monitor per host: every cgroup under a path -----------------------------

    def fleet_monitor(self, argv):
        """A fleet monitor run as `argv`, and the lines it says as it says them:
        (process, said, the thread that reads them)."""
        monitor = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.defer(lambda: monitor.poll() is None and (monitor.kill(), monitor.wait()))
        said = []
        reader = threading.Thread(target=lambda: said.extend(iter(monitor.stderr.readline, "")), daemon=True)
        reader.start()
        return monitor, said, reader

    def stop_fleet_monitor(self, monitor, said, reader):
        """SIGTERM, and its exit within PATIENCE, with status 0; all it said."""
        monitor.send_signal(signal.SIGTERM)
        try:
            code = monitor.wait(timeout=PATIENCE)
        except subprocess.TimeoutExpired:
            raise Failure(f"the fleet monitor did not end within {PATIENCE:.0f} s of its SIGTERM:\n{''.join(said)}")
        reader.join(timeout=10)
        err = "".join(said)
        check(code == 0, f"the fleet monitor exited with {code}:\n{err}")
        return err

    def start_service(self, cgroup, work, stderr=subprocess.DEVNULL):
        """A service's main process, started in `cgroup` as a service manager starts one:
        a shell blocked on a pipe, moved in, left there until the monitor's passes have
        seen it (what it did before is not the target's), then let go to exec `work`.
        Returns (process, its /proc counts when moved in)."""
        r, w = os.pipe()
        process = subprocess.Popen(["sh", "-c", f"read x; exec {shlex.join(work)}"], stdin=r,
                                   stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        os.close(r)
        self.defer(lambda: process.poll() is None and (process.kill(), process.wait()))
        time.sleep(0.3)
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(process.pid))
        before = proc_faults(process.pid)
        time.sleep(10 * 0.05)
        os.write(w, b"go\n")
        os.close(w)
        return process, before

    def finish_service(self, service):
        """Waits for a service's process to exit, left a zombie a few periods (the monitor
        reads its last counts there), then reaps it: what it did inside, (minor, major)."""
        process, before = service
        wait_until("a service's process to exit", lambda: proc_faults(process.pid)["state"] == "Z")
        after = proc_faults(process.pid)
        time.sleep(10 * 0.05)
        process.wait()
        check(process.returncode == 0, f"the service's work exited with {process.returncode}")
        return after["minor"] - before["minor"], after["major"] - before["major"]

    def test_one_monitor_exports_each_cgroup_under_a_path_exactly_and_a_restarted_one_again(self):
        """--cgroups-under with --prometheus, --textfile and --otlp at once: each target's
        series against its processes' own counters in Prometheus, the textfile and
        VictoriaMetrics."""
        mount = cgroup2_mount()
        top = os.path.join(mount, f"pfprof-fleet-host-{os.getpid()}")
        cgroups = {n: os.path.join(top, n) for n in ("a", "b", "c")}
        names = {n: "/" + os.path.relpath(d, mount) for n, d in cgroups.items()}
        for d in cgroups.values():
            os.makedirs(d)

        def cleanup():
            for d in list(cgroups.values()) + [top]:
                if os.path.isdir(d):
                    os.rmdir(d)
        self.defer(cleanup)
        port = free_port()
        prometheus = Prometheus([("local", f"127.0.0.1:{port}")])
        self.defer(prometheus.close)
        # c is beyond --max-targets 2: the names are taken in order, a and b first.
        scratch = Scratch()
        self.defer(scratch.close)
        textfiles = scratch("textfiles")
        os.mkdir(textfiles)
        # The linger keeps a's values while its cgroup is gone, and c out meanwhile.
        vm = VictoriaMetrics(self.vm_root)
        self.defer(vm.close)
        monitor, said, reader = self.fleet_monitor(
            [self.monitor, "--cgroups-under", top, "--max-targets", "2", "--interval", "250ms",
             "--prometheus", f"127.0.0.1:{port}", "--textfile", textfiles,
             "--otlp", f"{vm.url}/opentelemetry/v1/metrics", "--linger", "10s"])
        textfile = os.path.join(textfiles, f"pfprof-fleet-{monitor.pid}.prom")

        def lines(text):
            return [line for line in list(said) if text in line]
        left_out = f"1 cgroup not profiled: --max-targets 2 are exported"
        wait_until("the monitor to profile a and b and leave c out",
                   lambda: (all(lines(f"monitor: profiling {names[n]}\n") for n in "ab") and lines(left_out), said))
        check(lines(left_out)[0].rstrip().endswith(f": {names['c']}"), f"the left-out cgroup is not named:\n{''.join(said)}")
        wait_until("the monitor to be scraped up", lambda: prometheus.one('up{host="local"}') == 1)

        # b runs throughout; a runs, its cgroup is removed and made again at once (a
        # restarted service), and a runs again in the new one.
        b = self.start_service(cgroups["b"], self.work_args(32, 20000, 6, 300))
        a_first = self.finish_service(self.start_service(cgroups["a"], self.work_args(24, 15000, 2, 100)))
        os.rmdir(cgroups["a"])
        os.mkdir(cgroups["a"])
        wait_until("the removed a to end and the re-created a to be profiled",
                   lambda: (len(lines(f"monitor: profiling {names['a']}\n")) == 2 and lines(f"monitor: {names['a']} ended"), said))
        a_second = self.finish_service(self.start_service(cgroups["a"], self.work_args(24, 15000, 2, 100)))
        b_total = self.finish_service(b)
        a_total = (a_first[0] + a_second[0], a_first[1] + a_second[1])
        check(min(a_first[0], a_second[0], b_total[0]) > 5000, f"too few faults to tell anything: a {a_first} {a_second}, b {b_total}")

        def series(name, fault_type):
            return prometheus.one(f'process_paging_faults_total{{host="local",target="{name}",system_paging_fault_type="{fault_type}"}}')

        def got():
            return {n: (series(names[n], "minor"), series(names[n], "major")) for n in "ab"}
        want = {"a": a_total, "b": b_total}
        wait_until("Prometheus to store each target's own totals", lambda: (got() == want, (got(), want)), timeout=15)
        # The re-created target's counters went on from the removed one's: no reset.
        resets = prometheus.one(f'resets(process_paging_faults_total{{host="local",target="{names["a"]}",system_paging_fault_type="minor"}}[5m])')
        check(resets == 0, f"a's counter was reset {resets} times when its cgroup was made again")
        # Cardinality: two targets exported, c counted as left out, never profiled.
        targets = prometheus.query('count by (target) (pfprof_build_info{host="local"})')
        check(sorted(dict(k)["target"] for k in targets) == [names["a"], names["b"]], f"exported targets: {targets}")
        check(prometheus.one('pfprof_targets_left_out{host="local"}') == 1, "pfprof_targets_left_out is not 1")
        # VictoriaMetrics over OTLP: each target a resource of its own, with its own totals.
        def pushed():
            values = {n: tuple(vm.one(f'last_over_time(process_paging_faults_total{{target="{names[n]}",'
                                      f'service_name="pfprof",system_paging_fault_type="{t}"}}[10m])')
                               for t in ("minor", "major")) for n in "ab"}
            return values == want, values
        wait_until("VictoriaMetrics to hold each target's own totals", pushed, timeout=30)
        check(vm.one(f'count(last_over_time(pfprof_build_info{{target="{names["c"]}"}}[10m]))') is None,
              "c was pushed beyond --max-targets")
        # The textfile: the same targets, each with its own totals, in one file promtool parses.
        def in_textfile():
            with open(textfile) as f:
                text = f.read()
            values = {}
            for n in "ab":
                for fault_type in ("minor", "major"):
                    m = re.search(rf'(?m)^process_paging_faults_total\{{(?=[^}}]*target="{re.escape(names[n])}")'
                                  rf'[^}}]*system_paging_fault_type="{fault_type}"[^}}]*\}} (\d+)$', text)
                    values[n] = values.get(n, ()) + ((int(m.group(1)) if m else None),)
            return values == want, (values, text)
        text = wait_until("the textfile to hold each target's own totals", in_textfile, timeout=10)[1]
        check(names["c"] not in text, f"c is in the textfile:\n{text}")
        check(re.search(r'(?m)^pfprof_targets_left_out\{monitor_pid="\d+"\} 1$', text), f"no left-out count in the textfile:\n{text}")
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        check("error while linting" not in r.stderr and "text format parsing error" not in (r.stdout + r.stderr),
              f"promtool cannot parse the textfile:\n{r.stdout}{r.stderr}\n{text}")

        err = self.stop_fleet_monitor(monitor, said, reader)
        check("the last ones with the final values" in err, f"the final values were not scraped:\n{err}")
        check(len(lines(left_out)) == 1, f"c's leaving out was said more than once:\n{err}")
        check(not lines(f"profiling {names['c']}"), f"c was profiled beyond --max-targets:\n{err}")
        check(os.listdir(textfiles) == [], f"left behind: {os.listdir(textfiles)}")
        check("textfile:" in err and "removed at the end" in err, err)
        check(re.search(r"otlp: \d+ pushes to \S+ delivered, the last with the final values", err), err)

    def test_a_fleets_targets_export_each_mapping_and_program_as_their_workloads_announced(self):
        """--cgroups-under with attribution: two targets, one's work in a descendant
        cgroup made after the monitor read its target's tree (told by inotify on
        cgroupfs), each sweeping a file of its own with every page evicted (its major faults
        announced, exact), and a work outside every target sweeping a third. Each target's
        mapping and program series in Prometheus and VictoriaMetrics hold its own work's
        announced faults and nothing of the others'."""
        mount = cgroup2_mount()
        top = os.path.join(mount, f"pfprof-fleet-attribution-{os.getpid()}")
        dirs = {"a": os.path.join(top, "a", "worker"), "b": os.path.join(top, "b")}
        names = {n: "/" + os.path.relpath(os.path.join(top, n), mount) for n in "ab"}
        for d in [os.path.join(top, "a"), dirs["b"]]:
            os.makedirs(d)

        def cleanup():
            for d in [dirs["a"], os.path.join(top, "a"), dirs["b"], top]:
                if os.path.isdir(d):
                    os.rmdir(d)
        self.defer(cleanup)
        # On the repository's disk: a tmpfs keeps its pages, and --evict needs them gone.
        files = tempfile.mkdtemp(prefix="fleet-attribution-", dir=os.path.join(REPO, "target"))
        self.defer(lambda: shutil.rmtree(files, ignore_errors=True))
        paths = {n: os.path.join(files, f"{n}.dat") for n in ("a", "b", "outside")}
        port = free_port()
        prometheus = Prometheus([("local", f"127.0.0.1:{port}")])
        self.defer(prometheus.close)
        vm = VictoriaMetrics(self.vm_root)
        self.defer(vm.close)
        monitor, said, reader = self.fleet_monitor(
            [self.monitor, "--cgroups-under", top, "--interval", "250ms", "--prometheus", f"127.0.0.1:{port}",
             "--otlp", f"{vm.url}/opentelemetry/v1/metrics", "--linger", "10s"])
        wait_until("the monitor to profile a and b",
                   lambda: (all(f"monitor: profiling {names[n]}\n" in said for n in "ab"), said))
        wait_until("the monitor to be scraped up", lambda: prometheus.one('up{host="local"}') == 1)
        # a's tree read when it started (its values scraped: drains have passed since): its
        # worker cgroup, made now, is followed from its parent's IN_CREATE, not found by
        # reading the tree.
        a_periods = f'pfprof_period_faults_count{{host="local",target="{names["a"]}",system_paging_fault_type="minor"}}'
        wait_until("a's first period to be scraped", lambda: (prometheus.one(a_periods) is not None, said))
        os.makedirs(dirs["a"])

        def work(n):
            return [self.work, "16", "R", "2000", "3", "--sleep-ms", "200", "--evict", "--file", paths[n]]
        # Each target's work started as a service manager starts one: moved in, then exec'd.
        services = {n: self.start_service(dirs[n], work(n), stderr=subprocess.PIPE) for n in "ab"}
        outside = subprocess.run(work("outside"), capture_output=True, text=True)
        check(outside.returncode == 0, f"the work outside exited with {outside.returncode}:\n{outside.stderr}")
        announced, majors = {}, {}
        for n, service in services.items():
            majors[n] = self.finish_service(service)[1]
            err = service[0].stderr.read()
            m = re.search(rf"work mapping: pid \d+ file {re.escape(paths[n])} \S+: \d+ pages, (\d+) minor faults, "
                          rf"(\d+) major faults", err)
            check(m, f"{n}'s work announced no file mapping:\n{err}")
            check("found the page cached" not in err, f"{n}'s evictions failed: the answer is not known\n{err}")
            announced[n] = int(m.group(2))
            check(announced[n] >= 4096, f"too few major faults to tell anything: {n} {announced[n]}")

        def got(n):
            selector = f'host="local",target="{names[n]}",system_paging_fault_type="major"'
            by_mapping = prometheus.query(f"last_over_time(pfprof_mapping_faults_total{{{selector}}}[5m])")
            by_program = prometheus.query(f"last_over_time(pfprof_program_faults_total{{{selector}}}[5m])")
            # A mapping's series is one a program (two programs' libc are two series):
            # summed by mapping, none left out.
            mapped, programs = {}, {}
            for labels, v in by_mapping.items():
                mapped[dict(labels)["mapping"]] = mapped.get(dict(labels)["mapping"], 0) + v
            for labels, v in by_program.items():
                programs[dict(labels)["program"]] = programs.get(dict(labels)["program"], 0) + v
            return {"the file's": mapped.get(paths[n]), "others' files": [p for p in paths.values() if p in mapped and p != paths[n]],
                    "all by mapping": sum(mapped.values()), "all by program": sum(programs.values()),
                    "work's": programs.get("work"), "lost": mapped.get("[lost]")}
        for n in "ab":
            # Every major fault of the target's one process recorded, under one mapping and
            # one program; the file's as its work announced; work took them all (the shell
            # before its exec took none from the page cache it found warm). Its [lost] is its
            # own queue's overflow alone, none here: a loss from the fleet's shared rings
            # (another process's flood) is the fleet's, said on the monitor's stderr.
            want = {"the file's": announced[n], "others' files": [], "all by mapping": majors[n],
                    "all by program": majors[n], "work's": majors[n], "lost": 0}
            final_values_stored(lambda n=n: got(n), want, f"{n}'s major faults by mapping and by program")
        # The same series over OTLP.
        for n in "ab":
            vm_selector = f'target="{names[n]}",service_name="pfprof",system_paging_fault_type="major"'
            for expr, want in {
                f'last_over_time(pfprof_mapping_faults_total{{{vm_selector},mapping="{paths[n]}"}}[10m])': announced[n],
                f"sum(last_over_time(pfprof_mapping_faults_total{{{vm_selector}}}[10m]))": majors[n],
                f'last_over_time(pfprof_program_faults_total{{{vm_selector},program="work"}}[10m])': majors[n],
                f'count(last_over_time(pfprof_mapping_faults_total{{{vm_selector},mapping=~"{files}/.*"}}[10m]))': 1,
            }.items():
                def latest(expr=expr, want=want):
                    got = vm.one(expr)
                    return got == want, got
                wait_until(f"VictoriaMetrics to answer {expr} == {want}", latest, timeout=30)
        err = self.stop_fleet_monitor(monitor, said, reader)
        check("not attributed" not in err, f"the fleet's faults were not attributed:\n{err}")

    def test_kubernetes_containers_are_named_from_the_nodes_log_layout_each_in_one_series(self):
        """Below a kubelet-shaped kubepods cgroup, with the monitor's /var/log a node's
        kubelet layout (a bind mount in a mount namespace of its own): a container named
        from the start; a container whose log link comes only after it started (held, then
        shown with its name, one series, every fault since its start); a pod the layout
        does not hold (shown without names after the wait). In Prometheus and, over OTLP,
        VictoriaMetrics."""
        mount = cgroup2_mount()
        top = os.path.join(mount, f"pfprof-fleet-kube-{os.getpid()}")
        kubepods = os.path.join(top, "kubepods.slice")
        web_uid, lone_uid = "7c9e6679-7425-40de-944b-e07fc1f90ae7", "d4f1c2b3-a5e6-4f70-8b9c-0d1e2f3a4b5c"
        ids = {"nginx": "9f1e2d3c4b5a6978" * 4, "sidecar": "5e3d1c9b7a5f3e1d" * 4, "lone": "0a0b0c0d0e0f1011" * 4}
        burstable = os.path.join(kubepods, "kubepods-burstable.slice")
        web_pod = os.path.join(burstable, f"kubepods-burstable-pod{web_uid.replace('-', '_')}.slice")
        lone_pod = os.path.join(kubepods, "kubepods-besteffort.slice",
                                f"kubepods-besteffort-pod{lone_uid.replace('-', '_')}.slice")
        cgroups = {"nginx": os.path.join(web_pod, f"cri-containerd-{ids['nginx']}.scope"),
                   "sidecar": os.path.join(web_pod, f"cri-containerd-{ids['sidecar']}.scope"),
                   "lone": os.path.join(lone_pod, f"cri-containerd-{ids['lone']}.scope")}
        names = {n: "/" + os.path.relpath(d, mount) for n, d in cgroups.items()}
        for n in ("nginx", "lone"):
            os.makedirs(cgroups[n])

        def cleanup():
            for d in sorted((os.path.join(root, d) for root, dirs, _ in os.walk(top) for d in dirs), reverse=True) + [top]:
                if os.path.isdir(d):
                    os.rmdir(d)
        self.defer(cleanup)
        scratch = Scratch()
        self.defer(scratch.close)
        logs = scratch("var-log")
        web_logs = f"pods/shop_web-0_{web_uid}"
        for container in ("nginx", "sidecar"):
            os.makedirs(os.path.join(logs, web_logs, container))
            open(os.path.join(logs, web_logs, container, "0.log"), "w").close()
        os.makedirs(os.path.join(logs, "containers"))

        def link(container):
            os.symlink(f"/var/log/{web_logs}/{container}/0.log",
                       os.path.join(logs, "containers", f"web-0_shop_{container}-{ids[container]}.log"))
        link("nginx")
        port = free_port()
        prometheus = Prometheus([("local", f"127.0.0.1:{port}")])
        self.defer(prometheus.close)
        vm = VictoriaMetrics(self.vm_root)
        self.defer(vm.close)
        # unshare execs sh, which execs the monitor: one pid throughout.
        monitor = subprocess.Popen(
            ["unshare", "--mount", "--", "sh", "-c", 'mount --bind "$0" /var/log && exec "$@"', logs,
             self.monitor, "--cgroups-under", kubepods, "--interval", "250ms", "--prometheus", f"127.0.0.1:{port}",
             "--otlp", f"{vm.url}/opentelemetry/v1/metrics", "--linger", "10s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.defer(lambda: monitor.poll() is None and (monitor.kill(), monitor.wait()))
        said = []
        reader = threading.Thread(target=lambda: said.extend(iter(monitor.stderr.readline, "")), daemon=True)
        reader.start()

        def profiling(n):
            return f"monitor: profiling {names[n]}\n" in said
        wait_until("the monitor to profile nginx and lone", lambda: (profiling("nginx") and profiling("lone"), said))
        wait_until("the monitor to be scraped up", lambda: prometheus.one('up{host="local"}') == 1)
        # The sidecar starts while the monitor runs; its log is linked once it has started.
        os.makedirs(cgroups["sidecar"])
        wait_until("the monitor to profile the sidecar", lambda: (profiling("sidecar"), said))
        sidecar = self.start_service(cgroups["sidecar"], self.work_args(24, 15000, 3, 100))
        time.sleep(1)
        link("sidecar")
        nginx = self.start_service(cgroups["nginx"], self.work_args(24, 15000, 2, 100))
        want = {"nginx": self.finish_service(nginx), "sidecar": self.finish_service(sidecar)}
        check(min(m for m, _ in want.values()) > 5000, f"too few faults to tell anything: {want}")

        def series(n):
            """Every series of n's minor faults Prometheus stored, as label dicts."""
            found = prometheus.query(f'last_over_time(process_paging_faults_total{{host="local",target="{names[n]}",'
                                     f'system_paging_fault_type="minor"}}[10m])')
            return [dict(labels) for labels in found]

        def totals(n, container):
            return tuple(prometheus.one(f'process_paging_faults_total{{host="local",target="{names[n]}",namespace="shop",'
                                        f'pod="web-0",container="{container}",pod_uid="{web_uid}",'
                                        f'system_paging_fault_type="{t}"}}') for t in ("minor", "major"))
        got = lambda: {n: totals(n, n) for n in want}
        wait_until("Prometheus to store each named container's totals", lambda: (got() == want, (got(), want)), timeout=15)
        # The sidecar was held until its name came: one series, never one without it.
        check(len(series("sidecar")) == 1, f"the sidecar's series: {series('sidecar')}")
        # The lone pod is not in the layout: shown after the wait, without names.
        wait_until("the lone pod's container to be shown", lambda: series("lone"))
        lone = series("lone")
        check(len(lone) == 1 and lone[0]["pod_uid"] == lone_uid
              and not {"namespace", "pod", "container"} & set(lone[0]), f"the lone pod's series: {lone}")

        def pushed():
            values = {n: tuple(vm.one(f'last_over_time(process_paging_faults_total{{target="{names[n]}",'
                                      f'k8s_namespace_name="shop",k8s_pod_name="web-0",k8s_container_name="{n}",'
                                      f'namespace="shop",pod="web-0",container="{n}",system_paging_fault_type="{t}"}}[10m])')
                               for t in ("minor", "major")) for n in want}
            return values == want, values
        wait_until("VictoriaMetrics to hold each named container's totals", pushed, timeout=30)
        check(vm.one(f'count(last_over_time(process_paging_faults_total{{target="{names["sidecar"]}",'
                     f'system_paging_fault_type="minor"}}[10m]))') == 1, "the sidecar was pushed in more than one series")

        monitor.send_signal(signal.SIGTERM)
        code = monitor.wait(timeout=PATIENCE)
        reader.join(timeout=10)
        check(code == 0, f"the fleet monitor exited with {code}:\n{''.join(said)}")


def cgroup2_mount():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            before, after = line.split(" - ", 1)
            if after.split()[0] == "cgroup2":
                return before.split()[4]
    raise Failure("no cgroup2 file system is mounted")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--monitor", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--vm-root", required=True)
    parser.add_argument("filters", nargs="*")
    args = parser.parse_args()
    tests = [n for n in dir(Fleet) if n.startswith("test_") and (not args.filters or any(f in n for f in args.filters))]
    tests.sort(key=lambda n: Fleet.__dict__[n].__code__.co_firstlineno)
    passed = failed = 0
    for name in tests:
        fleet = Fleet(args.monitor, args.work, args.vm_root)
        started = time.monotonic()
        try:
            getattr(fleet, name)()
            passed += 1
            verdict = "ok"
        except Exception as e:  # noqa: BLE001 - every failure is reported, then the next test runs
            failed += 1
            verdict = "FAILED"
            detail = str(e) if isinstance(e, Failure) else traceback.format_exc()
            print(f"  {detail}", flush=True)
        finally:
            for cleanup in reversed(fleet.cleanups):
                try:
                    cleanup()
                except Exception as e:  # noqa: BLE001 - a cleanup failing must not hide the verdict
                    print(f"  cleanup: {e}", flush=True)
        print(f"fleet: {name[5:]} ... {verdict} ({time.monotonic() - started:.1f} s)", flush=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not tests else 0


if __name__ == "__main__":
    sys.exit(main())
