//! `cargo fuzz run manifest`: see `fvhost::fuzzing::manifest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fvhost::fuzzing::manifest(data));
