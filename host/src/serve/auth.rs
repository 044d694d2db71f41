//! Who may call what: [`Tokens`] (an admin token and a read token) and
//! the middleware that checks them on every route but `/healthz` and
//! `/readyz` (and `/metrics` when the operator opened it to scrapers).
//!
//! A read token lists, shows, tails and scrapes; only the admin token
//! submits, stops, starts and deletes. Tokens are compared in constant
//! time (over their SHA-256, so neither content nor length leaks through
//! timing). A browser cannot put a header on the status page or on an
//! `EventSource`, so GET requests may also carry the token as `?token=`.
//! This module decides access; it never touches a topology.

use sha2::{Digest, Sha256};

/// What a token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// List, status, tail, metrics, the page.
    Read,
    /// Everything, including submit, stop, start and delete.
    Admin,
}

/// The server's tokens. With none, every call is allowed (a loopback
/// server for one user).
#[derive(Clone, Default)]
pub struct Tokens {
    admin: Option<[u8; 32]>,
    read: Option<[u8; 32]>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a token, not even its digest.
        f.debug_struct("Tokens")
            .field("admin", &self.admin.is_some())
            .field("read", &self.read.is_some())
            .finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Equal without an early exit: the time does not depend on where the
/// digests differ.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Tokens {
    /// An admin and a read token (either may be absent; empty means absent).
    pub fn new(admin: Option<&str>, read: Option<&str>) -> Self {
        let keep = |t: Option<&str>| t.filter(|t| !t.is_empty()).map(digest);
        Tokens {
            admin: keep(admin),
            read: keep(read),
        }
    }

    /// Whether any token is set (then every guarded route needs one).
    pub fn any(&self) -> bool {
        self.admin.is_some() || self.read.is_some()
    }

    /// Whether an admin token is set.
    pub fn has_admin(&self) -> bool {
        self.admin.is_some()
    }

    /// What `given` allows, if it is one of the tokens. Both are always
    /// compared, so the answer's timing does not say which one matched.
    pub fn role(&self, given: &str) -> Option<Role> {
        let given = digest(given);
        let admin = self.admin.is_some_and(|t| same(&t, &given));
        let read = self.read.is_some_and(|t| same(&t, &given));
        if admin {
            Some(Role::Admin)
        } else if read {
            Some(Role::Read)
        } else {
            None
        }
    }
}

/// Whether a route is open without a token.
pub fn is_open(path: &str, metrics_open: bool) -> bool {
    matches!(path, "/healthz" | "/readyz") || (metrics_open && path == "/metrics")
}

/// The token of a request: `Authorization: Bearer …`, or for a GET the
/// `token` query parameter.
pub fn given<'a>(
    authorization: Option<&'a str>,
    query: Option<&'a str>,
    get: bool,
) -> Option<&'a str> {
    if let Some(bearer) = authorization.and_then(|v| v.strip_prefix("Bearer ")) {
        return Some(bearer);
    }
    if !get {
        return None;
    }
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_token_has_its_role_and_nothing_else_passes() {
        let t = Tokens::new(Some("admin-secret"), Some("read-secret"));
        assert_eq!(t.role("admin-secret"), Some(Role::Admin));
        assert_eq!(t.role("read-secret"), Some(Role::Read));
        assert_eq!(t.role("admin-secre"), None);
        assert_eq!(t.role(""), None);
        assert!(t.any() && t.has_admin());
        let none = Tokens::new(None, Some(""));
        assert!(!none.any());
        assert_eq!(none.role(""), None, "an empty token is no token");
        assert!(!format!("{t:?}").contains("secret"));
    }

    #[test]
    fn a_token_comes_from_the_header_or_for_a_get_from_the_query() {
        assert_eq!(given(Some("Bearer abc"), None, false), Some("abc"));
        assert_eq!(given(None, Some("x=1&token=abc"), true), Some("abc"));
        assert_eq!(
            given(None, Some("token=abc"), false),
            None,
            "not for a POST"
        );
        assert_eq!(given(Some("Basic abc"), None, true), None);
        assert!(is_open("/healthz", false) && !is_open("/metrics", false));
        assert!(is_open("/metrics", true) && !is_open("/topologies", true));
    }
}
