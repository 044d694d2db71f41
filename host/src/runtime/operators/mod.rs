//! The operators, one per file.

mod sink_writer;
mod sql_stage;
mod wasm_step;
mod window;

pub use sink_writer::SinkWriter;
pub use sql_stage::SqlStage;
pub use wasm_step::WasmStep;
pub use window::{WindowAggregate, WindowPlan, column_names};
