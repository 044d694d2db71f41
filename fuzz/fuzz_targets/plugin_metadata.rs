//! `cargo fuzz run plugin_metadata`: see `fvhost::fuzzing::plugin_metadata`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fvhost::fuzzing::plugin_metadata(data));
