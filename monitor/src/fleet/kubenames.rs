//! A Kubernetes container's namespace, pod and container names from what the kubelet
//! writes on the node itself, without the API server: a pod's log directory
//! `/var/log/pods/<namespace>_<pod>_<pod uid>/` (a pod's uid to its names) and a
//! container's link `/var/log/containers/<pod>_<namespace>_<container>-<id>.log` (a
//! container's id to its name). Names are DNS labels and subdomains, which have no `_`:
//! the split is unambiguous. Every file name is hostile input: only names of exactly these
//! shapes are kept, nothing is followed or opened, and a read takes a bounded number.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::kubepods::is_uid;

/// Where the kubelet writes its logs on a node.
pub const LOG_DIR: &str = "/var/log";
/// The most entries one read of a directory looks at. A node runs a few hundred pods at
/// most (the kubelet's `maxPods` defaults to 110), and the links' directory keeps a
/// restarted container's previous link beside its own.
const READ_AT_MOST: usize = 65_536;
/// The most names one read keeps: about 2 MiB of the longest valid ones.
const KEPT_AT_MOST: usize = 4_096;

/// What the node says of one container, as labels: `namespace`, `pod`, `container`, each
/// absent where the node does not say it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    pub labels: Vec<(&'static str, String)>,
    /// Nothing more is to be learnt by looking again: every name was found, or the
    /// directory that would say it is not there.
    pub settled: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct PodNames {
    namespace: String,
    pod: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ContainerLink {
    pod: PodNames,
    container: String,
}

/// The names the kubelet's log layout gives, read lazily and kept between looks.
#[derive(Debug)]
pub struct KubeNames {
    pods: Index<PodNames>,
    containers: Index<ContainerLink>,
    /// A directory is read again for a name it lacked at most this often: a thousand
    /// targets cost one read a look, not one each.
    reread_after: Duration,
}

impl KubeNames {
    /// The layout below `log_dir` ([`LOG_DIR`] on a node), read again for an unknown name
    /// at most every `reread_after` (the fleet's look).
    pub fn new(log_dir: &Path, reread_after: Duration) -> KubeNames {
        KubeNames {
            pods: Index::new(log_dir.join("pods"), pod_directory),
            containers: Index::new(log_dir.join("containers"), container_link),
            reread_after,
        }
    }

    /// The names of the container `container_id` (as the kubelet's API spells it,
    /// `containerd://ID`, or bare; `None` for CRI-O's conmon, which has none) in the pod
    /// `pod_uid`, at `now`.
    pub fn lookup(&mut self, pod_uid: &str, container_id: Option<&str>, now: Instant) -> Names {
        let id = container_id.map(|id| id.rsplit_once("://").map_or(id, |(_, id)| id));
        if let Some(id) = id {
            self.containers.read_for(id, now, self.reread_after);
        }
        self.pods.read_for(pod_uid, now, self.reread_after);
        let link = id.and_then(|id| self.containers.by_key.get(id));
        let by_uid = self.pods.by_key.get(pod_uid);
        // The pod's own directory first; a link names its pod too, where the directory is
        // not there (only /var/log/containers mounted).
        let pod = by_uid.or(link.map(|link| &link.pod));
        let container = link.filter(|link| Some(&link.pod) == pod);
        let mut labels = Vec::new();
        if let Some(pod) = pod {
            labels.push(("namespace", pod.namespace.clone()));
            labels.push(("pod", pod.pod.clone()));
        }
        labels.extend(container.map(|link| ("container", link.container.clone())));
        let settled = (pod.is_some() || !self.pods.present)
            && (id.is_none() || link.is_some() || !self.containers.present);
        Names { labels, settled }
    }
}

/// One directory's names by key, as of its last read.
#[derive(Debug)]
struct Index<T> {
    dir: PathBuf,
    parse: fn(&str) -> Option<(String, T)>,
    by_key: HashMap<String, T>,
    /// `None`: never read.
    read_at: Option<Instant>,
    /// The directory could be read at the last read.
    present: bool,
}

impl<T> Index<T> {
    fn new(dir: PathBuf, parse: fn(&str) -> Option<(String, T)>) -> Index<T> {
        Index {
            dir,
            parse,
            by_key: HashMap::new(),
            read_at: None,
            present: false,
        }
    }

    /// Reads the directory again if it lacks `key` and was last read `reread_after` ago
    /// or more (a pod started since).
    fn read_for(&mut self, key: &str, now: Instant, reread_after: Duration) {
        let due = (self.read_at).is_none_or(|at| now.saturating_duration_since(at) >= reread_after);
        if due && !self.by_key.contains_key(key) {
            self.read(now);
        }
    }

    /// Replaces the names with what the directory holds now: one gone (its pod deleted)
    /// is forgotten. A directory that cannot be read holds none.
    fn read(&mut self, now: Instant) {
        self.read_at = Some(now);
        self.by_key.clear();
        let Ok(entries) = fs::read_dir(&self.dir) else {
            self.present = false;
            return;
        };
        self.present = true;
        for entry in entries.take(READ_AT_MOST).filter_map(Result::ok) {
            if self.by_key.len() >= KEPT_AT_MOST {
                break;
            }
            let name = entry.file_name();
            if let Some((key, value)) = name.to_str().and_then(self.parse) {
                self.by_key.insert(key, value);
            }
        }
    }
}

/// `<namespace>_<pod>_<uid>`: a pod's log directory, by its uid.
fn pod_directory(name: &str) -> Option<(String, PodNames)> {
    let mut parts = name.split('_');
    let (namespace, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let valid =
        parts.next().is_none() && is_dns_label(namespace) && is_dns_subdomain(pod) && is_uid(uid);
    valid.then(|| {
        let names = PodNames {
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
        };
        (uid.to_owned(), names)
    })
}

/// `<pod>_<namespace>_<container>-<64 hex digits of id>.log`: a container's log link,
/// by its id.
fn container_link(name: &str) -> Option<(String, ContainerLink)> {
    const ID_LEN: usize = 64;
    let stem = name.strip_suffix(".log")?;
    let split = stem.len().checked_sub(ID_LEN + 1)?;
    let (named, id) = (stem.get(..split)?, stem.get(split..)?.strip_prefix('-')?);
    let mut parts = named.split('_');
    let (pod, namespace, container) = (parts.next()?, parts.next()?, parts.next()?);
    let valid = parts.next().is_none()
        && id.chars().all(|c| c.is_ascii_hexdigit())
        && is_dns_subdomain(pod)
        && is_dns_label(namespace)
        && is_dns_label(container);
    valid.then(|| {
        let link = ContainerLink {
            pod: PodNames {
                namespace: namespace.to_owned(),
                pod: pod.to_owned(),
            },
            container: container.to_owned(),
        };
        (id.to_ascii_lowercase(), link)
    })
}

/// An RFC 1123 label, as namespaces and containers are named: at most 63 lowercase
/// letters, digits and `-`, a letter or digit at each end.
fn is_dns_label(text: &str) -> bool {
    text.len() <= 63 && is_dns_name(text, |c| c == '-')
}

/// An RFC 1123 subdomain, as pods are named: at most 253 of the label's characters and `.`.
fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && is_dns_name(text, |c| c == '-' || c == '.')
}

fn is_dns_name(text: &str, inner: impl Fn(char) -> bool) -> bool {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ends = text.chars().next().is_some_and(alphanumeric)
        && text.chars().last().is_some_and(alphanumeric);
    ends && text.chars().all(|c| alphanumeric(c) || inner(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f6a3c1e-2b4d-4e8f-9a10-7c5b3d2e1f00";
    const ID: &str = "3b5d8f9e2a7c4b1d6e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d";

    #[test]
    fn a_pods_directory_gives_its_namespace_and_name_by_uid() {
        let (uid, names) = pod_directory(&format!("kube-system_coredns-5d78c9869d-x7k2p_{UID}"))
            .expect("a pod's directory");
        assert_eq!(uid, UID);
        assert_eq!(names.namespace, "kube-system");
        assert_eq!(names.pod, "coredns-5d78c9869d-x7k2p");
        // A static pod's uid is a hash of its manifest: 32 hex digits.
        let hash = "3b8b9b3e0b5c5b1f2b3c5f5a9e1c1b7b";
        let (uid, names) = pod_directory(&format!("kube-system_etcd-node-1.example_{hash}"))
            .expect("a static pod's directory");
        assert_eq!(
            (uid.as_str(), names.pod.as_str()),
            (hash, "etcd-node-1.example")
        );
    }

    #[test]
    fn a_containers_link_gives_its_name_pod_and_namespace_by_id() {
        let (id, link) = container_link(&format!("web-0_shop_nginx-proxy-{ID}.log"))
            .expect("a container's link");
        assert_eq!(id, ID);
        assert_eq!(link.container, "nginx-proxy");
        assert_eq!(link.pod.pod, "web-0");
        assert_eq!(link.pod.namespace, "shop");
    }

    #[test]
    fn names_of_other_shapes_are_not_taken() {
        let pods = [
            "".to_owned(),
            "kube-system_coredns".to_owned(),
            format!("a_b_c_{UID}"),
            format!("Kube-System_coredns_{UID}"),
            format!("-ns_pod_{UID}"),
            format!("ns_pod-_{UID}"),
            format!("ns_pod_{}", &UID[1..]),
            format!("ns_pod_{UID}x"),
            format!("{}_pod_{UID}", "n".repeat(64)),
            format!("ns_{}_{UID}", "p".repeat(254)),
            format!("ns_pöd_{UID}"),
        ];
        for name in &pods {
            assert_eq!(pod_directory(name), None, "{name:?}");
        }
        let links = [
            format!("web-0_shop_nginx-{ID}"),
            format!("web-0_shop_nginx-{ID}.log.1"),
            format!("web-0_shop_nginx{ID}.log"),
            format!("web-0_shop_nginx-{}.log", &ID[1..]),
            format!("web-0_shop_nginx-{}g.log", &ID[1..]),
            format!("web-0_shop_{ID}.log"),
            format!("web-0_shop_a_b-{ID}.log"),
            format!("web-0_shop.x_nginx-{ID}.log"),
            format!("é{}.log", "é".repeat(40)),
            "-.log".to_owned(),
        ];
        for name in &links {
            assert_eq!(container_link(name), None, "{name:?}");
        }
    }

    #[test]
    fn a_read_keeps_a_bounded_number_of_names_whatever_the_directory_holds() {
        let dir = std::env::temp_dir().join(format!("pfprof-kubenames-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("mkdir");
        for i in 0..KEPT_AT_MOST + 100 {
            fs::create_dir(dir.join(format!("ns_pod-{i}_{i:032x}"))).expect("mkdir");
            fs::create_dir(dir.join(format!("junk-{i}"))).expect("mkdir");
        }
        let mut index = Index::new(dir.clone(), pod_directory);
        index.read(Instant::now());
        let _ = fs::remove_dir_all(&dir);
        assert!(index.present);
        assert_eq!(index.by_key.len(), KEPT_AT_MOST);
    }

    #[test]
    fn dns_names_are_bounded_lowercase_and_end_in_a_letter_or_digit() {
        assert!(is_dns_label("a"));
        assert!(is_dns_label(&"a".repeat(63)));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(!is_dns_label("a.b"));
        assert!(is_dns_subdomain("a.b-c"));
        assert!(!is_dns_subdomain("a."));
        assert!(!is_dns_subdomain(""));
        assert!(!is_dns_subdomain("A"));
    }
}
