//! The resource every push carries: what sends the metrics, in the semantic conventions'
//! names (the `service.*`, `host.*`, `os.*` and `process.*` attributes an OpenTelemetry
//! SDK's resource detectors give a program), then `OTEL_RESOURCE_ATTRIBUTES` and
//! `OTEL_SERVICE_NAME` over them. The `process.*` attributes are the monitor's own, as a
//! detector would make them: what is profiled (a command, pids, a cgroup, possibly many
//! processes) is each point's `target` attribute.

use nix::unistd::{getuid, User};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use percent_encoding::percent_decode_str;

use super::config::Env;
use super::string;
use crate::export::error::ExportError;
use crate::export::metrics::Labels;
use crate::output::metadata::shortened;

/// The semantic conventions the names follow: 1.38.0 named the fault type attribute
/// `system.paging.fault.type`.
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.38.0";

/// The resource of this monitor, or why `OTEL_RESOURCE_ATTRIBUTES` cannot be used.
pub fn resource(env: Env) -> Result<Resource, ExportError> {
    let mut attributes = detected();
    if let Some(list) = env("OTEL_RESOURCE_ATTRIBUTES") {
        for (key, value) in pairs(&list)? {
            set(&mut attributes, string(&key, &value));
        }
    }
    if let Some(name) = env("OTEL_SERVICE_NAME").filter(|n| !n.is_empty()) {
        set(&mut attributes, string("service.name", &name));
    }
    Ok(Resource {
        attributes,
        ..Resource::default()
    })
}

/// The monitor's `resource` with what a target's labels say of the entity it profiles,
/// in the conventions' names: a Kubernetes container's `k8s.pod.uid`, `k8s.namespace.name`,
/// `k8s.pod.name`, `k8s.container.name`, `container.id` and `container.runtime.name` (the
/// labels keep the kubelet's spelling on each point).
pub fn of_target(resource: &Resource, labels: &Labels) -> Resource {
    let mut resource = resource.clone();
    for (key, value) in &labels.derived {
        match *key {
            "pod_uid" => set(&mut resource.attributes, string("k8s.pod.uid", value)),
            "namespace" => set(
                &mut resource.attributes,
                string("k8s.namespace.name", value),
            ),
            "pod" => set(&mut resource.attributes, string("k8s.pod.name", value)),
            "container" => set(
                &mut resource.attributes,
                string("k8s.container.name", value),
            ),
            "container_id" => {
                let (runtime, id) = match value.split_once("://") {
                    Some((runtime, id)) => (Some(runtime), id),
                    None => (None, value.as_str()),
                };
                set(&mut resource.attributes, string("container.id", id));
                if let Some(runtime) = runtime {
                    set(
                        &mut resource.attributes,
                        string("container.runtime.name", runtime),
                    );
                }
            }
            _ => {}
        }
    }
    resource
}

/// Replaces the attribute of the same key, or adds it.
fn set(attributes: &mut Vec<KeyValue>, attribute: KeyValue) {
    attributes.retain(|a| a.key != attribute.key);
    attributes.push(attribute);
}

/// `key1=value1,key2=value2`, values percent-encoded.
fn pairs(list: &str) -> Result<Vec<(String, String)>, ExportError> {
    list.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| match item.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => Ok((
                key.trim().to_owned(),
                percent_decode_str(value.trim())
                    .decode_utf8_lossy()
                    .into_owned(),
            )),
            _ => Err(ExportError::Setting {
                name: "OTEL_RESOURCE_ATTRIBUTES".into(),
                value: list.to_owned(),
                why: "not key=value pairs separated by commas",
            }),
        })
        .collect()
}

/// What the monitor finds out about itself and its host.
fn detected() -> Vec<KeyValue> {
    let uname = nix::sys::utsname::uname().ok();
    let uname_field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uname
            .as_ref()
            .map(|u| f(u).to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let exe = std::fs::read_link("/proc/self/exe").unwrap_or_default();
    let mut attributes = vec![
        string("service.name", "pfprof"),
        string("service.version", env!("CARGO_PKG_VERSION")),
        string("host.name", &uname_field(|u| u.nodename())),
        string("host.arch", arch(&uname_field(|u| u.machine()))),
        string("os.type", "linux"),
        string("os.version", &uname_field(|u| u.release())),
        KeyValue {
            key: "process.pid".into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::IntValue(i64::from(std::process::id()))),
            }),
            ..KeyValue::default()
        },
        string(
            "process.executable.name",
            &exe.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
        ),
        string("process.executable.path", &exe.to_string_lossy()),
        string(
            "process.command_line",
            &command_line(&redacted(
                std::env::args_os().map(|a| a.to_string_lossy().into_owned()),
            )),
        ),
    ];
    if let Ok(Some(user)) = User::from_uid(getuid()) {
        attributes.push(string("process.owner", &user.name));
    }
    attributes
}

