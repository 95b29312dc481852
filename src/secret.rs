//! Token secrets, apart from any surface: bearer tokens minted from the OS
//! CSPRNG, shown once, stored only as a SHA-256 hash. A raw token (or any
//! other secret: the MQTT password, OAuth's codes) lives in a [`Secret`],
//! which never prints. The domain mints with it; `auth` checks with it.

use base64::Engine;
use rand::TryRng;
use sha2::{Digest, Sha256};

/// The prefix every token starts with, so leaked tokens are easy to scan for.
pub const PREFIX: &str = "cr_";

/// A raw token, or another secret (the MQTT password). `Debug` and
/// `Display` print `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(raw: impl Into<String>) -> Secret {
        Secret(raw.into())
    }
    /// The raw value, for the one place that must show it (minting).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(raw: String) -> Secret {
        Secret(raw)
    }
}

impl From<&str> for Secret {
    fn from(raw: &str) -> Secret {
        Secret(raw.to_owned())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Mints a new token: `cr_` + 32 bytes from the OS CSPRNG, URL-safe base64.
pub fn mint() -> Secret {
    let mut bytes = [0u8; 32];
    rand::rngs::SysRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random source is available");
    let body = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    Secret(format!("{PREFIX}{body}"))
}

/// The stored form of a token: hex SHA-256 of the raw value.
pub fn hash(raw: &str) -> String {
    TokenHash::of(raw).hex()
}

/// The SHA-256 of a raw token, as bytes: what a [`Caller`](super::Caller)
/// carries to look its token up again (an open stream re-checks it). Fixed
/// size, so a caller clones without another allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    pub fn of(raw: &str) -> TokenHash {
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(&Sha256::digest(raw.as_bytes()));
        TokenHash(bytes)
    }

    /// The stored form, as [`hash`] gives it.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl std::fmt::Debug for TokenHash {
    // Not a secret, but a handle on one: it stays out of logs too.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenHash(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_are_long_unique_and_prefixed() {
        let a = mint();
        let b = mint();
        assert!(a.expose().starts_with("cr_"));
        assert!(a.expose().len() >= 3 + 43);
        assert_ne!(a, b);
        assert!(
            a.expose()[3..]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
        assert_eq!(format!("{a:?} {a}"), "*** ***");
        assert_eq!(hash(a.expose()).len(), 64);
        assert_eq!(TokenHash::of(a.expose()).hex(), hash(a.expose()));
    }
}
