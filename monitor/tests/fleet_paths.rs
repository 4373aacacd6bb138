//! What a fleet monitor derives from kubelet cgroup paths (systemd and cgroupfs drivers,
//! containerd, CRI-O, Docker), its unit patterns, and its refusals, through the binary.

use std::process::Command;

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
    let cases: [(&[&str], &str); 7] = [
        (
            &[
                "--unit",
                "x*.service",
                "--prometheus",
                ":0",
                "--minor-sampling",
                "10",
            ],
            "--minor-sampling is for one target",
        ),
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
