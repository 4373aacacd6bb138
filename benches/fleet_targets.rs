//! What a fleet monitor's targets cost it (docs/benchmarks.md reads the numbers): one
//! sampling pass over N cgroup targets, N = 1, 10, 100, as the procfs backend makes one
//! per target every period: list the cgroup's processes (`cgroup.procs`, through the open
//! directory), read each one's stat and CPU clock, then its memory. Each target is a real
//! cgroup v2 directory holding one sleeping process, made under the cgroup2 mount
//! (`cgroups/N`). Beside it, the same processes' reads without the listing
//! (`processes/N`): what the cgroup costs above its processes. Where no cgroup can be
//! made (not root, no cgroup2), only the latter, said on standard error.

use std::fs;
use std::hint::black_box;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use monitor::backend::procfs::members::Members;
use monitor::backend::procfs::memory::MemoryProbe;
use monitor::system::cgroup::{cgroup2_mounts, Cgroup};
use monitor::system::procstat::Probe;

const TARGETS: [usize; 3] = [1, 10, 100];

/// N sleeping processes, each in a cgroup of its own below `top` when there is one; all
/// killed and removed when dropped.
struct Targets {
    top: Option<PathBuf>,
    dirs: Vec<PathBuf>,
    sleepers: Vec<Child>,
}

impl Targets {
    fn spawn(n: usize, top: Option<PathBuf>) -> std::io::Result<Targets> {
        let mut targets = Targets {
            top: top.clone(),
            dirs: Vec::new(),
            sleepers: Vec::new(),
        };
        if let Some(top) = &top {
            fs::create_dir(top)?;
        }
        for i in 0..n {
            let sleeper = Command::new("sleep")
                .arg("3600")
                .stdin(Stdio::null())
                .spawn()?;
            let pid = sleeper.id();
            targets.sleepers.push(sleeper);
            if let Some(top) = &top {
                let dir = top.join(format!("target-{i}"));
                fs::create_dir(&dir)?;
                targets.dirs.push(dir.clone());
                fs::write(dir.join("cgroup.procs"), pid.to_string())?;
            }
        }
        Ok(targets)
    }

    /// Cgroups if this process may make them, else none.
    fn make(n: usize) -> Targets {
        let top = cgroup2_mounts()
            .into_iter()
            .next()
            .map(|mount| mount.join(format!("pfprof-bench-{}", std::process::id())));
        match Targets::spawn(n, top.clone()) {
            Ok(targets) => targets,
            Err(e) => {
                eprintln!(
                    "fleet_targets: no cgroups under {top:?} ({e}): the /proc of {n} processes \
                     instead, without the cgroup listing"
                );
                Targets::spawn(n, None).expect("starting sleep processes")
            }
        }
    }
}

impl Drop for Targets {
    fn drop(&mut self) {
        for sleeper in &mut self.sleepers {
            let _ = sleeper.kill();
            let _ = sleeper.wait();
        }
        for dir in self.dirs.iter().chain(&self.top) {
            let _ = fs::remove_dir(dir);
        }
    }
}

fn fleet_pass(c: &mut Criterion) {
    let most = TARGETS.iter().copied().max().unwrap_or(1);
    let targets = Targets::make(most);
    let mut group = c.benchmark_group("fleet_pass");
    for n in TARGETS {
        group.throughput(Throughput::Elements(n as u64));
        // The reads of each target's process alone: what a pass costs without the listing.
        let mut probes: Vec<(Probe, MemoryProbe)> = (targets.sleepers[..n].iter())
            .map(|s| {
                (
                    Probe::open(s.id()).unwrap(),
                    MemoryProbe::open(s.id()).unwrap(),
                )
            })
            .collect();
        group.bench_function(BenchmarkId::new("processes", n), |b| {
            b.iter(|| {
                for (stat, memory) in &mut probes {
                    let counters = stat.read().map(|s| s.counters).unwrap_or_default();
                    black_box(memory.read(true, &counters));
                }
            })
        });
        if targets.dirs.is_empty() {
            continue;
        }
        let mut members: Vec<Members> = (targets.dirs[..n].iter())
            .map(|dir| Members::new(Arc::new(Cgroup::open(dir).expect("opening a target"))))
            .collect();
        // The first pass admits each sleeper; the benchmark's are the passes after.
        for m in &mut members {
            assert!(m.pass().is_some(), "a target's cgroup went away");
        }
        group.bench_function(BenchmarkId::new("cgroups", n), |b| {
            b.iter(|| {
                for m in &mut members {
                    black_box(m.pass());
                    black_box(m.memory());
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, fleet_pass);
criterion_main!(benches);
