//! The operators, one per file.

mod sink_writer;
mod sql_stage;
mod wasm_step;

pub use sink_writer::SinkWriter;
pub use sql_stage::SqlStage;
pub use wasm_step::WasmStep;
