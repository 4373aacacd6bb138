//! `--otlp`: the snapshot as an OTLP `ExportMetricsServiceRequest` (protobuf, from the
//! OpenTelemetry project's `opentelemetry-proto`), POSTed over HTTP or HTTPS every
//! interval and once at the end, from a thread of its own, with the headers, compression,
//! timeout and certificates of [`config`] and the resource of [`resource`]. Sums are
//! cumulative from the profile's start, so a push that fails loses nothing the next one
//! does not carry; failures are retried with a doubling backoff.
//!
//! The client is ureq with its `rustls` feature: the blocking HTTP/1.1 client the
//! exporter already used, now with rustls (ring, Mozilla's roots built in through
//! webpki-roots): no OpenSSL to link or find at run time, no async runtime, and custom
//! roots and client certificates through ureq's own TLS configuration. Request bodies are
//! gzipped with flate2 (miniz_oxide, pure Rust), the crate ureq itself uses for gzip.

mod config;
mod resource;

pub use config::OtlpOptions;

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flate2::write::GzEncoder;
use flate2::Compression;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric as OtlpMetric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::export::error::ExportError;
use crate::export::metrics::ATTRIBUTED_METRICS;
use crate::export::metrics::{
    Labels, Metric, Snapshot, BUCKETS, BUILD_INFO, CPU_TIME, FAULTS, FAULT_TYPES, LAST_UPDATE,
    MEMORY_TYPES, MEMORY_USAGE, PERIOD, PERIOD_FAULTS, SAMPLES_LOST, STALL, STALL_TYPES, SWAP,
    THRASHING, THRASHING_EPISODES, VERSION,
};
use crate::export::prometheus::http::OneTarget;
use config::{Config, Env};

/// The first wait after a failed push; doubled at each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How the pushes went, for the summary.
#[derive(Clone, Debug, Default)]
struct Delivery {
    attempts: u64,
    delivered: u64,
    last_error: Option<String>,
    /// Rows in the last snapshot the collector received.
    rows_delivered: Option<u64>,
    final_delivered: bool,
}

pub struct Pusher {
    url: String,
    delivery: Arc<Mutex<Delivery>>,
    thread: JoinHandle<()>,
}

/// What stays the same in every push.
struct Identity {
    resource: Resource,
}

/// What a push carries: each target's snapshot with its labels, and whether these are
/// the final values.
pub(crate) struct Values {
    pub targets: Vec<(Snapshot, Arc<Labels>)>,
    pub done: bool,
}

/// What a pusher pushes: one profile's board, or a fleet monitor's targets.
pub(crate) trait Pushed: Send + Sync + 'static {
    /// Waits until `until`, or until the values are final when `urgent`; the values now,
    /// `None` once closed.
    fn wait_values(&self, until: Instant, urgent: bool) -> Option<Values>;
    /// The final values were delivered.
    fn final_pushed(&self);
}

impl Pushed for OneTarget {
    fn wait_values(&self, until: Instant, urgent: bool) -> Option<Values> {
        let snapshot = self.board.wait_until(until, |s| urgent && s.done)?;
        Some(Values {
            done: snapshot.done,
            targets: vec![(snapshot, Arc::clone(&self.labels))],
        })
    }

    fn final_pushed(&self) {
        self.board.set(|s| s.pushed = true);
    }
}

pub(super) fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn string(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..KeyValue::default()
    }
}

