//! The operators, one per file; [`StatefulPlan`], the stateful ones as
//! the executor and the restore check see them (a state format, an output
//! schema, an operator built on a task's [`StateContext`]); and
//! [`StageTask::operator`], which builds any planned task's operator, so
//! the executor never matches on operator kinds.

mod aggregates;
mod join;
mod keyed_step;
mod lookup;
pub(crate) mod rows;
mod session;
mod sink_writer;
mod sql_stage;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;
mod top_n;
mod updating;
mod updating_top_n;
mod wasm_step;
mod window;

use arrow::datatypes::SchemaRef;

pub use join::{IntervalJoin, JoinPlan, WindowJoin, window_bound_fields};
pub use keyed_step::KeyedWasmStep;
pub use lookup::{LookupJoin, LookupPlan, LookupTable};
pub use session::{SessionAggregate, SessionPlan};
pub use sink_writer::{SinkWriter, commit_durable};
pub use sql_stage::SqlStage;
pub use top_n::{TopN, TopNPlan};
pub use updating::{UpdatingAggregate, UpdatingPlan};
pub use updating_top_n::{UpdatingTopN, UpdatingTopNPlan};
pub use wasm_step::WasmStep;
pub use window::{WindowAggregate, WindowPlan, column_names, set_slicing};

use super::checkpoint::StateContext;
use super::operator::{Operator, TaskError};
use super::plan::StageTask;
use crate::state::StateFormat;
use crate::topology::JoinWindow;

/// A stateful stage, planned; cloned per task.
#[derive(Debug, Clone)]
pub enum StatefulPlan {
    /// Tumbling or hopping window aggregates.
    Window(WindowPlan),
    /// Session window aggregates.
    Session(SessionPlan),
    /// Top-N / dedup per window and key.
    TopN(TopNPlan),
    /// Aggregates per key without a window, as a changelog.
    Updating(UpdatingPlan),
    /// The top rows per key without a window, as a changelog.
    UpdatingTopN(UpdatingTopNPlan),
    /// A window or interval join.
    Join(JoinPlan),
}

impl StatefulPlan {
    /// What the state means; a restart refuses state of another format.
    pub fn format(&self) -> StateFormat {
        match self {
            StatefulPlan::Window(p) => p.format(),
            StatefulPlan::Session(p) => p.format(),
            StatefulPlan::TopN(p) => p.format(),
            StatefulPlan::Updating(p) => p.format(),
            StatefulPlan::UpdatingTopN(p) => p.format(),
            StatefulPlan::Join(p) => p.format(),
        }
    }

    /// The rows the stage emits.
    pub fn output_schema(&self) -> SchemaRef {
        match self {
            StatefulPlan::Window(p) => p.output_schema(),
            StatefulPlan::Session(p) => p.output_schema(),
            StatefulPlan::TopN(p) => p.output_schema(),
            StatefulPlan::Updating(p) => p.output_schema(),
            StatefulPlan::UpdatingTopN(p) => p.output_schema(),
            StatefulPlan::Join(p) => p.output_schema(),
        }
    }

    /// The operator of one task, its state restored from `ctx`.
    pub fn operator(self, ctx: StateContext) -> Result<Box<dyn Operator>, TaskError> {
        Ok(match self {
            StatefulPlan::Window(p) => Box::new(WindowAggregate::new(p, ctx)?),
            StatefulPlan::Session(p) => Box::new(SessionAggregate::new(p, ctx)?),
            StatefulPlan::TopN(p) => Box::new(TopN::new(p, ctx)?),
            StatefulPlan::Updating(p) => Box::new(UpdatingAggregate::new(p, ctx)?),
            StatefulPlan::UpdatingTopN(p) => Box::new(UpdatingTopN::new(p, ctx)?),
            StatefulPlan::Join(p) => match p.window() {
                JoinWindow::Tumbling(_) => Box::new(WindowJoin::new(p, ctx)?),
                JoinWindow::Interval { .. } | JoinWindow::Unbounded => {
                    Box::new(IntervalJoin::new(p, ctx)?)
                }
            },
        })
    }
}

impl StageTask {
    /// What the task's state means, if it keeps state in epochs (a
    /// restart refuses state of another format).
    pub fn state_format(&self) -> Option<StateFormat> {
        match self {
            StageTask::Stateful(plan) => Some(plan.format()),
            StageTask::KeyedStep { format, .. } => Some(crate::state::keyed_format(format)),
            StageTask::Sql(_) | StageTask::Step(_) | StageTask::Lookup(_) => None,
        }
    }

    /// The operator that runs this task of stage `stage`; a stateful one
    /// restores its state from the context `state` makes.
    pub fn operator(
        self,
        stage: &str,
        state: impl FnOnce() -> StateContext,
    ) -> Result<Box<dyn Operator>, TaskError> {
        Ok(match self {
            StageTask::Sql(query) => Box::new(SqlStage::new(stage, query)),
            StageTask::Step(instance) => Box::new(WasmStep::new(stage, *instance)),
            StageTask::KeyedStep { instance, format } => {
                Box::new(KeyedWasmStep::new(stage, *instance, format, state())?)
            }
            StageTask::Lookup(plan) => Box::new(LookupJoin::new(stage, plan)?),
            StageTask::Stateful(plan) => plan.operator(state())?,
        })
    }
}
