//! `cargo fuzz run plugin_ipc_compressed`: see `fvhost::fuzzing::plugin_ipc_compressed`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fvhost::fuzzing::plugin_ipc_compressed(data));
