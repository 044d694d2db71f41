//! `/metrics`: the counters of every hosted topology in the Prometheus text
//! exposition format (version 0.0.4). Reads status records; writes text.

use std::fmt::Write;

use crate::runtime::status::{ExchangeStatus, RunState, StatusRecord};

/// A histogram family: name, help, and the stage's histogram if it has one.
type HistogramFamily = (
    &'static str,
    &'static str,
    fn(&crate::runtime::status::StageStatus) -> Option<&crate::runtime::metrics::LatencySnapshot>,
);

/// One metric family: name, type, help, and how to read it per stage.
struct StageFamily {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&crate::runtime::status::StageStatus) -> u64,
}

const STAGE_FAMILIES: &[StageFamily] = &[
    StageFamily {
        name: "fvhost_stage_rows_in_total",
        kind: "counter",
        help: "Rows received by a source, stage or sink.",
        value: |s| s.rows_in,
    },
    StageFamily {
        name: "fvhost_stage_rows_out_total",
        kind: "counter",
        help: "Rows sent on by a source or stage, written by a sink.",
        value: |s| s.rows_out,
    },
    StageFamily {
        name: "fvhost_stage_dead_lettered_rows_total",
        kind: "counter",
        help: "Poison rows sent to the dead-letter sink (or counted without one).",
        value: |s| s.dead_lettered,
    },
    StageFamily {
        name: "fvhost_stage_late_rows_total",
        kind: "counter",
        help: "Rows dropped (or sent to late_rows) because their windows had fired.",
        value: |s| s.late_rows,
    },
    StageFamily {
        name: "fvhost_stage_plugin_restarts_total",
        kind: "counter",
        help: "Plugin instances a stage re-created after a trap (each lost the plugin's state).",
        value: |s| s.restarts,
    },
    StageFamily {
        name: "fvhost_stage_state_groups",
        kind: "gauge",
        help: "Groups (or rows) a stateful stage holds now.",
        value: |s| s.state_groups,
    },
];

/// A per-topology gauge: name, help, and how to read it from a record.
type TopologyGauge = (&'static str, &'static str, fn(&StatusRecord) -> Option<f64>);

/// A per-plugin counter: name, help, and how to read it.
type PluginFamily = (
    &'static str,
    &'static str,
    fn(&crate::plugin::usage::PluginUsage) -> String,
);

/// A per-node network counter: name, help, and how to read it.
type NetworkFamily = (
    &'static str,
    &'static str,
    fn(&crate::plugin::network::NetworkUse) -> u64,
);

