//! Where a plugin instance runs: topology, stage, task.

/// Where a plugin instance runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskContext {
    /// Topology name.
    pub topology: String,
    /// Name of the source, stage or sink in the topology.
    pub stage: String,
    /// Index of this task within its stage.
    pub task_index: u32,
    /// Number of tasks of this stage.
    pub parallelism: u32,
}

macro_rules! from_wit_context {
    ($world:ident) => {
        impl From<crate::__private::$world::fv::plugin::types::TaskContext> for TaskContext {
            fn from(t: crate::__private::$world::fv::plugin::types::TaskContext) -> Self {
                TaskContext {
                    topology: t.topology,
                    stage: t.stage,
                    task_index: t.task_index,
                    parallelism: t.parallelism,
                }
            }
        }
    };
}
from_wit_context!(source_world);
from_wit_context!(sink_world);
from_wit_context!(step_world);
from_wit_context!(keyed_world);
