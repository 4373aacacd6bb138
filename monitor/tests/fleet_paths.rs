//! What a fleet monitor derives from kubelet cgroup paths (systemd and cgroupfs drivers,
//! containerd, CRI-O, Docker) and from a node's kubelet log layout, its unit patterns,
//! and its refusals, through the binary.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Scratch;
use monitor::fleet::kubenames::KubeNames;
use monitor::fleet::kubepods::{classify, KubeCgroup};
use monitor::fleet::pattern::matches;

const UID: &str = "0f6a3c1e-2b4d-4e8f-9a10-7c5b3d2e1f00";
const ID: &str = "3b5d8f9e2a7c4b1d6e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d";

fn container(path: &str) -> Vec<(&'static str, String)> {
    match classify(path) {
        Some(KubeCgroup::Container(labels)) => labels,
        other => panic!("{path}: {other:?}"),
    }
}

#[test]
fn kubelet_paths_give_the_pod_uid_the_qos_class_and_the_container_id() {
    let systemd_uid = UID.replace('-', "_");
    let fixture = [
        (
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd_uid}.slice/cri-containerd-{ID}.scope"),
            "burstable",
            Some(format!("containerd://{ID}")),
        ),
        (
            format!("/kubepods.slice/kubepods-pod{systemd_uid}.slice/crio-{ID}.scope"),
            "guaranteed",
            Some(format!("cri-o://{ID}")),
        ),
        (
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{systemd_uid}.slice/docker-{ID}.scope"),
            "besteffort",
            Some(format!("docker://{ID}")),
        ),
        (format!("/kubepods/burstable/pod{UID}/{ID}"), "burstable", Some(ID.to_owned())),
        (format!("/kubepods/pod{UID}/{ID}"), "guaranteed", Some(ID.to_owned())),
        (
            format!("/kubepods.slice/kubepods-pod{systemd_uid}.slice/crio-conmon-{ID}.scope"),
            "guaranteed",
            None,
        ),
    ];
    for (path, qos, id) in fixture {
        let mut want = vec![("pod_uid", UID.to_owned()), ("qos_class", qos.to_owned())];
        want.extend(id.map(|id| ("container_id", id)));
        assert_eq!(container(&path), want, "{path}");
    }
}

#[test]
fn qos_and_pod_cgroups_are_descended_and_other_paths_are_not_kubelets() {
    let systemd_uid = UID.replace('-', "_");
    assert_eq!(classify("/kubepods.slice"), Some(KubeCgroup::Qos));
    assert_eq!(classify("/kubepods/besteffort"), Some(KubeCgroup::Qos));
    assert_eq!(
        classify(&format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd_uid}.slice"
        )),
        Some(KubeCgroup::Pod)
    );
    assert_eq!(
        classify(&format!("/kubepods/pod{UID}")),
        Some(KubeCgroup::Pod)
    );
    assert_eq!(classify("/system.slice/nginx.service"), None);
    assert_eq!(classify("/kubepods/not-a-pod"), None);
}

#[test]
fn unit_patterns_match_whole_names_with_star_and_question_mark() {
    assert!(matches("nginx*.service", "nginx.service"));
    assert!(matches("nginx*.service", "nginx-api.service"));
    assert!(!matches("nginx*.service", "nginx.socket"));
    assert!(!matches("nginx*.service", "my-nginx.service"));
    assert!(matches("db?.service", "db1.service"));
    assert!(!matches("db?.service", "db12.service"));
    assert!(matches("*", "anything"));
}

