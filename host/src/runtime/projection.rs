//! Projection and filter pushdown: what the topology reads of each source,
//! worked out backwards from the sinks over a planned topology
//! ([`scan_requests`]).
//!
//! It only decides; the planner re-plans the stages on the narrowed
//! schemas and tells the sources. It must never drop a column a consumer
//! could read: where a stage's use of its input is not known column by
//! column, the stage reads all of it. That is the case for top-N, joins
//! and lookups (their state holds whole input rows, so a narrower input
//! would also change what a checkpoint holds), and for a step that reads
//! everything or whose poison rows go to a dead-letter sink (the
//! dead-letter record carries the whole row).

use std::collections::{BTreeMap, BTreeSet};

use crate::plugin::{ColumnFilter, ScanRequest};
use crate::runtime::operators::StatefulPlan;
use crate::runtime::plan::{PlannedSink, PlannedSource, PlannedStage, StageTask};
use crate::topology::{StageKind, Topology};

/// The columns of a node's output some consumer reads.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Columns {
    /// Every column.
    All,
    /// These (possibly none: a consumer that counts rows).
    Named(BTreeSet<String>),
}

impl Columns {
    fn none() -> Self {
        Columns::Named(BTreeSet::new())
    }

    fn of<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        Columns::Named(names.into_iter().map(Into::into).collect())
    }

    fn add(&mut self, other: &Columns) {
        match (self, other) {
            (Columns::All, _) => {}
            (this, Columns::All) => *this = Columns::All,
            (Columns::Named(a), Columns::Named(b)) => a.extend(b.iter().cloned()),
        }
    }
}

/// What each source should be asked to read, for the sources where that
/// is less than everything (or where a filter applies); `push_down =
/// false` in the topology asks nothing.
pub fn scan_requests(
    topology: &Topology,
    sources: &[PlannedSource],
    stages: &[PlannedStage],
    sinks: &[PlannedSink],
) -> BTreeMap<String, ScanRequest> {
    if !topology.settings.push_down {
        return BTreeMap::new();
    }
    let mut demand: BTreeMap<&str, Columns> = BTreeMap::new();
    let mut consumers: BTreeMap<&str, usize> = BTreeMap::new();
    let mut filters: BTreeMap<&str, &[ColumnFilter]> = BTreeMap::new();
    for sink in sinks {
        let Some(node) = topology.sinks.iter().find(|s| s.name == sink.name) else {
            continue;
        };
        if topology.dead_letter.as_deref() == Some(node.name.as_str()) {
            // Dead-letter records have their own schema.
            continue;
        }
        let reads = match sink.tasks.first().and_then(|t| t.input_columns()) {
            Some(columns) => Columns::of(columns.iter().cloned()),
            None => Columns::All,
        };
        // Late rows are the input rows of the stage that drops them.
        let inputs = match topology.late_rows_of(&node.name) {
            Some(stage) => &stage.inputs,
            None => &node.inputs,
        };
        for input in inputs {
            demand
                .entry(input)
                .or_insert_with(Columns::none)
                .add(&reads);
            *consumers.entry(input).or_default() += 1;
        }
    }
    for stage in stages.iter().rev() {
        let Some(node) = topology.stages.iter().find(|s| s.name == stage.name) else {
            continue;
        };
        let out = demand
            .get(stage.name.as_str())
            .cloned()
            .unwrap_or_else(Columns::none);
        let reads = match (&node.kind, stage.tasks.first()) {
            (_, Some(StageTask::Sql(query))) => {
                if let [input] = node.inputs.as_slice() {
                    filters.insert(input, query.filters());
                }
                Columns::of(query.input_columns().iter().cloned())
            }
            (_, Some(StageTask::Step(step))) if topology.dead_letter.is_none() => {
                match (step.input_columns(), out) {
                    // Rows the step keeps flow on with the columns they
                    // came with, so what is read downstream is read here.
                    (Some(columns), Columns::Named(downstream)) => {
                        Columns::of(columns.into_iter().chain(downstream))
                    }
                    _ => Columns::All,
                }
            }
            (StageKind::Window(spec), Some(StageTask::Stateful(StatefulPlan::Window(_)))) => {
                keyed_aggregation(&spec.time, &spec.key, &spec.aggregates)
            }
            (StageKind::Session(spec), Some(StageTask::Stateful(StatefulPlan::Session(_)))) => {
                keyed_aggregation(&spec.time, &spec.key, &spec.aggregates)
            }
            // Some column must be read for rows to arrive at all.
            (
                StageKind::Updating(crate::topology::UpdatingSpec {
                    key,
                    output: crate::topology::UpdatingOutput::Aggregates(aggregates),
                }),
                Some(StageTask::Stateful(StatefulPlan::Updating(_))),
            ) if !key.is_empty() => Columns::of(
                key.iter()
                    .cloned()
                    .chain(aggregates.iter().filter_map(|a| a.column.clone())),
            ),
            _ => Columns::All,
        };
        for input in &node.inputs {
            demand
                .entry(input)
                .or_insert_with(Columns::none)
                .add(&reads);
            *consumers.entry(input).or_default() += 1;
        }
    }
    let mut requests = BTreeMap::new();
    for source in sources {
        let name = source.name.as_str();
        let mut reads = demand.get(name).cloned().unwrap_or_else(Columns::none);
        if let Some(event_time) = &source.event_time {
            // The host reads the event time for watermarks.
            let column = source.schema.field(event_time.column).name();
            reads.add(&Columns::of([column.as_str()]));
        }
        let columns = match reads {
            Columns::Named(names)
                if source
                    .schema
                    .fields()
                    .iter()
                    .any(|f| !names.contains(f.name())) =>
            {
                Some(
                    source
                        .schema
                        .fields()
                        .iter()
                        .map(|f| f.name().clone())
                        .filter(|f| names.contains(f))
                        .collect(),
                )
            }
            _ => None,
        };
        // A filter may be offered only when the SQL stage that holds it is
        // the source's one consumer, and not to a source with event time:
        // rows it skipped would no longer move its watermark, and rows
        // would be judged late differently.
        let filters = match (consumers.get(name), filters.get(name)) {
            (Some(1), Some(f)) if source.event_time.is_none() => f.to_vec(),
            _ => Vec::new(),
        };
        if columns.is_some() || !filters.is_empty() {
            requests.insert(source.name.clone(), ScanRequest { columns, filters });
        }
    }
    requests
}

fn keyed_aggregation(
    time: &str,
    key: &[String],
    aggregates: &[crate::topology::Aggregate],
) -> Columns {
    Columns::of(
        std::iter::once(time.to_string())
            .chain(key.iter().cloned())
            .chain(aggregates.iter().filter_map(|a| a.column.clone())),
    )
}