impl Pusher {
    /// Checks what `options` and `env` say, and pushes from a thread of its own.
    pub(crate) fn start(
        options: &OtlpOptions,
        env: Env,
        pushed: Arc<dyn Pushed>,
        interval: Duration,
    ) -> Result<Pusher, ExportError> {
        let config = Config::resolve(options, env)?;
        let identity = Identity {
            resource: resource::resource(env)?,
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .proxy(None)
            .http_status_as_error(true)
            .tls_config(config.tls.clone())
            .build()
            .into();
        let url = config.url.clone();
        let sender = Sender { agent, config };
        let delivery = Arc::new(Mutex::new(Delivery::default()));
        let thread = {
            let delivery = Arc::clone(&delivery);
            thread::Builder::new()
                .name("pfprof-otlp".into())
                .spawn(move || push_loop(&sender, pushed.as_ref(), &identity, interval, &delivery))
                .map_err(ExportError::Thread)?
        };
        Ok(Pusher {
            url,
            delivery,
            thread,
        })
    }

    /// The summary's note, and whether the collector received nothing at all. The board
    /// is closed: a push in progress ends by its timeout.
    pub fn finish(self, linger: Duration) -> (String, bool) {
        drop(self.thread);
        let d = self
            .delivery
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let url = &self.url;
        let failed = d.attempts - d.delivered;
        let error = d
            .last_error
            .map(|e| format!(" (last error: {e})"))
            .unwrap_or_default();
        if d.final_delivered {
            let failures = if failed > 0 {
                format!(", {failed} failed and retried{error}")
            } else {
                String::new()
            };
            let note = format!(
                "otlp: {} pushes to {url} delivered{failures}, the last with the final values",
                d.delivered
            );
            return (note, false);
        }
        let received = match d.rows_delivered {
            Some(rows) => format!("the collector has the values up to sample {rows}"),
            None => "the collector has received nothing of this profile".to_owned(),
        };
        let note = format!(
            "otlp: the final values were not delivered to {url} within --linger {linger:?}: \
             {failed} of {} pushes failed{error}; {received}",
            d.attempts
        );
        (note, d.delivered == 0)
    }
}

/// Sends the pushes.
struct Sender {
    agent: ureq::Agent,
    config: Config,
}

impl Sender {
    /// POSTs the targets' snapshots; why it failed.
    fn send(&self, values: &Values, identity: &Identity) -> Result<(), String> {
        let now = unix_ns(SystemTime::now());
        let body = request(&values.targets, identity, now).encode_to_vec();
        let mut post = self
            .agent
            .post(&self.config.url)
            .header("Content-Type", "application/x-protobuf");
        for (name, value) in &self.config.headers {
            post = post.header(name, value);
        }
        let result = if self.config.gzip {
            let body = gzip(&body).map_err(|e| format!("compressing the push: {e}"))?;
            post.header("Content-Encoding", "gzip").send(&body[..])
        } else {
            post.send(&body[..])
        };
        result.map(drop).map_err(|e| e.to_string())
    }
}

fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(body)?;
    encoder.finish()
}

fn push_loop(
    sender: &Sender,
    pushed: &dyn Pushed,
    identity: &Identity,
    interval: Duration,
    delivery: &Mutex<Delivery>,
) {
    let mut next = Instant::now() + interval;
    let mut backoff = FIRST_BACKOFF;
    // The final values failed once: they wait for the backoff like any others.
    let mut final_failed = false;
    loop {
        // The next push when it is due; the final values at once.
        let urgent = !final_failed;
        let Some(values) = pushed.wait_values(next, urgent) else {
            return;
        };
        if !(values.done && urgent) && Instant::now() < next {
            continue;
        }
        let result = sender.send(&values, identity);
        let mut d = delivery.lock().unwrap_or_else(PoisonError::into_inner);
        d.attempts += 1;
        match result {
            Ok(_) => {
                d.delivered += 1;
                d.rows_delivered = Some(values.targets.iter().map(|(s, _)| s.rows()).sum());
                backoff = FIRST_BACKOFF;
                next = Instant::now() + interval;
                if values.done {
                    d.final_delivered = true;
                    drop(d);
                    pushed.final_pushed();
                    return;
                }
            }
            Err(e) => {
                d.last_error = Some(e);
                next = Instant::now() + backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                final_failed = values.done;
            }
        }
    }
}

fn metric(m: &Metric, data: metric::Data) -> OtlpMetric {
    OtlpMetric {
        name: m.otel.to_owned(),
        description: m.help.to_owned(),
        unit: m.otel_unit.to_owned(),
        data: Some(data),
        ..OtlpMetric::default()
    }
}

