//! The [`Step`] trait and its adapter to the `fv:plugin/step` interface.

use std::cell::RefCell;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::{Field, Schema, SchemaRef};
use serde::de::DeserializeOwned;

use crate::__private::step_world::exports::fv::plugin::step as wit;
use crate::__private::step_world::fv::plugin::types as wit_types;
use crate::{ConfigError, TaskContext, config, ipc};

/// The input schema with `fields` added: what a step that answers
/// [`StepOutput::Columns`] declares as its [`Step::output_schema`]. A field
/// named like an input column replaces it (same place); the others are
/// appended in order. The host refuses a returned column the output schema
/// does not declare.
///
/// ```
/// use std::sync::Arc;
/// use fv_plugin_sdk::append_fields;
/// use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema};
///
/// let input = Arc::new(Schema::new(vec![Field::new("price", DataType::Int64, false)]));
/// let output = append_fields(&input, [Field::new("euros", DataType::Float64, true)]);
/// assert_eq!(output.fields().len(), 2);
/// ```
pub fn append_fields(input: &SchemaRef, fields: impl IntoIterator<Item = Field>) -> SchemaRef {
    let mut out: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
    for field in fields {
        match out.iter_mut().find(|f| f.name() == field.name()) {
            Some(existing) => *existing = field,
            None => out.push(field),
        }
    }
    std::sync::Arc::new(Schema::new_with_metadata(out, input.metadata().clone()))
}

/// What a step made of one batch.
#[derive(Debug)]
pub enum StepOutput {
    /// Keep the input rows where the mask is `true` (null counts as false).
    /// The cheapest answer for a filter: no row data crosses back.
    Keep(BooleanArray),
    /// Columns to replace (same name) or append, one value per input row.
    /// The input columns not named here flow on unchanged in the host.
    Columns(RecordBatch),
    /// A new batch with [`Step::output_schema`] and any number of rows.
    Batch(RecordBatch),
}

/// One row a step could not process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    /// Index of the row in the batch given to [`Step::process`].
    pub row: u32,
    /// Why.
    pub message: String,
}

/// Why [`Step::process`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessError {
    /// These rows are poison. The host sends them to the dead-letter output
    /// and calls `process` again with the other rows.
    BadRows(Vec<RowError>),
    /// The batch failed as a whole; the stage fails with this message.
    Failed(String),
}

/// A step plugin: user code over batches.
pub trait Step: Sized + 'static {
    /// The plugin's `config` table.
    type Config: DeserializeOwned;

    /// Create the instance for one task from its config and input schema.
    fn open(
        config: Self::Config,
        input: SchemaRef,
        task: &TaskContext,
    ) -> Result<Self, ConfigError>;
    /// The input columns `process` reads; `None` (the default) means all.
    /// Only these columns cross the boundary.
    fn input_columns(&self) -> Option<Vec<String>> {
        None
    }
    /// The schema of the rows leaving the step.
    fn output_schema(&self) -> SchemaRef;
    /// Process one batch (holding only [`Step::input_columns`]).
    fn process(&mut self, batch: RecordBatch) -> Result<StepOutput, ProcessError>;
}

/// Adapts a [`Step`] to the generated WIT resource.
#[doc(hidden)]
pub struct StepAdapter<T> {
    inner: RefCell<T>,
}

impl<T: Step> wit::GuestStep for StepAdapter<T> {
    fn open(
        config: String,
        input_schema: Vec<u8>,
        task: wit_types::TaskContext,
    ) -> Result<wit::Step, wit_types::ConfigError> {
        let task = TaskContext::from(task);
        let (parsed, schema) =
            config::parse_with_schema::<T::Config>(&config, &input_schema).map_err(to_wit)?;
        let inner = T::open(parsed, schema, &task).map_err(to_wit)?;
        Ok(wit::Step::new(StepAdapter {
            inner: RefCell::new(inner),
        }))
    }

    fn input_columns(&self) -> Option<Vec<String>> {
        self.inner.borrow().input_columns()
    }

    fn output_schema(&self) -> Vec<u8> {
        let schema = self.inner.borrow().output_schema();
        ipc::encode_schema(&schema).unwrap_or_default()
    }

    fn process(&self, batch: Vec<u8>) -> Result<wit::StepOutput, wit::ProcessError> {
        let batch = ipc::decode_batch(&batch)
            .map_err(|e| wit::ProcessError::Failed(format!("decoding the input batch: {e}")))?;
        wit_process_answer!(wit, self.inner.borrow_mut().process(batch))
    }
}

/// The answer of a `process` call in a world's generated WIT types
/// (`$wit`: the step world's or the keyed step world's `step` interface,
/// the same shapes under two names): the error as the world's
/// `process-error`, the output encoded as its `step-output`.
macro_rules! wit_process_answer {
    ($wit:ident, $result:expr) => {{
        let output = $result.map_err(|e| match e {
            $crate::ProcessError::BadRows(rows) => $wit::ProcessError::BadRows(
                rows.into_iter()
                    .map(|r| $wit::RowError {
                        row: r.row,
                        message: r.message,
                    })
                    .collect(),
            ),
            $crate::ProcessError::Failed(message) => $wit::ProcessError::Failed(message),
        })?;
        let encode_err = |e: arrow_schema::ArrowError| {
            $wit::ProcessError::Failed(format!("encoding the output: {e}"))
        };
        Ok(match output {
            $crate::StepOutput::Keep(mask) => {
                $wit::StepOutput::Keep($crate::step::mask_bits(&mask))
            }
            $crate::StepOutput::Columns(batch) => {
                $wit::StepOutput::Columns($crate::ipc::encode_batch(&batch).map_err(encode_err)?)
            }
            $crate::StepOutput::Batch(batch) => {
                $wit::StepOutput::Batch($crate::ipc::encode_batch(&batch).map_err(encode_err)?)
            }
        })
    }};
}
pub(crate) use wit_process_answer;

/// Pack a boolean mask as Arrow-order bits, nulls as `false`.
pub(crate) fn mask_bits(mask: &BooleanArray) -> Vec<u8> {
    let values = mask.values();
    if mask.null_count() == 0 && values.offset() == 0 {
        // The common case: the values buffer already is the answer.
        return values.inner().as_slice()[..mask.len().div_ceil(8)].to_vec();
    }
    let mut bits = vec![0u8; mask.len().div_ceil(8)];
    for (i, keep) in mask.iter().enumerate() {
        if keep == Some(true) {
            bits[i / 8] |= 1 << (i % 8);
        }
    }
    bits
}

fn to_wit(e: ConfigError) -> wit_types::ConfigError {
    wit_types::ConfigError {
        key: e.key,
        message: e.message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_bits_are_lsb_first_and_nulls_drop() {
        let mask = BooleanArray::from(vec![
            Some(true),
            None,
            Some(false),
            Some(true),
            None,
            None,
            None,
            None,
            Some(true),
        ]);
        assert_eq!(mask_bits(&mask), vec![0b0000_1001, 0b0000_0001]);
    }
}
