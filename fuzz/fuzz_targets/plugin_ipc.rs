//! `cargo fuzz run plugin_ipc`: see `fvhost::fuzzing::plugin_ipc`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fvhost::fuzzing::plugin_ipc(data));
