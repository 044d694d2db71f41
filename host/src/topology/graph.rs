//! Graph checks: every input exists and produces rows, the dead-letter sink
//! is a sink without inputs, and there is no cycle. Orders stages
//! topologically.

use std::collections::{BTreeMap, BTreeSet};

use super::{Diagnostics, StageKind, Topology};

pub(super) fn check(mut t: Topology) -> Result<Topology, Diagnostics> {
    let map = std::sync::Arc::clone(&t.source_map);
    let mut errors = Vec::new();
    let sources: BTreeSet<&str> = t.sources.iter().map(|s| s.name.as_str()).collect();
    let stages: BTreeSet<&str> = t.stages.iter().map(|s| s.name.as_str()).collect();
    let sinks: BTreeSet<&str> = t.sinks.iter().map(|s| s.name.as_str()).collect();
    let names: BTreeSet<&str> = sources
        .iter()
        .chain(stages.iter())
        .chain(sinks.iter())
        .copied()
        .collect();
    for name in &names {
        let count = [
            sources.contains(name),
            stages.contains(name),
            sinks.contains(name),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if count > 1 {
            errors.push(map.whole_file(format!(
                "the name `{name}` is used by more than one of sources, stages and sinks"
            )));
        }
    }
    if t.sources.is_empty() {
        errors.push(map.whole_file("the topology has no source; add a [sources.<name>] table"));
    }
    let producers: BTreeSet<&str> = sources.union(&stages).copied().collect();
    let check_inputs = |kind: &str, name: &str, inputs: &[String], errors: &mut Vec<_>| {
        for input in inputs {
            if sinks.contains(input.as_str()) {
                errors.push(map.at_key(
                    &format!("{kind}.{name}.input"),
                    format!("`{input}` is a sink; an input must be a source or a stage"),
                ));
            } else if !producers.contains(input.as_str()) {
                let known: Vec<&str> = producers.iter().copied().collect();
                errors.push(map.at_key(
                    &format!("{kind}.{name}.input"),
                    format!(
                        "no source or stage named `{input}` (known: {})",
                        known.join(", ")
                    ),
                ));
            }
        }
    };
    for stage in &t.stages {
        if stage.inputs.is_empty() {
            errors.push(map.at_key(
                &format!("stages.{}", stage.name),
                "a stage needs `input = \"<source or stage>\"`",
            ));
        }
        check_inputs("stages", &stage.name, &stage.inputs, &mut errors);
        if let Some(late) = &stage.late_rows {
            let at = format!("stages.{}.late_rows", stage.name);
            if !sinks.contains(late.as_str()) {
                errors.push(map.at_key(
                    &at,
                    format!("no sink named `{late}`; add a [sinks.{late}] without `input`"),
                ));
            }
            if matches!(stage.kind, StageKind::Join(_)) {
                errors.push(map.at_key(&at, "a join's two inputs have different columns, so its late rows cannot share one sink; they are counted (`late_rows` in the status record)"));
            } else if !matches!(
                stage.kind,
                StageKind::Window(_) | StageKind::Session(_) | StageKind::TopN(_)
            ) {
                errors.push(map.at_key(&at, "`late_rows` is for window, session and top-N stages"));
            }
        }
        match &stage.kind {
            StageKind::Join(_) if stage.inputs.len() != 2 => errors.push(map.at_key(
                &format!("stages.{}.input", stage.name),
                format!(
                    "a join reads exactly two inputs, left then right (`input = [\"left\", \"right\"]`); it has {}",
                    stage.inputs.len()
                ),
            )),
            StageKind::Lookup(l) if !t.tables.iter().any(|table| table.name == l.table) => {
                let known: Vec<&str> = t.tables.iter().map(|t| t.name.as_str()).collect();
                errors.push(map.at_key(
                    &format!("stages.{}.lookup.table", stage.name),
                    format!(
                        "no table named `{}`; add a [tables.{}] table with a bounded source plugin (known tables: {})",
                        l.table,
                        l.table,
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ),
                ));
            }
            _ => {}
        }
    }
    for sink in &t.sinks {
        let is_dlq = t.dead_letter.as_deref() == Some(sink.name.as_str());
        if is_dlq && !sink.inputs.is_empty() {
            errors.push(map.at_key(
                &format!("sinks.{}.input", sink.name),
                "the dead-letter sink receives poison rows only; remove its `input`",
            ));
        }
        let late_of = t
            .stages
            .iter()
            .filter(|s| s.late_rows.as_deref() == Some(sink.name.as_str()))
            .count();
        if late_of > 0 && !sink.inputs.is_empty() {
            errors.push(map.at_key(
                &format!("sinks.{}.input", sink.name),
                "this sink receives a stage's late rows (`late_rows`); remove its `input`",
            ));
        }
        if late_of > 1 {
            errors.push(map.at_key(
                &format!("sinks.{}", sink.name),
                "more than one stage sends its late rows here; give each stage its own `late_rows` sink",
            ));
        }
        if is_dlq && late_of > 0 {
            errors.push(map.at_key(
                &format!("sinks.{}", sink.name),
                "the dead-letter sink cannot also receive late rows",
            ));
        }
        if !is_dlq && late_of == 0 && sink.inputs.is_empty() {
            errors.push(map.at_key(
                &format!("sinks.{}", sink.name),
                "a sink needs `input = \"<source or stage>\"`",
            ));
        }
        check_inputs("sinks", &sink.name, &sink.inputs, &mut errors);
    }
    if let Some(dlq) = &t.dead_letter
        && !sinks.contains(dlq.as_str())
    {
        errors.push(map.at_key("dead_letter", format!("no sink named `{dlq}`")));
    }
    // Cycles among stages (sources have no inputs, sinks no outputs).
    let order = topological_order(&t);
    match order {
        Ok(order) => {
            let mut by_name: BTreeMap<String, _> =
                t.stages.drain(..).map(|s| (s.name.clone(), s)).collect();
            t.stages = order
                .into_iter()
                .filter_map(|n| by_name.remove(&n))
                .collect();
        }
        Err(cycle) => errors.push(map.at_key(
            &format!("stages.{}.input", cycle[0]),
            format!("the stages form a cycle: {}", cycle.join(" → ")),
        )),
    }
    if errors.is_empty() {
        check_windows_have_watermarks(&t, &mut errors);
        check_changelogs_feed_stateless_stages(&t, &mut errors);
    }
    if errors.is_empty() {
        Ok(t)
    } else {
        Err(Diagnostics(errors))
    }
}

/// An updating stage's output is a changelog (rows that retract and
/// replace earlier rows). A stateless stage maps each change on its own,
/// which keeps it a changelog; an updating aggregate takes a changelog's
/// retractions back out of its groups (count, sum and avg: its plan
/// refuses the others) and writes a changelog of its own; any other
/// stateful stage would fold a retraction in as a row (a window would
/// count a `-U` twice over), so it is refused.
fn check_changelogs_feed_stateless_stages(t: &Topology, errors: &mut Vec<super::Diagnostic>) {
    walk_changelogs(t, |stage, input, origin| {
        errors.push(t.source_map.at_key(
            &format!("stages.{}.input", stage.name),
            format!(
                "`{input}` is a changelog (the `{origin}` stage aggregates without a window, so its rows update earlier ones: `op` = +I, -U, +U, -D), and a {} stage takes rows that only add; read it with SQL or plugin stages, an aggregate without a window (count, sum, avg) and sinks, or aggregate per window instead",
                stage.kind.label()
            ),
        ))
    });
}

/// The nodes whose rows are a changelog (see
/// [`check_changelogs_feed_stateless_stages`]).
pub fn changelogs(t: &Topology) -> BTreeSet<String> {
    walk_changelogs(t, |_, _, _| {}).into_keys().collect()
}

/// Follow changelogs through the stages (in topological order), calling
/// `refused(stage, input, origin)` for a stage that cannot read one; the
/// changelog nodes, each with the updating stage it comes from.
fn walk_changelogs(
    t: &Topology,
    mut refused: impl FnMut(&super::StageNode, &str, &str),
) -> BTreeMap<String, String> {
    let mut changelogs: BTreeMap<String, String> = BTreeMap::new();
    for stage in &t.stages {
        let from = stage
            .inputs
            .iter()
            .find_map(|i| changelogs.get(i).map(|origin| (i.clone(), origin.clone())));
        let aggregates = matches!(
            &stage.kind,
            StageKind::Updating(spec) if matches!(spec.output, super::UpdatingOutput::Aggregates(_))
        );
        let Some((input, origin)) = from else {
            if matches!(stage.kind, StageKind::Updating(_)) {
                changelogs.insert(stage.name.clone(), stage.name.clone());
            }
            continue;
        };
        match &stage.kind {
            StageKind::Sql(_) | StageKind::Step(_) | StageKind::Lookup(_) => {
                changelogs.insert(stage.name.clone(), origin);
            }
            _ if aggregates => {
                changelogs.insert(stage.name.clone(), stage.name.clone());
            }
            _ => refused(stage, &input, &origin),
        }
    }
    changelogs
}

/// A window stage (or a keyed step's timers) fires on watermarks: every
/// source upstream of it must
/// declare one, or its windows would fire only when a bounded source ends
/// — and never, with state growing forever, on an unbounded one.
fn check_windows_have_watermarks(t: &Topology, errors: &mut Vec<super::Diagnostic>) {
    for stage in &t.stages {
        if !stage.kind.needs_watermark() {
            continue;
        }
        let mut missing = BTreeSet::new();
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&str> = stage.inputs.iter().map(String::as_str).collect();
        while let Some(name) = todo.pop() {
            if !seen.insert(name) {
                continue;
            }
            if let Some(source) = t.sources.iter().find(|s| s.name == name) {
                if source.event_time.is_none() {
                    missing.insert(name);
                }
            } else if let Some(upstream) = t.stages.iter().find(|s| s.name == name) {
                todo.extend(upstream.inputs.iter().map(String::as_str));
            }
        }
        if !missing.is_empty() {
            let names: Vec<&str> = missing.into_iter().collect();
            let (field, what) = match stage.kind {
                StageKind::Session(_) => (
                    "session",
                    "a session fires when the watermark passes its end",
                ),
                StageKind::Join(_) => ("join", "a join fires when the watermark passes its end"),
                StageKind::KeyedStep(_) => (
                    "key",
                    "a keyed step's timers fire when the watermark passes their time",
                ),
                _ => ("window", "a window fires when the watermark passes its end"),
            };
            let add = if super::is_sql(&t.file) {
                "`WATERMARK FOR <timestamp column> AS <column> - INTERVAL '…' SECOND` in the column list of"
            } else {
                "`watermark = { column = \"<timestamp column>\", delay = \"…\" }` to"
            };
            errors.push(t.source_map.at_key(
                &format!("stages.{}.{field}", stage.name),
                format!(
                    "{what}, but source(s) {} upstream declare no watermark; add {add} {}",
                    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "),
                    if names.len() == 1 { "it" } else { "each" }
                ),
            ));
        }
    }
}

/// Stage names in an order where every input comes first, or a cycle.
fn topological_order(t: &Topology) -> Result<Vec<String>, Vec<String>> {
    let stage_inputs: BTreeMap<&str, Vec<&str>> = t
        .stages
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.inputs
                    .iter()
                    .map(|i| i.as_str())
                    .filter(|i| t.stages.iter().any(|s| s.name == *i))
                    .collect(),
            )
        })
        .collect();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    let mut order = Vec::new();
    // Depth-first with an explicit path, so a cycle can be reported as one.
    fn visit<'a>(
        name: &'a str,
        inputs: &BTreeMap<&'a str, Vec<&'a str>>,
        done: &mut BTreeSet<&'a str>,
        path: &mut Vec<&'a str>,
        order: &mut Vec<String>,
    ) -> Result<(), Vec<String>> {
        if done.contains(name) {
            return Ok(());
        }
        if let Some(pos) = path.iter().position(|p| *p == name) {
            let mut cycle: Vec<String> = path[pos..].iter().map(|s| s.to_string()).collect();
            cycle.push(name.to_string());
            return Err(cycle);
        }
        path.push(name);
        for input in inputs.get(name).into_iter().flatten() {
            visit(input, inputs, done, path, order)?;
        }
        path.pop();
        done.insert(name);
        order.push(name.to_string());
        Ok(())
    }
    for name in stage_inputs.keys() {
        visit(name, &stage_inputs, &mut done, &mut Vec::new(), &mut order)?;
    }
    Ok(order)
}
