//! `cargo fuzz run parquet_page_header`: see `fvhost::fuzzing::parquet_page_header`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fvhost::fuzzing::parquet_page_header(data));
