//! Stateless SQL over batches with DataFusion: a query is planned once
//! against the input schema and evaluated on every batch.
//!
//! Entry point: [`StatelessQuery`]. This module never keeps rows between
//! batches; queries that need state (aggregates, joins, ORDER BY, LIMIT)
//! are refused with a message that says so.

mod stateless;
mod wall_clock;

pub use stateless::{JoinedSides, SqlError, StatelessQuery};
