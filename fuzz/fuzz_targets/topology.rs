//! `cargo fuzz run topology`: see `fvhost::fuzzing::topology`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fvhost::fuzzing::topology(data));
