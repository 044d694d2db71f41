//! A real OCI distribution registry for the tests: the CNCF distribution
//! server (Debian's `docker-registry` package) on a free 127.0.0.1 port,
//! filesystem storage in a scratch directory, htpasswd basic auth.
//!
//! `.ci/run` installs it (with `htpasswd` from apache2-utils); a developer
//! can point `FVHOST_OCI_REGISTRY` at a `registry` binary.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The user the server accepts.
pub const USER: &str = "fvhost-ci";
/// Its password.
pub const PASSWORD: &str = "oci-s3cret-Pass";

fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("FVHOST_OCI_REGISTRY") {
        return PathBuf::from(p);
    }
    for candidate in ["/usr/bin/docker-registry", "/usr/local/bin/registry"] {
        if Path::new(candidate).exists() {
            return PathBuf::from(candidate);
        }
    }
    panic!(
        "the OCI registry tests need the CNCF distribution registry: run .ci/run, or `apt-get install docker-registry apache2-utils`, or set FVHOST_OCI_REGISTRY"
    );
}

/// A running registry; stopped when dropped.
pub struct OciServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl OciServer {
    /// Start it and wait until `/v2/` answers.
    pub fn start() -> OciServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let htpasswd = Command::new("htpasswd")
            .args(["-Bbn", USER, PASSWORD])
            .output()
            .expect("htpasswd (apache2-utils) must be installed");
        assert!(htpasswd.status.success(), "htpasswd failed");
        std::fs::write(dir.path().join("htpasswd"), &htpasswd.stdout).expect("write htpasswd");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {root}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: fvhost-tests\nauth:\n  htpasswd:\n    realm: fvhost-tests\n    path: {htpasswd}\n",
            root = dir.path().join("storage").display(),
            htpasswd = dir.path().join("htpasswd").display(),
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("write config");
        let child = Command::new(binary())
            .arg("serve")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the registry");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the registry did not start on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        OciServer { child, port, dir }
    }

    /// `oci://127.0.0.1:<port>/<prefix>`.
    pub fn location(&self, prefix: &str) -> String {
        format!("oci://127.0.0.1:{}/{prefix}", self.port)
    }

    /// `http://127.0.0.1:<port>/v2/<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/v2/{path}", self.port)
    }

    /// The `Authorization` header value for the test user.
    pub fn basic_auth(&self) -> String {
        format!("Basic {}", base64(format!("{USER}:{PASSWORD}").as_bytes()))
    }

    /// Where the server keeps blob `sha256:<hex>` on disk.
    pub fn blob_file(&self, hex: &str) -> PathBuf {
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// GET a manifest as raw JSON text.
    pub fn manifest(&self, repository: &str, tag: &str) -> String {
        ureq::get(&self.url(&format!("{repository}/manifests/{tag}")))
            .header("Authorization", &self.basic_auth())
            .header("Accept", "application/vnd.oci.image.manifest.v1+json")
            .call()
            .expect("GET manifest")
            .body_mut()
            .read_to_string()
            .expect("manifest body")
    }

    /// PUT a manifest under `tag`, as anyone with push rights could.
    pub fn put_manifest(&self, repository: &str, tag: &str, manifest: &str) {
        ureq::put(&self.url(&format!("{repository}/manifests/{tag}")))
            .header("Authorization", &self.basic_auth())
            .header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
            .send(manifest)
            .expect("PUT manifest");
    }
}

impl Drop for OciServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 with padding (the basic-auth header).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn base64_matches_the_rfc_vectors() {
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"foobar"), "Zm9vYmFy");
}
