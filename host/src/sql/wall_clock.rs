//! The wall-clock functions of a SQL stage: `now()` (alias
//! `current_timestamp`), `current_date` (alias `today()`) and
//! `current_time`, as volatile functions read once per batch. Their value
//! is the time the batch is processed (processing time, Flink's
//! `PROCTIME()`), not the moment the stage was planned: DataFusion's own
//! can only be folded into a literal at planning (evaluated, they are an
//! internal error), which a query that runs for days must not do.
//!
//! They are not deterministic: a batch replayed after a restart gets the
//! time of its replay, so a column computed from them may differ from an
//! uninterrupted run's. This module never reads event time; a window or a
//! watermark on such a column is the user's choice.

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// Which reading of the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Reading {
    /// `now()`: a timestamp in nanoseconds (UTC, no time zone, as
    /// DataFusion's).
    Timestamp,
    /// `current_date`: days since 1970 (UTC).
    Date,
    /// `current_time`: nanoseconds since midnight (UTC).
    Time,
}

/// One wall-clock function.
#[derive(Debug, PartialEq, Eq, Hash)]
struct WallClock {
    reading: Reading,
    signature: Signature,
    aliases: Vec<String>,
}

impl WallClock {
    fn new(reading: Reading, aliases: &[&str]) -> Self {
        WallClock {
            reading,
            // Volatile: never folded into a constant at planning.
            signature: Signature::nullary(Volatility::Volatile),
            aliases: aliases.iter().map(|a| a.to_string()).collect(),
        }
    }
}

impl ScalarUDFImpl for WallClock {
    fn name(&self) -> &str {
        match self.reading {
            Reading::Timestamp => "now",
            Reading::Date => "current_date",
            Reading::Time => "current_time",
        }
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(match self.reading {
            Reading::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, None),
            Reading::Date => DataType::Date32,
            Reading::Time => DataType::Time64(TimeUnit::Nanosecond),
        })
    }

    /// One reading for the whole batch (every row of a batch is processed
    /// at once).
    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> Result<ColumnarValue> {
        const NANOS_PER_DAY: i64 = 86_400 * 1_000_000_000;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Ok(ColumnarValue::Scalar(match self.reading {
            Reading::Timestamp => ScalarValue::TimestampNanosecond(Some(now), None),
            Reading::Date => ScalarValue::Date32(Some(now.div_euclid(NANOS_PER_DAY) as i32)),
            Reading::Time => ScalarValue::Time64Nanosecond(Some(now.rem_euclid(NANOS_PER_DAY))),
        }))
    }
}

/// The wall-clock functions, to register over DataFusion's own.
pub fn functions() -> impl Iterator<Item = ScalarUDF> {
    [
        WallClock::new(Reading::Timestamp, &["current_timestamp"]),
        WallClock::new(Reading::Date, &["today"]),
        WallClock::new(Reading::Time, &[]),
    ]
    .into_iter()
    .map(ScalarUDF::from)
}
