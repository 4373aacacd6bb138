//! A [`Snapshot`] in Prometheus's text formats, through the Prometheus project's
//! `prometheus-client` crate: OpenMetrics 1.0 for scrapers that accept it, the classic
//! text format 0.0.4 for the others and for node_exporter's textfile collector.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::export::metrics::ATTRIBUTED_METRICS;
use crate::export::metrics::{
    Labels, Metric, NamedUnit, Snapshot, BUILD_INFO, CPU_TIME, FAULTS, FAULT_TYPES, LAST_UPDATE,
    MEMORY_TYPES, MEMORY_USAGE, PERIOD, PERIOD_FAULTS, SAMPLES_LOST, STALL, STALL_TYPES, SWAP,
    TARGETS_LEFT_OUT, THRASHING, THRASHING_EPISODES, VERSION,
};

/// The two text formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextFormat {
    OpenMetrics,
    /// Prometheus text 0.0.4.
    Classic,
}

impl TextFormat {
    pub fn content_type(self) -> &'static str {
        match self {
            TextFormat::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            TextFormat::Classic => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }

    /// What an HTTP `Accept` header asks for: OpenMetrics when it ranks it at least as
    /// high as the classic text (or says nothing), the classic text when it ranks that
    /// higher or does not take OpenMetrics at all.
    pub fn negotiate(accept: Option<&str>) -> TextFormat {
        let Some(accept) = accept else {
            return TextFormat::OpenMetrics;
        };
        let (mut openmetrics, mut classic) = (0.0f32, 0.0f32);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(q),
                "text/plain" => classic = classic.max(q),
                "*/*" | "text/*" => {
                    openmetrics = openmetrics.max(q * 0.5);
                    classic = classic.max(q * 0.5);
                }
                _ => {}
            }
        }
        if classic > openmetrics {
            TextFormat::Classic
        } else {
            TextFormat::OpenMetrics
        }
    }
}

/// `snapshot` as text in `format`, every series with `labels`.
pub fn encode(snapshot: &Snapshot, labels: &Labels, format: TextFormat) -> String {
    encode_targets(&[(snapshot.clone(), labels.clone())], None, format)
}

/// What a fleet monitor says of itself beside its targets' series.
#[derive(Clone, Copy, Debug)]
pub struct FleetGauges<'a> {
    /// Cgroups found but not profiled (`--max-targets`).
    pub left_out: usize,
    pub monitor_pid: &'a str,
}

/// Every target's snapshot as text in `format`, each series with its target's labels:
/// one family after the other, each target's series of a family together; then what a
/// fleet monitor says of itself.
pub fn encode_targets(
    targets: &[(Snapshot, Labels)],
    fleet: Option<FleetGauges>,
    format: TextFormat,
) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector {
        targets: targets.to_vec(),
        fleet: fleet.map(|f| (f.left_out, f.monitor_pid.to_owned())),
    }));
    let mut text = String::new();
    // Writing to a String cannot fail, and the collector's own values are plain numbers.
    let encoded = match format {
        TextFormat::OpenMetrics => prometheus_client::encoding::text::encode(&mut text, &registry),
        TextFormat::Classic => {
            prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
        }
    };
    debug_assert!(encoded.is_ok());
    text
}

#[derive(Debug)]
struct SnapshotCollector {
    targets: Vec<(Snapshot, Labels)>,
    /// A fleet monitor's cgroups left out, and its pid.
    fleet: Option<(usize, String)>,
}

fn descriptor<'a>(
    encoder: &'a mut DescriptorEncoder,
    metric: &'a Metric,
    kind: MetricType,
) -> Result<prometheus_client::encoding::MetricEncoder<'a>, std::fmt::Error> {
    const SECONDS: Unit = Unit::Seconds;
    const BYTES: Unit = Unit::Bytes;
    let unit = metric.unit.map(|unit| match unit {
        NamedUnit::Seconds => &SECONDS,
        NamedUnit::Bytes => &BYTES,
    });
    encoder.encode_descriptor(metric.prometheus, metric.help, unit, kind)
}