fn monitor(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_monitor"))
        .args(args)
        .output()
        .expect("running the monitor");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_fleet_monitor_refuses_the_module_run_and_a_missing_prometheus_with_the_reason() {
    let cases: [(&[&str], &str); 6] = [
        (
            &[
                "--unit",
                "x*.service",
                "--prometheus",
                ":0",
                "--backend",
                "kernel",
            ],
            "need --backend procfs",
        ),
        (
            &["--unit", "x*.service"],
            "give --prometheus ADDR, --otlp [URL] or --textfile DIR",
        ),
        (
            &["--unit", "x*.service", "--prometheus", ":0", "--count", "5"],
            "--duration and --count end one profile",
        ),
        (
            &[
                "--unit",
                "x*.service",
                "--otlp",
                "http://127.0.0.1:4318/other",
            ],
            "its path does not end in /v1/metrics",
        ),
        (
            &[
                "--unit",
                "x*.service",
                "--textfile",
                "/nonexistent-pfprof-dir",
            ],
            "cannot write metrics files in /nonexistent-pfprof-dir",
        ),
        (
            &[
                "--cgroups-under",
                "/tmp",
                "--prometheus",
                "127.0.0.1:0",
                "--linger",
                "0",
            ],
            "is not a cgroup v2 directory",
        ),
    ];
    for (args, says) in cases {
        let (code, err) = monitor(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn a_path_shaped_otherwise_than_the_kubelets_is_not_descended() {
    // A QoS class below a QoS class, as a user who may make cgroups there could nest
    // them without end: not a QoS cgroup to descend into.
    assert_eq!(classify("/kubepods/burstable/besteffort"), None);
    assert_eq!(classify("/kubepods/burstable/burstable"), None);
}

// A node's /var/log as its kubelet leaves it, and the cgroups of its containers: pods of
// the systemd driver with containerd and of the cgroupfs driver with CRI-O, a pod of two
// containers and an init container, a container restarted once (its first link kept
// beside the second), a static pod (its uid a 32-digit hash), and what else lies there.
const WEB_UID: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
const ETCD_UID: &str = "5a3f1e0c9b8d7a6f5e4d3c2b1a098765";
const CRIO_UID: &str = "d4f1c2b3-a5e6-4f70-8b9c-0d1e2f3a4b5c";
const NGINX_0: &str = "0a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728ff";
const NGINX_1: &str = "9f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
const SHIPPER: &str = "5e3d1c9b7a5f3e1d9c7b5a3f1e9d7c5b3a1f9e7d5c3b1a9f7e5d3c1b9a7f5e3d";
const INIT: &str = "1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d";
const SANDBOX: &str = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";
const ETCD: &str = "e7c0d1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0";
const CRIO: &str = "b1a2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9a";

fn node_log_layout() -> Vec<String> {
    let web = format!("pods/shop_web-0_{WEB_UID}");
    let etcd = format!("pods/kube-system_etcd-node-1.example.com_{ETCD_UID}");
    let crio = format!("pods/monitoring_node-exporter-x7k2p_{CRIO_UID}");
    vec![
        format!("{web}/init-config/0.log"),
        format!("{web}/nginx/0.log"),
        format!("{web}/nginx/1.log"),
        format!("{web}/log-shipper/0.log"),
        format!("{etcd}/etcd/0.log"),
        format!("{etcd}/etcd/0.log.20260101-120000.gz"),
        format!("{crio}/node-exporter/0.log"),
        format!("containers/web-0_shop_init-config-{INIT}.log -> ../{web}/init-config/0.log"),
        format!("containers/web-0_shop_nginx-{NGINX_0}.log -> ../{web}/nginx/0.log"),
        format!("containers/web-0_shop_nginx-{NGINX_1}.log -> ../{web}/nginx/1.log"),
        format!("containers/web-0_shop_log-shipper-{SHIPPER}.log -> ../{web}/log-shipper/0.log"),
        format!("containers/etcd-node-1.example.com_kube-system_etcd-{ETCD}.log -> ../{etcd}/etcd/0.log"),
        format!("containers/node-exporter-x7k2p_monitoring_node-exporter-{CRIO}.log -> ../{crio}/node-exporter/0.log"),
        // What else lies there: not a kubelet's, or not of its shapes.
        "pods/README".to_owned(),
        "pods/kube-system_half/x/0.log".to_owned(),
        format!("pods/a_b_c_{WEB_UID}/x/0.log"),
        format!("pods/Shop_web-0_{WEB_UID}x/x/0.log"),
        "containers/kube-proxy.log".to_owned(),
        format!("containers/web-0_shop_nginx-{}.log", &NGINX_1[1..]),
        format!("containers/web-0_shop_nginx-{NGINX_1}.log.1"),
        "containers/dangling.log -> ../pods/gone/0.log".to_owned(),
    ]
}

/// Makes `layout` below `root`: files, and `LINK -> TARGET` symlinks.
fn make(root: &Path, layout: &[String]) {
    for entry in layout {
        let (path, target) = match entry.split_once(" -> ") {
            Some((path, target)) => (path, Some(target)),
            None => (entry.as_str(), None),
        };
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        match target {
            Some(target) => std::os::unix::fs::symlink(target, &path).expect("symlink"),
            None => std::fs::write(&path, "").expect("write"),
        }
    }
}

fn kube_labels(
    names: &mut KubeNames,
    cgroup: &str,
    now: Instant,
) -> (Vec<(&'static str, String)>, bool) {
    let labels = container(cgroup);
    let label = |key: &str| {
        labels
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    };
    let found = names.lookup(
        label("pod_uid").expect("a pod uid"),
        label("container_id"),
        now,
    );
    (found.labels, found.settled)
}

fn named(namespace: &str, pod: &str, container: Option<&str>) -> Vec<(&'static str, String)> {
    let mut labels = vec![("namespace", namespace.to_owned()), ("pod", pod.to_owned())];
    labels.extend(container.map(|c| ("container", c.to_owned())));
    labels
}

#[test]
fn a_nodes_log_layout_names_each_containers_namespace_pod_and_container() {
    let scratch = Scratch::new("kube-layout");
    make(scratch.path(), &node_log_layout());
    // Junk no UTF-8 can hold, in both directories.
    let junk = OsStr::from_bytes(b"shop_web-\xff_7c9e6679-7425-40de-944b-e07fc1f90ae7");
    std::fs::create_dir(scratch.join("pods").join(junk)).expect("mkdir");
    std::fs::write(
        scratch
            .join("containers")
            .join(OsStr::from_bytes(b"\xfe.log")),
        "",
    )
    .expect("write");
    let systemd_web = WEB_UID.replace('-', "_");
    let systemd_crio = CRIO_UID.replace('-', "_");
    let web = format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd_web}.slice"
    );
    let cases = [
        (format!("{web}/cri-containerd-{NGINX_1}.scope"), named("shop", "web-0", Some("nginx"))),
        (format!("{web}/cri-containerd-{NGINX_0}.scope"), named("shop", "web-0", Some("nginx"))),
        (format!("{web}/cri-containerd-{SHIPPER}.scope"), named("shop", "web-0", Some("log-shipper"))),
        (format!("{web}/cri-containerd-{INIT}.scope"), named("shop", "web-0", Some("init-config"))),
        (
            format!("/kubepods/burstable/pod{ETCD_UID}/{ETCD}"),
            named("kube-system", "etcd-node-1.example.com", Some("etcd")),
        ),
        (
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{systemd_crio}.slice/crio-{CRIO}.scope"),
            named("monitoring", "node-exporter-x7k2p", Some("node-exporter")),
        ),
        // CRI-O's conmon has no container id: its pod's names only.
        (
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{systemd_crio}.slice/crio-conmon-{CRIO}.scope"),
            named("monitoring", "node-exporter-x7k2p", None),
        ),
    ];
    let mut names = KubeNames::new(scratch.path(), Duration::from_secs(1));
    let now = Instant::now();
    for (cgroup, want) in cases {
        assert_eq!(
            kube_labels(&mut names, &cgroup, now),
            (want, true),
            "{cgroup}"
        );
    }
    // The pod's sandbox (pause) has no log: its pod's names, its own awaited.
    let sandbox = format!("{web}/cri-containerd-{SANDBOX}.scope");
    assert_eq!(
        kube_labels(&mut names, &sandbox, now),
        (named("shop", "web-0", None), false)
    );
}

#[test]
fn a_pod_started_after_a_read_is_found_at_the_next_read_a_look_later() {
    let scratch = Scratch::new("kube-later");
    make(scratch.path(), &node_log_layout()[..1]);
    std::fs::create_dir(scratch.join("containers")).expect("mkdir");
    let uid = "11111111-2222-4333-8444-555555555555";
    let id = "ab".repeat(32);
    let cgroup = format!("/kubepods/pod{uid}/{id}");
    let look = Duration::from_secs(1);
    let mut names = KubeNames::new(scratch.path(), look);
    let start = Instant::now();
    assert_eq!(kube_labels(&mut names, &cgroup, start), (Vec::new(), false));
    make(
        scratch.path(),
        &[
            format!("pods/batch_job-1_{uid}/main/0.log"),
            format!("containers/job-1_batch_main-{id}.log -> ../pods/batch_job-1_{uid}/main/0.log"),
        ],
    );
    // Not read again within the look: a thousand unknown targets cost one read a look.
    assert_eq!(
        kube_labels(&mut names, &cgroup, start + look / 2),
        (Vec::new(), false)
    );
    assert_eq!(
        kube_labels(&mut names, &cgroup, start + look),
        (named("batch", "job-1", Some("main")), true)
    );
}

#[test]
fn a_node_without_the_layout_gives_no_names_and_nothing_to_wait_for() {
    let scratch = Scratch::new("kube-none");
    let mut names = KubeNames::new(&scratch.join("absent"), Duration::from_secs(1));
    let cgroup = format!("/kubepods/pod{WEB_UID}/{NGINX_1}");
    assert_eq!(
        kube_labels(&mut names, &cgroup, Instant::now()),
        (Vec::new(), true)
    );
    // Only the links mounted: they name the pod too.
    make(scratch.path(), &node_log_layout());
    std::fs::remove_dir_all(scratch.join("pods")).expect("rm");
    let mut names = KubeNames::new(scratch.path(), Duration::from_secs(1));
    assert_eq!(
        kube_labels(&mut names, &cgroup, Instant::now()),
        (named("shop", "web-0", Some("nginx")), true)
    );
}