/// Escape a label value.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition text for `topologies` (name, state, status record).
pub fn render(topologies: &[(String, RunState, Option<StatusRecord>)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# HELP fvhost_topology_up 1 while the topology runs.");
    let _ = writeln!(out, "# TYPE fvhost_topology_up gauge");
    for (name, state, _) in topologies {
        let _ = writeln!(
            out,
            "fvhost_topology_up{{topology=\"{}\"}} {}",
            label(name),
            u8::from(*state == RunState::Running)
        );
    }
    let topology_gauges: [TopologyGauge; 3] = [
        (
            "fvhost_last_committed_epoch",
            "The last epoch whose manifest is durable.",
            |r| r.last_committed_epoch.map(|e| e as f64),
        ),
        (
            "fvhost_checkpoint_duration_seconds",
            "How long the last checkpoint took, barrier injection to durable manifest.",
            |r| r.last_checkpoint_micros.map(|m| m as f64 / 1e6),
        ),
        (
            "fvhost_checkpoint_size_bytes",
            "Size of the last checkpoint: manifest and state objects.",
            |r| r.last_checkpoint_bytes.map(|b| b as f64),
        ),
    ];
    for (metric, help, value) in topology_gauges {
        let _ = writeln!(out, "# HELP {metric} {help}");
        let _ = writeln!(out, "# TYPE {metric} gauge");
        for (name, _, record) in topologies {
            if let Some(v) = record.as_ref().and_then(value) {
                let _ = writeln!(out, "{metric}{{topology=\"{}\"}} {v}", label(name));
            }
        }
    }
    for family in STAGE_FAMILIES {
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
        for (name, _, record) in topologies {
            for stage in record.iter().flat_map(|r| &r.stages) {
                let _ = writeln!(
                    out,
                    "{}{{topology=\"{}\",stage=\"{}\",kind=\"{}\"}} {}",
                    family.name,
                    label(name),
                    label(&stage.name),
                    label(&stage.kind),
                    (family.value)(stage)
                );
            }
        }
    }
    let now_ms = crate::runtime::status::now_ms() as i64;
    let _ = writeln!(
        out,
        "# HELP fvhost_stage_watermark_lag_seconds Processing time minus the newest watermark the source or stage forwarded."
    );
    let _ = writeln!(out, "# TYPE fvhost_stage_watermark_lag_seconds gauge");
    for (name, _, record) in topologies {
        for stage in record.iter().flat_map(|r| &r.stages) {
            if let Some(w) = stage.watermark_ms {
                let _ = writeln!(
                    out,
                    "fvhost_stage_watermark_lag_seconds{{topology=\"{}\",stage=\"{}\"}} {}",
                    label(name),
                    label(&stage.name),
                    (now_ms - w) as f64 / 1000.0
                );
            }
        }
    }
    // Backpressure: how full each edge's fullest channel is (1: its
    // sender waits), and what waits on the edge in all.
    let _ = writeln!(
        out,
        "# HELP fvhost_edge_fill Messages in the fullest channel of an edge over its capacity (1: the upstream task waits: backpressure)."
    );
    let _ = writeln!(out, "# TYPE fvhost_edge_fill gauge");
    for (name, _, record) in topologies {
        for edge in record.iter().flat_map(|r| &r.edges) {
            let _ = writeln!(
                out,
                "fvhost_edge_fill{{topology=\"{}\",from=\"{}\",to=\"{}\"}} {}",
                label(name),
                label(&edge.from),
                label(&edge.to),
                edge.fullest as f64 / edge.capacity.max(1) as f64
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP fvhost_edge_queued_messages Messages waiting in all the channels of an edge."
    );
    let _ = writeln!(out, "# TYPE fvhost_edge_queued_messages gauge");
    for (name, _, record) in topologies {
        for edge in record.iter().flat_map(|r| &r.edges) {
            let _ = writeln!(
                out,
                "fvhost_edge_queued_messages{{topology=\"{}\",from=\"{}\",to=\"{}\"}} {}",
                label(name),
                label(&edge.from),
                label(&edge.to),
                edge.queued
            );
        }
    }
    exchanges(&mut out, topologies);
    let histograms: [HistogramFamily; 3] = [
        (
            "fvhost_stage_batch_seconds",
            "How long a stage or sink took to handle one batch.",
            |s| s.batch_latency.as_ref(),
        ),
        (
            "fvhost_sink_read_to_write_seconds",
            "From a source's read of the rows to the sink's write of them (per batch).",
            |s| s.read_to_write.as_ref(),
        ),
        (
            "fvhost_sink_read_to_commit_seconds",
            "From the read of an epoch's oldest row to the sink's commit of the epoch.",
            |s| s.read_to_commit.as_ref(),
        ),
    ];
    for (metric, help, histogram) in histograms {
        let _ = writeln!(out, "# HELP {metric} {help}");
        let _ = writeln!(out, "# TYPE {metric} histogram");
        for (name, _, record) in topologies {
            for stage in record.iter().flat_map(|r| &r.stages) {
                let Some(h) = histogram(stage) else {
                    continue;
                };
                let labels = format!(
                    "topology=\"{}\",stage=\"{}\"",
                    label(name),
                    label(&stage.name)
                );
                for (le, n) in h.le_micros.iter().zip(&h.cumulative) {
                    let _ = writeln!(
                        out,
                        "{metric}_bucket{{{labels},le=\"{}\"}} {n}",
                        *le as f64 / 1e6
                    );
                }
                let _ = writeln!(out, "{metric}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(
                    out,
                    "{metric}_sum{{{labels}}} {}",
                    h.sum_micros as f64 / 1e6
                );
                let _ = writeln!(out, "{metric}_count{{{labels}}} {}", h.count);
            }
        }
    }
    let usage = crate::plugin::usage::snapshot();
    let plugin_families: [PluginFamily; 3] = [
        (
            "fvhost_plugin_calls_total",
            "Guarded calls into a plugin (per batch, not per row).",
            |u| u.calls.to_string(),
        ),
        (
            "fvhost_plugin_cpu_seconds_total",
            "CPU time spent inside a plugin's calls.",
            |u| (u.cpu_micros as f64 / 1e6).to_string(),
        ),
        (
            "fvhost_plugin_failures_total",
            "Plugin calls that trapped, timed out or hit the memory limit.",
            |u| u.failures.to_string(),
        ),
    ];
    for (metric, help, value) in plugin_families {
        let _ = writeln!(out, "# HELP {metric} {help}");
        let _ = writeln!(out, "# TYPE {metric} counter");
        for (plugin, u) in &usage {
            let _ = writeln!(out, "{metric}{{plugin=\"{}\"}} {}", label(plugin), value(u));
        }
    }
    let network_families: [NetworkFamily; 8] = [
        (
            "fvhost_plugin_connections_total",
            "TCP connections a plugin node opened through allow_connect.",
            |u| u.connections,
        ),
        (
            "fvhost_plugin_network_refused_total",
            "Connections, lookups, listens and HTTP requests of a plugin node that no grant names.",
            |u| u.refused,
        ),
        (
            "fvhost_plugin_http_requests_total",
            "HTTP requests a plugin node sent through allow_http.",
            |u| u.http_requests,
        ),
        (
            "fvhost_plugin_http_sent_bytes_total",
            "Request body bytes a plugin node sent through allow_http.",
            |u| u.http_bytes_sent,
        ),
        (
            "fvhost_plugin_http_received_bytes_total",
            "Response body bytes a plugin node read through allow_http.",
            |u| u.http_bytes_received,
        ),
        (
            "fvhost_plugin_object_requests_total",
            "Object-store requests a plugin node made through fv:host/objects.",
            |u| u.object_requests,
        ),
        (
            "fvhost_plugin_object_read_bytes_total",
            "Object bytes a plugin node read through fv:host/objects.",
            |u| u.object_bytes_read,
        ),
        (
            "fvhost_plugin_object_written_bytes_total",
            "Object bytes a plugin node uploaded through fv:host/objects.",
            |u| u.object_bytes_written,
        ),
    ];
    for (metric, help, value) in network_families {
        let _ = writeln!(out, "# HELP {metric} {help}");
        let _ = writeln!(out, "# TYPE {metric} counter");
        for (topology, _, record) in topologies {
            for stage in record.iter().flat_map(|r| &r.stages) {
                if let Some(u) = &stage.network {
                    let _ = writeln!(
                        out,
                        "{metric}{{topology=\"{}\",node=\"{}\"}} {}",
                        label(topology),
                        label(&stage.name),
                        value(u)
                    );
                }
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP fvhost_kafka_consumer_lag Records of a partition a Kafka source has not read yet (librdkafka statistics, every 2 s)."
    );
    let _ = writeln!(out, "# TYPE fvhost_kafka_consumer_lag gauge");
    for l in crate::plugin::kafka::lag::snapshot() {
        let _ = writeln!(
            out,
            "fvhost_kafka_consumer_lag{{topology=\"{}\",source=\"{}\",topic=\"{}\",partition=\"{}\"}} {}",
            label(&l.topology),
            label(&l.source),
            label(&l.topic),
            l.partition,
            l.lag
        );
    }
    let _ = writeln!(
        out,
        "# HELP fvhost_cpu_milliseconds_total CPU time of the server process by thread family."
    );
    let _ = writeln!(out, "# TYPE fvhost_cpu_milliseconds_total counter");
    // CPU is per process: every record carries the same sample.
    if let Some(cpu) = topologies.iter().find_map(|(_, _, r)| r.as_ref()?.cpu)
        && let Ok(serde_json::Value::Object(families)) = serde_json::to_value(cpu)
    {
        for (family, ms) in families {
            if let Some(ms) = ms.as_u64() {
                let family = family.trim_end_matches("_ms");
                let _ = writeln!(
                    out,
                    "fvhost_cpu_milliseconds_total{{family=\"{}\"}} {ms}",
                    label(family)
                );
            }
        }
    }
    out
}

/// A cluster member's exchange topics: records and bytes each way, the
/// lag, and records of other generations dropped.
fn exchanges(out: &mut String, topologies: &[(String, RunState, Option<StatusRecord>)]) {
    type Value = fn(&ExchangeStatus) -> u64;
    let families: [(&str, &str, &str, Value); 6] = [
        (
            "fvhost_exchange_records_written_total",
            "counter",
            "Records written to an exchange topic.",
            |e| e.records_out,
        ),
        (
            "fvhost_exchange_bytes_written_total",
            "counter",
            "Bytes (values and headers) written to an exchange topic.",
            |e| e.bytes_out,
        ),
        (
            "fvhost_exchange_records_read_total",
            "counter",
            "Records of this generation read from an exchange topic.",
            |e| e.records_in,
        ),
        (
            "fvhost_exchange_bytes_read_total",
            "counter",
            "Bytes of this generation read from an exchange topic.",
            |e| e.bytes_in,
        ),
        (
            "fvhost_exchange_lag_records",
            "gauge",
            "Records written to an exchange topic and not yet read back.",
            |e| e.lag,
        ),
        (
            "fvhost_exchange_dropped_records_total",
            "counter",
            "Records of other generations (a crashed or replaced incarnation's) dropped on read.",
            |e| e.dropped_other_generations,
        ),
    ];
    for (metric, kind, help, value) in families {
        let _ = writeln!(out, "# HELP {metric} {help}");
        let _ = writeln!(out, "# TYPE {metric} {kind}");
        for (name, _, record) in topologies {
            for e in record.iter().flat_map(|r| &r.exchanges) {
                let _ = writeln!(
                    out,
                    "{metric}{{topology=\"{}\",topic=\"{}\",from=\"{}\",to=\"{}\"}} {}",
                    label(name),
                    label(&e.topic),
                    label(&e.from),
                    label(&e.to),
                    value(e)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::RunControl;
    use crate::runtime::status::two_nodes_with_a_queued_edge;

    /// Each edge's fill (fullest channel over capacity) and what waits on
    /// it reach `/metrics`, labelled by topology and both ends.
    #[test]
    fn edge_fill_is_exported_per_edge() {
        let record = crate::runtime::status::record(
            "t",
            0,
            &two_nodes_with_a_queued_edge(),
            &RunControl::default(),
            RunState::Running,
            None,
        );
        let text = render(&[("t".into(), RunState::Running, Some(record))]);
        assert!(
            text.contains("fvhost_edge_fill{topology=\"t\",from=\"nums\",to=\"out\"} 0.25"),
            "{text}"
        );
        assert!(
            text.contains("fvhost_edge_queued_messages{topology=\"t\",from=\"nums\",to=\"out\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn exchange_topics_are_exported_with_their_counters() {
        let mut record = crate::runtime::status::record(
            "t",
            0,
            &two_nodes_with_a_queued_edge(),
            &RunControl::default(),
            RunState::Running,
            None,
        );
        record.exchanges.push(ExchangeStatus {
            topic: "fv.t.exchange.nums.out.1x2".into(),
            from: "nums".into(),
            to: "out".into(),
            partitions: 2,
            generation: 3,
            records_out: 10,
            bytes_out: 4096,
            records_in: 7,
            bytes_in: 2048,
            lag: 3,
            dropped_other_generations: 5,
            duplicates_dropped: 0,
        });
        let text = render(&[("t".into(), RunState::Running, Some(record))]);
        let labels =
            "{topology=\"t\",topic=\"fv.t.exchange.nums.out.1x2\",from=\"nums\",to=\"out\"}";
        for (metric, value) in [
            ("fvhost_exchange_records_written_total", 10),
            ("fvhost_exchange_bytes_written_total", 4096),
            ("fvhost_exchange_records_read_total", 7),
            ("fvhost_exchange_bytes_read_total", 2048),
            ("fvhost_exchange_lag_records", 3),
            ("fvhost_exchange_dropped_records_total", 5),
        ] {
            assert!(
                text.contains(&format!("{metric}{labels} {value}\n")),
                "{metric}: {text}"
            );
        }
    }
}
