//! Object storage lent by the host (`fv:host/objects`), enabled by the
//! SDK's `objects` feature: S3 (and S3-compatible servers), Google Cloud
//! Storage and Azure Blob Storage, named by URL (`s3://bucket/key`).
//!
//! The node grants prefixes — `allow_read = ["s3://bucket/in"]` for
//! [`list_objects`], [`size`] and [`read`], `allow_write = ["s3://bucket/out"]`
//! for the uploads too — and the host checks every call against them.
//! The credentials are the operator's, held by the host: a plugin never
//! sees them. Declare the `files` capability.
//!
//! An upload is multipart so that nothing is visible until it is
//! complete: [`begin_upload`], [`upload_part`] (every part but the last
//! at least 5 MiB on S3), then [`complete_upload`] — or [`abort_upload`].
//! A sink keeps the upload id and the part tags in its epoch's handle and
//! completes the upload in `commit`, so readers never see a partial or
//! uncommitted object.
//!
//! ```ignore
//! use fv_plugin_sdk::objects;
//! for object in objects::list_objects("s3://bucket/in/")? {
//!     let head = objects::read(&object.url, 0, 4096)?;
//! }
//! ```

pub use fv_plugin_world_objects::fv::host::objects::{
    ObjectMeta, abort_upload, begin_upload, complete_upload, list_objects, read, size, upload_part,
};

/// The most bytes one [`read`] returns or one [`upload_part`] takes.
pub const MAX_TRANSFER: u64 = 64 << 20;

/// Whether `path` names an object (`s3://`, `gs://`, `az://`) rather
/// than a file.
pub fn is_object_url(path: &str) -> bool {
    ["s3://", "gs://", "az://"]
        .iter()
        .any(|scheme| path.starts_with(scheme))
}
