//! Rebuild the bindings when the contract changes (the `generate!` macro
//! reads `wit/` but does not tell cargo).
fn main() {
    println!("cargo:rerun-if-changed=../../../../wit");
}