/// A target's labels and one more.
fn with<'a>(labels: &'a Labels, key: &'static str, value: &'a str) -> Vec<(&'static str, &'a str)> {
    let mut pairs = labels.pairs();
    pairs.push((key, value));
    pairs
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_faults(&mut encoder)?;
        self.encode_cpu_and_period(&mut encoder)?;
        self.encode_memory(&mut encoder)?;
        self.encode_stall(&mut encoder)?;
        self.encode_thrashing(&mut encoder)?;
        self.encode_attributed(&mut encoder)?;
        let mut info = descriptor(&mut encoder, &BUILD_INFO, MetricType::Gauge)?;
        for (_, labels) in &self.targets {
            info.encode_family(&with(labels, "version", VERSION))?
                .encode_gauge(&1i64)?;
        }
        if let Some((left_out, monitor_pid)) = &self.fleet {
            descriptor(&mut encoder, &TARGETS_LEFT_OUT, MetricType::Gauge)?
                .encode_family(&[("monitor_pid", monitor_pid.as_str())])?
                .encode_gauge(&gauge_int(*left_out as u64))?;
        }
        Ok(())
    }
}

impl SnapshotCollector {
    fn encode_faults(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut faults = descriptor(encoder, &FAULTS, MetricType::Counter)?;
        for (s, labels) in &self.targets {
            for (fault_type, count) in FAULT_TYPES.into_iter().zip(s.faults) {
                faults
                    .encode_family(&with(labels, "system_paging_fault_type", fault_type))?
                    .encode_counter::<NoLabelSet, _, u64>(&count, None)?;
            }
        }
        let mut per_period = descriptor(encoder, &PERIOD_FAULTS, MetricType::Histogram)?;
        for (s, labels) in &self.targets {
            for (fault_type, histogram) in FAULT_TYPES.into_iter().zip(&s.per_period) {
                per_period
                    .encode_family(&with(labels, "system_paging_fault_type", fault_type))?
                    .encode_histogram::<NoLabelSet>(
                        histogram.sum as f64,
                        histogram.count(),
                        &histogram.bounded(),
                        None,
                    )?;
            }
        }
        Ok(())
    }

    fn encode_cpu_and_period(
        &self,
        encoder: &mut DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let mut cpu = descriptor(encoder, &CPU_TIME, MetricType::Counter)?;
        for (s, labels) in &self.targets {
            cpu.encode_family(&labels.pairs())?
                .encode_counter::<NoLabelSet, _, f64>(&s.cpu_seconds(), None)?;
        }
        let mut lost = descriptor(encoder, &SAMPLES_LOST, MetricType::Counter)?;
        for (s, labels) in &self.targets {
            lost.encode_family(&labels.pairs())?
                .encode_counter::<NoLabelSet, _, u64>(&s.lost, None)?;
        }
        let mut period = descriptor(encoder, &PERIOD, MetricType::Gauge)?;
        for (s, labels) in &self.targets {
            period
                .encode_family(&labels.pairs())?
                .encode_gauge(&s.period_seconds())?;
        }
        let mut updated = descriptor(encoder, &LAST_UPDATE, MetricType::Gauge)?;
        for (s, labels) in &self.targets {
            updated
                .encode_family(&labels.pairs())?
                .encode_gauge(&s.updated_seconds())?;
        }
        Ok(())
    }

    /// Memory by type and swap.
    fn encode_memory(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut usage = descriptor(encoder, &MEMORY_USAGE, MetricType::Gauge)?;
        for (s, labels) in &self.targets {
            for (memory_type, bytes) in MEMORY_TYPES.into_iter().zip(s.memory) {
                usage
                    .encode_family(&with(labels, "pfprof_memory_type", memory_type))?
                    .encode_gauge(&gauge_int(bytes))?;
            }
        }
        let mut swap = descriptor(encoder, &SWAP, MetricType::Gauge)?;
        for (s, labels) in &self.targets {
            swap.encode_family(&labels.pairs())?
                .encode_gauge(&gauge_int(s.swap))?;
        }
        Ok(())
    }

    /// The stall, of the targets whose kernel has PSI (none or all of them).
    fn encode_stall(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stalled: Vec<_> = (self.targets.iter())
            .filter_map(|(s, labels)| Some((s.stall_seconds()?, labels)))
            .collect();
        if stalled.is_empty() {
            return Ok(());
        }
        let mut family = descriptor(encoder, &STALL, MetricType::Counter)?;
        for (stall, labels) in stalled {
            for (stall_type, seconds) in STALL_TYPES.into_iter().zip(stall) {
                family
                    .encode_family(&with(labels, "pfprof_stall_type", stall_type))?
                    .encode_counter::<NoLabelSet, _, f64>(&seconds, None)?;
            }
        }
        Ok(())
    }

