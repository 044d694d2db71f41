//! What a write grant (`allow_write`) does not let a plugin do: create a
//! symbolic link.
//!
//! WASI resolves every path a guest uses inside its preopened directories,
//! so a guest cannot follow a link out of its grant. But a link it leaves
//! on disk is followed by whatever reads the directory next (a sink's
//! output directory, say, read by another program): a link named like an
//! output file and pointing at `/etc/shadow` is a trap for that reader.
//! So `symlink-at` is shadowed to answer `not-permitted`; files, their
//! contents, directories, renames and hard links (which WASI confines to
//! the grant's own files) are untouched.

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;

use super::sandbox::HostState;

/// The WASI interface whose `symlink-at` is refused.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Shadow `symlink-at` in `linker` (after WASI was added to it).
pub(crate) fn link(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    types.func_wrap(
        "[method]descriptor.symlink-at",
        |store: wasmtime::StoreContextMut<'_, HostState>,
         (_dir, _target, link): (Resource<Descriptor>, String, String)| {
            let state = store.data();
            tracing::warn!(
                target: "fvhost::plugin",
                plugin = %state.plugin,
                task = %state.task,
                "refused to create the symbolic link `{}`: plugins may not create links, even under a write grant",
                super::plugin_text(&link)
            );
            Ok((Err::<(), ErrorCode>(ErrorCode::NotPermitted),))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}
