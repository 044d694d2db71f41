//! [`SqlStage`]: a stateless DataFusion query applied to every batch.

use arrow::array::RecordBatch;

use crate::runtime::operator::{Emitter, Operator, TaskError};
use crate::sql::StatelessQuery;

/// Evaluates a planned query on each batch.
pub struct SqlStage {
    stage: String,
    query: StatelessQuery,
}

impl SqlStage {
    /// An operator for `stage` running `query`.
    pub fn new(stage: &str, query: StatelessQuery) -> Self {
        SqlStage {
            stage: stage.to_string(),
            query,
        }
    }
}

impl Operator for SqlStage {
    fn on_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Emitter,
    ) -> Result<(), TaskError> {
        let result = self
            .query
            .evaluate(&batch)
            .map_err(|error| TaskError::Sql {
                stage: self.stage.clone(),
                error,
            })?;
        out.emit(result)
    }
}