/// The targets' snapshots as an OTLP request, one resource each, its points taken at
/// `now_unix_ns`.
fn request(
    targets: &[(Snapshot, Arc<Labels>)],
    identity: &Identity,
    now_unix_ns: u64,
) -> ExportMetricsServiceRequest {
    let resource_metrics = targets
        .iter()
        .map(|(snapshot, labels)| {
            let points = Points {
                labels: labels.pairs().iter().map(|(k, v)| string(k, v)).collect(),
                // Each target's sums count from its own start: a fleet's targets
                // come and go.
                start_unix_ns: snapshot.started_unix_ns,
                now_unix_ns,
            };
            ResourceMetrics {
                resource: Some(resource::of_target(&identity.resource, labels)),
                schema_url: resource::SCHEMA_URL.to_owned(),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: "pfprof".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                        ..InstrumentationScope::default()
                    }),
                    metrics: points.metrics(snapshot),
                    schema_url: resource::SCHEMA_URL.to_owned(),
                }],
            }
        })
        .collect();
    ExportMetricsServiceRequest { resource_metrics }
}

/// Makes a target's data points: its labels, the profile's start, and now.
struct Points {
    labels: Vec<KeyValue>,
    start_unix_ns: u64,
    now_unix_ns: u64,
}

impl Points {
    /// Every metric of the snapshot, cumulative from the profile's start.
    fn metrics(&self, s: &Snapshot) -> Vec<OtlpMetric> {
        let labels = || self.labels.clone();
        let faults = FAULT_TYPES
            .iter()
            .zip(s.faults)
            .map(|(t, n)| self.point(self.with_type(t), number_data_point::Value::AsInt(n as i64)))
            .collect();
        let cpu_seconds = number_data_point::Value::AsDouble(s.cpu_seconds());
        let lost = number_data_point::Value::AsInt(s.lost as i64);
        let period = number_data_point::Value::AsDouble(s.period_seconds());
        let updated = number_data_point::Value::AsDouble(s.updated_seconds());
        let mut metrics = vec![
            metric(&FAULTS, sum(faults)),
            metric(&CPU_TIME, sum(vec![self.point(labels(), cpu_seconds)])),
            metric(
                &PERIOD_FAULTS,
                metric::Data::Histogram(Histogram {
                    data_points: self.histograms(s),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                }),
            ),
            metric(&SAMPLES_LOST, sum(vec![self.point(labels(), lost)])),
            metric(&PERIOD, gauge(vec![self.point(labels(), period)])),
            metric(&LAST_UPDATE, gauge(vec![self.point(labels(), updated)])),
        ];
        metrics.extend(self.memory_metrics(s));
        metrics.extend(self.thrashing_metrics(s));
        metrics.extend(self.attributed_metrics(s));
        metrics
    }

    /// Faults by mapping and by program, where they were attributed: every series from
    /// the profile's start.
    fn attributed_metrics(&self, s: &Snapshot) -> Vec<OtlpMetric> {
        let Some(attributed) = s.attributed.as_ref() else {
            return Vec::new();
        };
        let int = |n: u64| number_data_point::Value::AsInt(i64::try_from(n).unwrap_or(i64::MAX));
        let mut metrics = Vec::new();
        for (metrics_of, points) in ATTRIBUTED_METRICS.into_iter().zip(attributed.families()) {
            for (m, fault_type, count) in metrics_of {
                let data = (points.iter())
                    .map(|p| {
                        let mut attributes = self.with("system.paging.fault.type", fault_type);
                        attributes.extend(p.labels.iter().map(|(k, v)| string(k, v)));
                        self.point(attributes, int(count(p)))
                    })
                    .collect();
                metrics.push(metric(m, sum(data)));
            }
        }
        metrics
    }

