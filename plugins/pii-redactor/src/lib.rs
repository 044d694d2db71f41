//! `pii-redactor`: a user step that masks personal data before it leaves
//! the pipeline.
//!
//! For each configured string column it masks e-mail addresses
//! (`alice@example.com` → `a****@example.com`) and payment card numbers
//! (13–19 digits, spaces or dashes allowed → `**** **** **** 1234`). Only the configured columns cross the Wasm
//! boundary, and only they come back ([`StepOutput::Columns`]).
//!
//! With `reject_invalid_cards = true`, a row holding a card-like number
//! that fails the Luhn check is reported as poison (a data-quality check):
//! the host dead-letters it and the rest flows.

use std::sync::Arc;

use fv_plugin_sdk::arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use fv_plugin_sdk::arrow_schema::{DataType, Field, Schema, SchemaRef};
use fv_plugin_sdk::{ConfigError, ProcessError, RowError, Step, StepOutput, TaskContext};

/// The step's `config` table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// String columns to redact.
    pub columns: Vec<String>,
    /// Mask e-mail addresses (default true).
    #[serde(default = "yes")]
    pub emails: bool,
    /// Mask card numbers (default true).
    #[serde(default = "yes")]
    pub cards: bool,
    /// Report card-like numbers that fail the Luhn check as poison rows.
    #[serde(default)]
    pub reject_invalid_cards: bool,
}

fn yes() -> bool {
    true
}

/// The redactor for one task.
pub struct PiiRedactor {
    config: Config,
    input: SchemaRef,
}

impl Step for PiiRedactor {
    type Config = Config;

    fn open(config: Config, input: SchemaRef, _task: &TaskContext) -> Result<Self, ConfigError> {
        if config.columns.is_empty() {
            return Err(ConfigError::at(
                "columns",
                "name at least one string column to redact",
            ));
        }
        for (i, name) in config.columns.iter().enumerate() {
            match input.field_with_name(name) {
                Ok(f) if f.data_type() == &DataType::Utf8 => {}
                Ok(f) => {
                    return Err(ConfigError::at(
                        format!("columns[{i}]"),
                        format!("column `{name}` is {}, not a string", f.data_type()),
                    ));
                }
                Err(_) => {
                    let known: Vec<&str> =
                        input.fields().iter().map(|f| f.name().as_str()).collect();
                    return Err(ConfigError::at(
                        format!("columns[{i}]"),
                        format!(
                            "no column `{name}` in the input (columns: {})",
                            known.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(PiiRedactor { config, input })
    }

    fn input_columns(&self) -> Option<Vec<String>> {
        Some(self.config.columns.clone())
    }

    fn output_schema(&self) -> SchemaRef {
        Arc::clone(&self.input)
    }

    fn process(&mut self, batch: RecordBatch) -> Result<StepOutput, ProcessError> {
        let mut fields = Vec::new();
        let mut columns: Vec<ArrayRef> = Vec::new();
        let mut bad = Vec::new();
        for name in &self.config.columns {
            let values = batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                .ok_or_else(|| {
                    ProcessError::Failed(format!("column `{name}` missing or not a string"))
                })?;
            let redacted: StringArray = values
                .iter()
                .enumerate()
                .map(|(row, value)| {
                    value.map(|text| {
                        let (masked, bad_card) = redact(text, self.config.emails, self.config.cards);
                        if bad_card && self.config.reject_invalid_cards {
                            bad.push(RowError {
                                row: row as u32,
                                message: format!("column `{name}` holds a card-like number that fails the Luhn check"),
                            });
                        }
                        masked
                    })
                })
                .collect();
            fields.push(Field::new(name, DataType::Utf8, true));
            columns.push(Arc::new(redacted));
        }
        if !bad.is_empty() {
            return Err(ProcessError::BadRows(bad));
        }
        let out = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
            .map_err(|e| ProcessError::Failed(e.to_string()))?;
        Ok(StepOutput::Columns(out))
    }
}

/// Mask e-mails and card numbers in `text`. Returns the masked text and
/// whether a card-like digit run failed the Luhn check.
pub fn redact(text: &str, emails: bool, cards: bool) -> (String, bool) {
    let text = if emails {
        mask_emails(text)
    } else {
        text.to_string()
    };
    if cards {
        mask_cards(&text)
    } else {
        (text, false)
    }
}

fn mask_emails(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match word.split_once('@') {
            Some((local, domain)) if !local.is_empty() && domain.contains('.') => {
                let mut chars = local.chars();
                if let Some(first) = chars.next() {
                    out.push(first);
                }
                out.extend(std::iter::repeat_n('*', chars.count().max(1)));
                out.push('@');
                out.push_str(domain);
            }
            _ => out.push_str(word),
        }
    }
    out
}

/// Find runs of digits (with single spaces or dashes between them) of 13–19
/// digits; mask those passing the Luhn check, keeping the last four digits.
fn mask_cards(text: &str) -> (String, bool) {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut bad = false;
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
            continue;
        }
        // Extend the run over digits and lone separators.
        let start = i;
        let mut end = i;
        let mut digits = Vec::new();
        let mut j = i;
        while j < bytes.len() {
            if bytes[j].is_ascii_digit() {
                digits.push(bytes[j] - b'0');
                j += 1;
                end = j;
            } else if (bytes[j] == b' ' || bytes[j] == b'-')
                && j + 1 < bytes.len()
                && bytes[j + 1].is_ascii_digit()
            {
                j += 1;
            } else {
                break;
            }
        }
        if (13..=19).contains(&digits.len()) {
            // Mask every card-like number: a typo in a real card number is
            // still personal data. Luhn failures are only *reported*.
            if !luhn_valid(&digits) {
                bad = true;
            }
            let last4: String = digits[digits.len() - 4..]
                .iter()
                .map(|d| char::from(b'0' + d))
                .collect();
            out.push_str("**** **** **** ");
            out.push_str(&last4);
        } else {
            out.push_str(&text[start..end]);
        }
        i = end;
    }
    (out, bad)
}

fn luhn_valid(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            let d = u32::from(d);
            if i % 2 == 1 {
                if d * 2 > 9 { d * 2 - 9 } else { d * 2 }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

fv_plugin_sdk::export_step!(
    PiiRedactor,
    capabilities = "",
    config_schema = include_str!("../config.schema.json"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_emails_and_valid_cards() {
        let (out, bad) = redact(
            "mail bob@example.com card 4111 1111 1111 1111 ok",
            true,
            true,
        );
        assert_eq!(out, "mail b**@example.com card **** **** **** 1111 ok");
        assert!(!bad);
    }

    #[test]
    fn flags_luhn_failures_and_leaves_short_numbers() {
        let (out, bad) = redact("4111-1111-1111-1112 and 12345", true, true);
        assert_eq!(out, "**** **** **** 1112 and 12345");
        assert!(bad);
    }
}
