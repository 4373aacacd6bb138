//! What a kubelet's cgroup path says of a Kubernetes container: its pod's uid, its QoS
//! class and its container id, with the systemd and the cgroupfs cgroup drivers and the
//! containerd, CRI-O and Docker runtimes. The pod's name and namespace and the
//! container's name are not in the path: [`super::kubenames`] finds them in the kubelet's
//! log layout.

/// How deep in the kubelet's hierarchy a cgroup is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeCgroup {
    /// `kubepods` or a QoS class's cgroup: pods are below.
    Qos,
    /// A pod's cgroup: its containers are below.
    Pod,
    /// A container (or CRI-O's conmon), with the labels its path gives.
    Container(Vec<(&'static str, String)>),
}

/// Where the cgroup at `name` (its path below the cgroup2 mount) is in the kubelet's
/// hierarchy; `None` outside it.
pub fn classify(name: &str) -> Option<KubeCgroup> {
    let mut parts = name.split('/').filter(|p| !p.is_empty());
    parts.find(|p| matches!(*p, "kubepods" | "kubepods.slice"))?;
    // At most one QoS level, then the pod, then the container: a path of other shapes
    // (a QoS class below a QoS class) is not the kubelet's, nor descended any deeper.
    let mut next = parts.next();
    let qos = match next.and_then(qos_class) {
        Some(class) => {
            next = parts.next();
            class
        }
        None => "guaranteed",
    };
    let Some(pod) = next else {
        return Some(KubeCgroup::Qos);
    };
    let pod_uid = pod_uid_of(pod)?;
    let Some(container) = parts.next() else {
        return Some(KubeCgroup::Pod);
    };
    let mut labels = vec![("pod_uid", pod_uid), ("qos_class", qos.to_owned())];
    labels.extend(container_id(container).map(|id| ("container_id", id)));
    Some(KubeCgroup::Container(labels))
}

/// `burstable`, `besteffort` (cgroupfs) or `kubepods-burstable.slice` (systemd).
fn qos_class(part: &str) -> Option<&'static str> {
    let class = part
        .strip_prefix("kubepods-")
        .and_then(|p| p.strip_suffix(".slice"))
        .unwrap_or(part);
    match class {
        "burstable" => Some("burstable"),
        "besteffort" => Some("besteffort"),
        _ => None,
    }
}

/// `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid with _ for ->.slice` (systemd).
fn pod_uid_of(part: &str) -> Option<String> {
    let systemd = part.strip_prefix("kubepods-").and_then(|p| {
        let p = p.strip_suffix(".slice")?;
        Some(p.rsplit_once("pod").map_or(p, |(_, uid)| uid))
    });
    let uid = match systemd {
        Some(uid) => uid,
        None => part.strip_prefix("pod")?,
    };
    let uid = uid.replace('_', "-");
    is_uid(&uid).then_some(uid)
}

/// A pod's uid: a UUID, or a static pod's, 32 hex digits (the kubelet's hash of its
/// manifest).
pub(super) fn is_uid(text: &str) -> bool {
    match text.len() {
        36 => text.chars().all(|c| c.is_ascii_hexdigit() || c == '-'),
        32 => text.chars().all(|c| c.is_ascii_hexdigit()),
        _ => false,
    }
}

/// The container's id as the kubelet's API and kube-state-metrics spell it
/// (`containerd://ID`); a bare ID where the path does not name the runtime (cgroupfs);
/// `None` for CRI-O's conmon and what is not a container.
fn container_id(part: &str) -> Option<String> {
    let scoped = |prefix: &str| part.strip_prefix(prefix)?.strip_suffix(".scope");
    let (runtime, id) = if let Some(id) = scoped("cri-containerd-") {
        ("containerd://", id)
    } else if scoped("crio-conmon-").is_some() {
        return None;
    } else if let Some(id) = scoped("crio-") {
        ("cri-o://", id)
    } else if let Some(id) = scoped("docker-") {
        ("docker://", id)
    } else {
        ("", part)
    };
    let hex = id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit());
    hex.then(|| format!("{runtime}{id}"))
}