/// `uname -m` as `host.arch` spells it.
fn arch(machine: &str) -> &str {
    match machine {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "i386" | "i686" => "x86",
        other => other,
    }
}

/// The longest `process.command_line`, in characters: a receiver makes every resource
/// attribute a label of every series, and drops or cuts what is longer than it keeps
/// (VictoriaMetrics drops a series with a label value over 4 KiB: every series of a
/// monitor whose command line was long, as `process.command_args`' array, which it
/// renders at some 110 bytes an argument, made it).
pub const MAX_COMMAND_LINE_CHARS: usize = 512;

/// The command line as one string: the arguments joined by spaces, each with a space,
/// a quote or nothing in it in single quotes, within [`MAX_COMMAND_LINE_CHARS`] (its
/// middle left out), control characters replaced.
fn command_line(args: &[String]) -> String {
    let quoted: Vec<String> = (args.iter())
        .map(|a| {
            if !a.is_empty() && !a.contains(|c: char| c.is_whitespace() || "'\"\\".contains(c)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect();
    shortened(&quoted.join(" "), MAX_COMMAND_LINE_CHARS)
}

/// The arguments with every `--otlp-header`'s value hidden: a header often carries a
/// token, which the resource would otherwise store in the collector's backend.
fn redacted(args: impl Iterator<Item = String>) -> Vec<String> {
    let hide = |header: &str| match header.split_once('=') {
        Some((key, _)) => format!("{key}=<redacted>"),
        None => "<redacted>".to_owned(),
    };
    let mut follows_option = false;
    args.map(|arg| {
        let shown = match arg.strip_prefix("--otlp-header=") {
            _ if follows_option => hide(&arg),
            Some(header) => format!("--otlp-header={}", hide(header)),
            None => arg.clone(),
        };
        follows_option = arg == "--otlp-header";
        shown
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn attributes(vars: &[(&str, &str)]) -> HashMap<String, String> {
        let vars: HashMap<&str, &str> = vars.iter().copied().collect();
        let resource = resource(&|name| vars.get(name).map(|v| (*v).to_owned())).unwrap();
        resource
            .attributes
            .into_iter()
            .map(|a| {
                let value = match a.value.and_then(|v| v.value) {
                    Some(any_value::Value::StringValue(s)) => s,
                    Some(any_value::Value::IntValue(i)) => i.to_string(),
                    Some(any_value::Value::ArrayValue(a)) => format!("[{}]", a.values.len()),
                    other => format!("{other:?}"),
                };
                (a.key, value)
            })
            .collect()
    }

    #[test]
    fn the_resource_names_the_service_host_and_process_and_the_variables_override_it() {
        let detected = attributes(&[]);
        assert_eq!(detected["service.name"], "pfprof");
        assert_eq!(detected["os.type"], "linux");
        assert_eq!(detected["process.pid"], std::process::id().to_string());
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(
            detected["process.executable.name"],
            exe.file_name().unwrap().to_str().unwrap()
        );
        assert!(!detected["host.name"].is_empty());
        let set = attributes(&[
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=a,deployment.environment.name=prod%2C eu",
            ),
            ("OTEL_SERVICE_NAME", "b"),
        ]);
        assert_eq!(set["service.name"], "b");
        assert_eq!(set["deployment.environment.name"], "prod, eu");
        let vars = [("OTEL_RESOURCE_ATTRIBUTES", "novalue")];
        assert!(resource(&|n| vars.iter().find(|v| v.0 == n).map(|v| v.1.to_owned())).is_err());
    }

    #[test]
    fn the_command_line_is_one_bounded_string_its_arguments_quoted_where_they_must_be() {
        let args: Vec<String> = ["monitor", "run", "--", "sh", "-c", "echo 'hi' there", ""]
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
        assert_eq!(
            command_line(&args),
            r"monitor run -- sh -c 'echo '\''hi'\'' there' ''"
        );
        let long: Vec<String> = (0..400).map(|i| format!("--arg{i}\n")).collect();
        let line = command_line(&long);
        assert_eq!(line.chars().count(), MAX_COMMAND_LINE_CHARS);
        assert!(line.starts_with("'--arg0") && line.contains('…') && !line.contains('\n'));
    }

    #[test]
    fn header_values_are_hidden_from_the_command_args() {
        let args = [
            "monitor",
            "--otlp-header",
            "Authorization=Bearer x",
            "--otlp-header=k=v",
            "run",
        ];
        assert_eq!(
            redacted(args.iter().map(|a| (*a).to_owned())),
            [
                "monitor",
                "--otlp-header",
                "Authorization=<redacted>",
                "--otlp-header=k=<redacted>",
                "run"
            ]
        );
    }
}