    /// Memory by type and swap (gauges: an UpDownCounter's level), the stall when the
    /// kernel has PSI, and the build's info.
    fn memory_metrics(&self, s: &Snapshot) -> Vec<OtlpMetric> {
        let int = |n: u64| number_data_point::Value::AsInt(i64::try_from(n).unwrap_or(i64::MAX));
        let usage = MEMORY_TYPES
            .iter()
            .zip(s.memory)
            .map(|(t, bytes)| self.point(self.with("pfprof.memory.type", t), int(bytes)))
            .collect();
        let swap = self.point(self.labels.clone(), int(s.swap));
        let info = self.point(self.with("version", VERSION), int(1));
        let mut metrics = vec![
            metric(&MEMORY_USAGE, gauge(usage)),
            metric(&SWAP, gauge(vec![swap])),
            metric(&BUILD_INFO, gauge(vec![info])),
        ];
        if let Some(stall) = s.stall_seconds() {
            let points = STALL_TYPES
                .iter()
                .zip(stall)
                .map(|(t, secs)| {
                    let value = number_data_point::Value::AsDouble(secs);
                    self.point(self.with("pfprof.stall.type", t), value)
                })
                .collect();
            metrics.push(metric(&STALL, sum(points)));
        }
        metrics
    }

    /// The verdict as a state, once the rows had stall to judge by.
    fn thrashing_metrics(&self, s: &Snapshot) -> Vec<OtlpMetric> {
        let thrashing = s.thrashing;
        if !thrashing.judged {
            return Vec::new();
        }
        let labels = || self.labels.clone();
        let now = number_data_point::Value::AsInt(i64::from(thrashing.now));
        let episodes =
            number_data_point::Value::AsInt(i64::try_from(thrashing.episodes).unwrap_or(i64::MAX));
        vec![
            metric(&THRASHING, gauge(vec![self.point(labels(), now)])),
            metric(
                &THRASHING_EPISODES,
                sum(vec![self.point(labels(), episodes)]),
            ),
        ]
    }

    /// The profile's labels and one more attribute.
    fn with(&self, key: &str, value: &str) -> Vec<KeyValue> {
        let mut attributes = self.labels.clone();
        attributes.push(string(key, value));
        attributes
    }

    /// The faults per period, a histogram for each fault type.
    fn histograms(&self, s: &Snapshot) -> Vec<HistogramDataPoint> {
        FAULT_TYPES
            .iter()
            .zip(&s.per_period)
            .map(|(t, h)| HistogramDataPoint {
                attributes: self.with_type(t),
                start_time_unix_nano: self.start_unix_ns,
                time_unix_nano: self.now_unix_ns,
                count: h.count(),
                sum: Some(h.sum as f64),
                bucket_counts: h.buckets.to_vec(),
                explicit_bounds: BUCKETS.to_vec(),
                ..HistogramDataPoint::default()
            })
            .collect()
    }

    /// The profile's labels and the fault type.
    fn with_type(&self, fault_type: &str) -> Vec<KeyValue> {
        let mut attributes = self.labels.clone();
        attributes.push(string("system.paging.fault.type", fault_type));
        attributes
    }

    fn point(&self, attributes: Vec<KeyValue>, value: number_data_point::Value) -> NumberDataPoint {
        NumberDataPoint {
            attributes,
            start_time_unix_nano: self.start_unix_ns,
            time_unix_nano: self.now_unix_ns,
            value: Some(value),
            ..NumberDataPoint::default()
        }
    }
}

/// A gauge of `points`.
fn gauge(points: Vec<NumberDataPoint>) -> metric::Data {
    metric::Data::Gauge(Gauge {
        data_points: points,
    })
}

