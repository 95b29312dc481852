//! The one TLS stack: rustls on ring, for every outgoing HTTPS client (the
//! webhook deliveries, the sign-in's client metadata fetch, the command
//! line's clients) and the MQTT bridge. One crypto library in the binary
//! instead of two keeps it smaller and its resident pages fewer.

use std::sync::Once;

/// Makes ring the process's rustls provider, once; later calls do nothing.
/// reqwest builds its TLS from the process's provider, and panics at
/// `build()` when there is none, so every client is made through
/// [`client_builder`].
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Fails only when a provider is installed already (a test binary
        // can link another one): that one then serves, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A reqwest client builder whose TLS runs on the one provider.
pub fn client_builder() -> reqwest::ClientBuilder {
    install();
    reqwest::Client::builder()
}
