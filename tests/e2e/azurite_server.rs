//! Azurite's Blob service (`azurite-blob`, installed by `tests/run` from
//! npm; found through `FVHOST_AZURITE` or on PATH) on a free loopback
//! port, for the object-storage tests: Azure Blob Storage as fvhost's
//! `object_store` client meets it. Killed on drop. A container is made
//! with one request signed with the emulator's well-known shared key
//! (Azure's `SharedKey` scheme, HMAC-SHA256 written out here).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// The emulator's account and its published key.
const ACCOUNT: &str = "devstoreaccount1";
const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A running Azurite Blob service; killed on drop.
pub(crate) struct AzuriteServer {
    child: Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl AzuriteServer {
    /// `azurite-blob`'s path, if installed.
    pub(crate) fn binary() -> Option<String> {
        if let Ok(path) = std::env::var("FVHOST_AZURITE") {
            return Some(path);
        }
        Command::new("azurite-blob")
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| "azurite-blob".to_string())
    }

    pub(crate) fn start() -> AzuriteServer {
        let binary = Self::binary()
            .expect("azurite-blob (tests/run installs it from npm and sets FVHOST_AZURITE)");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let data = tempfile::tempdir().expect("azurite's directory");
        let child = Command::new(binary)
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            .args(["--skipApiVersionCheck", "--silent", "--location"])
            .arg(data.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start azurite-blob");
        let server = AzuriteServer {
            child,
            port,
            _data: data,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "azurite-blob did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// Create `container` (a signed `Create Container` request).
    pub(crate) fn create_container(&self, container: &str) {
        let date = http_date(SystemTime::now());
        let version = "2021-08-06";
        let to_sign = format!(
            "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n/{ACCOUNT}/{ACCOUNT}/{container}\nrestype:container"
        );
        let key = base64_decode(KEY);
        let signature = base64_encode(&hmac_sha256(&key, to_sign.as_bytes()));
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        write!(
            conn,
            "PUT /{ACCOUNT}/{container}?restype=container HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nx-ms-date: {date}\r\nx-ms-version: {version}\r\nAuthorization: SharedKey {ACCOUNT}:{signature}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .expect("request");
        let mut response = String::new();
        conn.read_to_string(&mut response).expect("response");
        assert!(response.starts_with("HTTP/1.1 201"), "{response}");
    }

    /// The environment that points fvhost's Azure client at this server.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AZURE_STORAGE_USE_EMULATOR", "true".into()),
            (
                "AZURITE_BLOB_STORAGE_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
        ]
    }
}

impl Drop for AzuriteServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(text: &str) -> Vec<u8> {
    let mut bits = 0u32;
    let mut held = 0;
    let mut out = Vec::new();
    for c in text.bytes().filter(|c| *c != b'=') {
        let v = ALPHABET.iter().position(|a| *a == c).expect("base64") as u32;
        bits = bits << 6 | v;
        held += 6;
        if held >= 8 {
            held -= 8;
            out.push((bits >> held & 0xff) as u8);
        }
    }
    out
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`.
fn http_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = crate::support::civil_from_days(days as i64);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let name = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(month - 1) as usize];
    format!(
        "{weekday}, {day:02} {name} {year} {:02}:{:02}:{:02} GMT",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[test]
fn the_signing_helpers_match_published_values() {
    // RFC 4231, test case 2.
    let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
    assert_eq!(
        hex::encode(mac),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
    assert_eq!(base64_encode(b"fooba"), "Zm9vYmE=");
    assert_eq!(base64_decode("Zm9vYg=="), b"foob");
    assert_eq!(
        http_date(UNIX_EPOCH + Duration::from_secs(784_111_777)),
        "Sun, 06 Nov 1994 08:49:37 GMT"
    );
}
