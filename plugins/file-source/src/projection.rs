//! The columns a [`Scan`] asks for, as indexes into the full schema.

use std::sync::Arc;

use fv_plugin_sdk::Scan;
use fv_plugin_sdk::arrow_schema::SchemaRef;

/// The indexes (in `full` order) of the columns `scan` reads — `None` when
/// it reads all of them — and the schema they make. A requested column
/// that `full` lacks is an error naming it and the columns there are.
pub fn resolve(full: &SchemaRef, scan: &Scan) -> Result<(Option<Vec<usize>>, SchemaRef), String> {
    if let Some(columns) = &scan.columns {
        let unknown: Vec<&str> = columns
            .iter()
            .filter(|c| full.field_with_name(c).is_err())
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            let names: Vec<&str> = full.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(format!(
                "the projection asks for column{} `{}`, which the files do not have; their columns are [{}]",
                if unknown.len() == 1 { "" } else { "s" },
                unknown.join("`, `"),
                names.join(", ")
            ));
        }
    }
    let indexes: Vec<usize> = full
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| scan.reads(f.name()))
        .map(|(i, _)| i)
        .collect();
    if indexes.len() == full.fields().len() {
        // Everything: read exactly as without a projection.
        return Ok((None, Arc::clone(full)));
    }
    let schema = full
        .project(&indexes)
        .map_err(|e| format!("projecting the schema {full}: {e}"))?;
    Ok((Some(indexes), Arc::new(schema)))
}