    /// Faults by mapping and by program, of the targets whose faults were attributed:
    /// the major ones, and the minor ones estimated under a name of their own.
    fn encode_attributed(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let attributed: Vec<_> = (self.targets.iter())
            .filter_map(|(s, labels)| Some((s.attributed.as_ref()?.families(), labels)))
            .collect();
        if attributed.is_empty() {
            return Ok(());
        }
        for (i, metrics) in ATTRIBUTED_METRICS.into_iter().enumerate() {
            // By function only where asked for: no family of no series otherwise.
            if !attributed.iter().any(|(families, _)| families.len() > i) {
                continue;
            }
            for (metric, fault_type, count) in metrics {
                let mut family = descriptor(encoder, metric, MetricType::Counter)?;
                for (families, labels) in &attributed {
                    for point in families.get(i).into_iter().flatten() {
                        let mut pairs = with(labels, "system_paging_fault_type", fault_type);
                        pairs.extend(
                            point
                                .labels
                                .iter()
                                .map(|(key, value)| (*key, value.as_str())),
                        );
                        family
                            .encode_family(&pairs)?
                            .encode_counter::<NoLabelSet, _, u64>(&count(point), None)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The verdict as a state, of the targets whose rows had stall to judge by.
    fn encode_thrashing(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let judged: Vec<_> = (self.targets.iter())
            .filter(|(s, _)| s.thrashing.judged)
            .map(|(s, labels)| (s.thrashing, labels))
            .collect();
        if judged.is_empty() {
            return Ok(());
        }
        let mut now = descriptor(encoder, &THRASHING, MetricType::Gauge)?;
        for (thrashing, labels) in &judged {
            now.encode_family(&labels.pairs())?
                .encode_gauge(&i64::from(thrashing.now))?;
        }
        let mut episodes = descriptor(encoder, &THRASHING_EPISODES, MetricType::Counter)?;
        for (thrashing, labels) in &judged {
            episodes
                .encode_family(&labels.pairs())?
                .encode_counter::<NoLabelSet, _, u64>(&thrashing.episodes, None)?;
        }
        Ok(())
    }
}

fn gauge_int(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::metrics::ThrashingState;
    use crate::rows::row::Row;

    fn labels() -> Labels {
        Labels {
            target: "work".into(),
            backend: "procfs".into(),
            mode: "strict".into(),
            monitor_pid: "7".into(),
            derived: Vec::new(),
        }
    }

    fn snapshot() -> Snapshot {
        let mut s = Snapshot {
            period_ns: 50_000_000,
            updated_unix_ms: 1_767_225_600_125,
            ..Snapshot::default()
        };
        for (minor, major) in [(0, 0), (12, 1), (3_000, 0)] {
            s.add(&Row {
                time_ms: 0,
                mono_ns: 0,
                minor,
                major,
                cpu_ns: 250_000_000,
                cpu_util: 0.0,
                period_ns: 50_000_000,
                ..Row::default()
            });
        }
        s
    }

    #[test]
    fn openmetrics_carries_the_translated_names_with_their_labels_and_ends_with_eof() {
        let text = encode(&snapshot(), &labels(), TextFormat::OpenMetrics);
        for line in [
            "# TYPE process_paging_faults counter",
            r#"process_paging_faults_total{target="work",backend="procfs",mode="strict",monitor_pid="7",system_paging_fault_type="minor"} 3012"#,
            r#"process_paging_faults_total{target="work",backend="procfs",mode="strict",monitor_pid="7",system_paging_fault_type="major"} 1"#,
            "# UNIT process_cpu_time_seconds seconds",
            r#"process_cpu_time_seconds_total{target="work",backend="procfs",mode="strict",monitor_pid="7"} 0.75"#,
            r#"pfprof_period_faults_count{target="work",backend="procfs",mode="strict",monitor_pid="7",system_paging_fault_type="minor"} 3"#,
            r#"pfprof_period_faults_bucket{le="0.0",target="work",backend="procfs",mode="strict",monitor_pid="7",system_paging_fault_type="minor"} 1"#,
            r#"pfprof_period_faults_bucket{le="100.0",target="work",backend="procfs",mode="strict",monitor_pid="7",system_paging_fault_type="minor"} 2"#,
            r#"pfprof_period_faults_bucket{le="+Inf",target="work",backend="procfs",mode="strict",monitor_pid="7",system_paging_fault_type="minor"} 3"#,
            r#"pfprof_samples_lost_total{target="work",backend="procfs",mode="strict",monitor_pid="7"} 0"#,
            r#"pfprof_period_seconds{target="work",backend="procfs",mode="strict",monitor_pid="7"} 0.05"#,
            "# TYPE pfprof_last_update_timestamp_seconds gauge",
            "# UNIT pfprof_last_update_timestamp_seconds seconds",
            r#"pfprof_last_update_timestamp_seconds{target="work",backend="procfs",mode="strict",monitor_pid="7"} 1767225600.125"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn memory_stall_thrashing_and_the_build_are_exported_and_the_verdict_only_when_judged() {
        let mut s = snapshot();
        s.memory = [3 << 20, 1 << 20, 4096];
        s.swap = 8192;
        let unjudged = encode(&s, &labels(), TextFormat::OpenMetrics);
        assert!(!unjudged.contains("pfprof_thrashing"), "{unjudged}");
        assert!(!unjudged.contains("pfprof_memory_stall"), "{unjudged}");
        s.stall_us = Some([1_500_000, 250_000]);
        s.thrashing = ThrashingState {
            judged: true,
            now: true,
            episodes: 2,
        };
        let text = encode(&s, &labels(), TextFormat::OpenMetrics);
        let base = r#"target="work",backend="procfs",mode="strict",monitor_pid="7""#;
        for line in [
            "# UNIT process_memory_usage_bytes bytes".to_owned(),
            format!(r#"process_memory_usage_bytes{{{base},pfprof_memory_type="anon"}} 3145728"#),
            format!(r#"process_memory_usage_bytes{{{base},pfprof_memory_type="shmem"}} 4096"#),
            format!("pfprof_memory_swap_bytes{{{base}}} 8192"),
            format!(r#"pfprof_memory_stall_seconds_total{{{base},pfprof_stall_type="some"}} 1.5"#),
            format!(r#"pfprof_memory_stall_seconds_total{{{base},pfprof_stall_type="full"}} 0.25"#),
            format!("pfprof_thrashing{{{base}}} 1"),
            format!("pfprof_thrashing_episodes_total{{{base}}} 2"),
            format!(r#"pfprof_build_info{{{base},version="{VERSION}"}} 1"#),
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
    }

    #[test]
    fn the_classic_format_names_counters_by_their_samples_and_has_no_eof() {
        let text = encode(&snapshot(), &labels(), TextFormat::Classic);
        assert!(
            text.contains("# TYPE process_paging_faults_total counter\n"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
        assert!(!text.contains("# UNIT"), "{text}");
    }

    #[test]
    fn a_label_value_with_quotes_and_newlines_is_escaped() {
        let mut l = labels();
        l.target = "a\"b\nc\\".into();
        let text = encode(&snapshot(), &l, TextFormat::OpenMetrics);
        assert!(text.contains(r#"target="a\"b\nc\\""#), "{text}");
    }

    #[test]
    fn a_cgroup_named_to_inject_a_series_stays_inside_its_own_label() {
        let mut evil = labels();
        evil.target = "/evil\"} 1e9\nprocess_paging_faults_total{target=\"/victim".into();
        let mut victim = labels();
        victim.target = "/victim".into();
        let gauges = FleetGauges {
            left_out: 3,
            monitor_pid: "7",
        };
        for format in [TextFormat::OpenMetrics, TextFormat::Classic] {
            let targets = [(snapshot(), evil.clone()), (snapshot(), victim.clone())];
            let text = encode_targets(&targets, Some(gauges), format);
            let faults: Vec<&str> = (text.lines())
                .filter(|l| l.starts_with("process_paging_faults_total{"))
                .collect();
            // Two fault types of two targets, the victim's only twice.
            assert_eq!(faults.len(), 4, "{text}");
            let victims = faults
                .iter()
                .filter(|l| l.contains("{target=\"/victim\""))
                .count();
            assert_eq!(victims, 2, "{text}");
            assert!(
                text.contains(
                    r#"target="/evil\"} 1e9\nprocess_paging_faults_total{target=\"/victim""#
                ),
                "{text}"
            );
            assert!(
                text.contains("pfprof_targets_left_out{monitor_pid=\"7\"} 3\n"),
                "{text}"
            );
        }
    }

    /// A snapshot whose faults were attributed: a file named to break out of its label,
    /// a heap, the others and the lost.
    fn attributed() -> Snapshot {
        use crate::attribution::table::Builder;
        use crate::attribution::ProcessFaults;
        use crate::attribution::{Faults, Mapping, MappingKind, Tally};
        use crate::export::attribution::AttributedSeries;
        let hostile = "/tmp/x\"} 1e9\nprocess_paging_faults_total{target=\"victim\\";
        let file = Mapping {
            kind: MappingKind::Shared,
            name: hostile.into(),
            file: None,
            owner: None,
        };
        let heap = Mapping {
            kind: MappingKind::Heap,
            name: "[heap]".into(),
            file: None,
            owner: Some(42),
        };
        let faults = |major, minor_samples| Faults {
            major,
            minor_samples,
        };
        let mut m = AttributedSeries::new(61);
        // Process 42, work, took them all.
        let interval = |file_faults, heap_faults| {
            let mut builder = Builder::default();
            builder.add(42, std::sync::Arc::new(file.clone()), file_faults);
            builder.add(42, std::sync::Arc::new(heap.clone()), heap_faults);
            let work = ProcessFaults {
                pid: 42,
                comm: "work".into(),
                minor: 9,
                major: 1,
            };
            let mut tally = Tally::default();
            tally.add(&builder.finish(0, Faults::default(), vec![work]));
            tally
        };
        // Named with their first faults.
        m.add_interval(&interval(faults(5, 0), faults(0, 1)), 1);
        m.add_interval(&interval(faults(30, 2), faults(1, 10)), 2);
        Snapshot {
            attributed: Some(m),
            ..snapshot()
        }
    }

    #[test]
    fn the_faults_by_mapping_and_program_carry_their_labels_escaped_major_exact_and_minor_estimated(
    ) {
        let text = encode(&attributed(), &labels(), TextFormat::OpenMetrics);
        let base = r#"target="work",backend="procfs",mode="strict",monitor_pid="7""#;
        let file = r#"mapping="/tmp/x\"} 1e9\nprocess_paging_faults_total{target=\"victim\\",mapping_kind="shared""#;
        for line in [
            "# TYPE pfprof_mapping_faults counter".to_owned(),
            format!(
                r#"pfprof_mapping_faults_total{{{base},system_paging_fault_type="major",{file}}} 35"#
            ),
            format!(
                r#"pfprof_mapping_faults_total{{{base},system_paging_fault_type="major",mapping="[heap]",mapping_kind="heap",program="work"}} 1"#
            ),
            format!(
                r#"pfprof_mapping_faults_total{{{base},system_paging_fault_type="major",mapping="[other]"}} 0"#
            ),
            format!(
                r#"pfprof_mapping_faults_total{{{base},system_paging_fault_type="major",mapping="[lost]"}} 0"#
            ),
            "# TYPE pfprof_mapping_estimated_faults counter".to_owned(),
            format!(
                r#"pfprof_mapping_estimated_faults_total{{{base},system_paging_fault_type="minor",{file}}} 122"#
            ),
            format!(
                r#"pfprof_mapping_estimated_faults_total{{{base},system_paging_fault_type="minor",mapping="[heap]",mapping_kind="heap",program="work"}} 671"#
            ),
            format!(
                r#"pfprof_mapping_estimated_faults_total{{{base},system_paging_fault_type="minor",mapping="[other]"}} 0"#
            ),
            "# TYPE pfprof_program_faults counter".to_owned(),
            format!(
                r#"pfprof_program_faults_total{{{base},system_paging_fault_type="major",program="work"}} 36"#
            ),
            format!(
                r#"pfprof_program_faults_total{{{base},system_paging_fault_type="major",program="[other]"}} 0"#
            ),
            "# TYPE pfprof_program_estimated_faults counter".to_owned(),
            format!(
                r#"pfprof_program_estimated_faults_total{{{base},system_paging_fault_type="minor",program="work"}} 793"#
            ),
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        // The file's name stays inside its label: no line of a series of its making.
        for format in [TextFormat::OpenMetrics, TextFormat::Classic] {
            let text = encode(&attributed(), &labels(), format);
            let faults = (text.lines())
                .filter(|l| l.starts_with("process_paging_faults_total"))
                .count();
            assert_eq!(faults, 2, "{text}");
            let by_mapping = (text.lines())
                .filter(|l| l.starts_with("pfprof_mapping_"))
                .count();
            assert_eq!(by_mapping, 8, "{text}");
        }
    }

    #[test]
    fn without_attribution_no_series_by_mapping_is_exported() {
        let text = encode(&snapshot(), &labels(), TextFormat::OpenMetrics);
        assert!(!text.contains("pfprof_mapping"), "{text}");
    }

    #[test]
    fn the_accept_header_picks_the_format() {
        let prometheus_2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(
            TextFormat::negotiate(Some(prometheus_2)),
            TextFormat::OpenMetrics
        );
        assert_eq!(TextFormat::negotiate(None), TextFormat::OpenMetrics);
        assert_eq!(TextFormat::negotiate(Some("*/*")), TextFormat::OpenMetrics);
        assert_eq!(
            TextFormat::negotiate(Some("text/plain;version=0.0.4")),
            TextFormat::Classic
        );
        assert_eq!(
            TextFormat::negotiate(Some(
                "application/openmetrics-text;q=0.2,text/plain;version=0.0.4;q=0.9"
            )),
            TextFormat::Classic
        );
    }
}