/// A cumulative, monotonic sum of `points`.
fn sum(points: Vec<NumberDataPoint>) -> metric::Data {
    metric::Data::Sum(Sum {
        data_points: points,
        aggregation_temporality: AggregationTemporality::Cumulative as i32,
        is_monotonic: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity {
            resource: Resource::default(),
        }
    }

    fn labels(target: &str, derived: Vec<(&'static str, String)>) -> Arc<Labels> {
        Arc::new(Labels {
            target: target.into(),
            backend: "procfs".into(),
            mode: "strict".into(),
            monitor_pid: "7".into(),
            derived,
        })
    }

    fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
        attributes.iter().find(|a| a.key == key).and_then(|a| {
            match a.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(v) => Some(v.as_str()),
                _ => None,
            }
        })
    }

    #[test]
    fn each_target_is_a_resource_of_its_own_with_its_labels_on_its_points() {
        let container = labels(
            "/kubepods/pod1/abc",
            vec![
                ("pod_uid", "1234".into()),
                ("container_id", "containerd://abc".into()),
                ("namespace", "shop".into()),
                ("pod", "web-0".into()),
                ("container", "nginx".into()),
            ],
        );
        let started = |started_unix_ns| Snapshot {
            started_unix_ns,
            ..Snapshot::default()
        };
        let targets = [
            (started(1), labels("/system.slice/a.service", Vec::new())),
            (started(2), container),
        ];
        let decoded = request(&targets, &identity(), 3);
        assert_eq!(decoded.resource_metrics.len(), 2);
        // Each target's sums from its own start: the second came later.
        let start = |i: usize| {
            let metric = &decoded.resource_metrics[i].scope_metrics[0].metrics[0];
            let Some(metric::Data::Sum(sum)) = &metric.data else {
                panic!("faults are not a sum");
            };
            sum.data_points[0].start_time_unix_nano
        };
        assert_eq!((start(0), start(1)), (1, 2));
        let resource = |i: usize| decoded.resource_metrics[i].resource.clone().unwrap();
        let faults = |i: usize| {
            let metric = &decoded.resource_metrics[i].scope_metrics[0].metrics[0];
            let Some(metric::Data::Sum(sum)) = &metric.data else {
                panic!("faults are not a sum");
            };
            sum.data_points[0].attributes.clone()
        };
        assert_eq!(
            attribute(&faults(0), "target"),
            Some("/system.slice/a.service")
        );
        assert_eq!(attribute(&resource(0).attributes, "k8s.pod.uid"), None);
        assert_eq!(attribute(&faults(1), "target"), Some("/kubepods/pod1/abc"));
        assert_eq!(attribute(&faults(1), "pod_uid"), Some("1234"));
        let kube = resource(1).attributes;
        assert_eq!(attribute(&kube, "k8s.pod.uid"), Some("1234"));
        assert_eq!(attribute(&kube, "container.id"), Some("abc"));
        assert_eq!(
            attribute(&kube, "container.runtime.name"),
            Some("containerd")
        );
        assert_eq!(attribute(&faults(1), "pod"), Some("web-0"));
        assert_eq!(attribute(&kube, "k8s.namespace.name"), Some("shop"));
        assert_eq!(attribute(&kube, "k8s.pod.name"), Some("web-0"));
        assert_eq!(attribute(&kube, "k8s.container.name"), Some("nginx"));
    }

    #[test]
    fn the_request_decodes_to_cumulative_sums_and_a_histogram_with_the_snapshot_values() {
        let mut s = Snapshot {
            faults: [40, 2],
            updated_unix_ms: 1_767_225_600_125,
            ..Snapshot::default()
        };
        s.per_period[0].buckets[3] = 5;
        s.per_period[0].sum = 40;
        let bytes = request(&[(s, labels("work", Vec::new()))], &identity(), 2).encode_to_vec();
        let decoded = ExportMetricsServiceRequest::decode(&bytes[..]).unwrap();
        let metrics = &decoded.resource_metrics[0].scope_metrics[0].metrics;
        let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "process.paging.faults",
                "process.cpu.time",
                "pfprof.period.faults",
                "pfprof.samples.lost",
                "pfprof.period",
                "pfprof.last_update.timestamp",
                "process.memory.usage",
                "pfprof.memory.swap",
                "pfprof.build.info"
            ]
        );
        // When the values were posted, not when they were pushed (the point's time).
        let Some(metric::Data::Gauge(updated)) = &metrics[5].data else {
            panic!("the last update is not a gauge");
        };
        assert_eq!(metrics[5].unit, "s");
        assert_eq!(
            updated.data_points[0].value,
            Some(number_data_point::Value::AsDouble(1_767_225_600.125))
        );
        let Some(metric::Data::Sum(faults)) = &metrics[0].data else {
            panic!("faults are not a sum");
        };
        assert!(faults.is_monotonic);
        assert_eq!(
            faults.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        assert_eq!(
            faults.data_points[1].value,
            Some(number_data_point::Value::AsInt(2))
        );
        let Some(metric::Data::Histogram(h)) = &metrics[2].data else {
            panic!("not a histogram");
        };
        assert_eq!(
            (h.data_points[0].count, h.data_points[0].sum),
            (5, Some(40.0))
        );
        assert_eq!(h.data_points[0].bucket_counts.len(), BUCKETS.len() + 1);
    }

    #[test]
    fn the_faults_by_mapping_and_program_are_sums_from_the_profiles_start() {
        use crate::attribution::table::Builder;
        use crate::attribution::{Faults, Mapping, MappingKind, ProcessFaults, Tally};
        use crate::export::attribution::AttributedSeries;
        let file = Arc::new(Mapping {
            kind: MappingKind::Data,
            name: "/srv/a \"b\"\\n".into(),
            file: None,
            owner: None,
        });
        let mut m = AttributedSeries::new(61);
        for (mono_ns, major) in [(5, 3), (6, 4)] {
            let mut tally = Tally::default();
            let faults = Faults {
                major,
                minor_samples: 1,
            };
            let mut builder = Builder::default();
            builder.add(1, Arc::clone(&file), faults);
            let work = ProcessFaults {
                pid: 1,
                comm: "work".into(),
                minor: 2,
                major,
            };
            tally.add(&builder.finish(0, Faults::default(), vec![work]));
            m.add_interval(&tally, mono_ns);
        }
        let s = Snapshot {
            attributed: Some(m),
            started_unix_ns: 1,
            ..Snapshot::default()
        };
        let request = request(&[(s, labels("work", Vec::new()))], &identity(), 9);
        let metrics = &request.resource_metrics[0].scope_metrics[0].metrics;
        let sum_of = |name: &str| {
            let metric = metrics.iter().find(|m| m.name == name).expect(name);
            let Some(metric::Data::Sum(sum)) = &metric.data else {
                panic!("{name} is not a sum");
            };
            assert!(sum.is_monotonic);
            sum.data_points.clone()
        };
        let major = sum_of("pfprof.mapping.faults");
        let minor = sum_of("pfprof.mapping.estimated_faults");
        let mapping = |p: &NumberDataPoint| attribute(&p.attributes, "mapping").map(str::to_owned);
        assert_eq!(
            major.iter().map(mapping).collect::<Vec<_>>(),
            [
                Some("/srv/a \"b\"\\n".into()),
                Some("[other]".into()),
                Some("[lost]".into())
            ]
        );
        // Named with its first faults: every series from the profile's start.
        let value = |p: &NumberDataPoint| (p.start_time_unix_nano, p.value);
        let int = |n| Some(number_data_point::Value::AsInt(n));
        assert_eq!(value(&major[0]), (1, int(7)));
        assert_eq!(value(&major[1]), (1, int(0)));
        assert_eq!(value(&minor[0]), (1, int(122)));
        // By program: the same faults.
        let programs = sum_of("pfprof.program.faults");
        let program = |p: &NumberDataPoint| {
            (
                attribute(&p.attributes, "program").map(str::to_owned),
                p.value,
            )
        };
        assert_eq!(
            programs.iter().map(program).collect::<Vec<_>>(),
            [
                (Some("work".into()), int(7)),
                (Some("[other]".into()), int(0)),
                (Some("[lost]".into()), int(0)),
            ]
        );
        let estimated = sum_of("pfprof.program.estimated_faults");
        assert_eq!(program(&estimated[0]), (Some("work".into()), int(122)));
        assert_eq!(
            attribute(&major[0].attributes, "mapping_kind"),
            Some("data")
        );
        assert_eq!(
            attribute(&minor[0].attributes, "system.paging.fault.type"),
            Some("minor")
        );
    }
}
