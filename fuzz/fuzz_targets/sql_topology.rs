//! `cargo fuzz run sql_topology`: see `fvhost::fuzzing::sql_topology`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fvhost::fuzzing::sql_topology(data));
