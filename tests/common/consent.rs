//! The consent page as a browser sees it: its hidden form fields.

/// The hidden fields of the form in `html`, unescaped, in page order.
pub fn hidden_fields(html: &str) -> Vec<(String, String)> {
    let unescape = |s: &str| {
        s.replace("&#x2f;", "/")
            .replace("&#47;", "/")
            .replace("&quot;", "\"")
            .replace("&#34;", "\"")
            .replace("&#39;", "'")
            .replace("&#x27;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    };
    let mut out = Vec::new();
    for input in html.split("<input").skip(1) {
        let attr = |name: &str| {
            let key = format!("{name}=\"");
            input.find(&key).map(|i| {
                let rest = &input[i + key.len()..];
                unescape(&rest[..rest.find('"').unwrap_or(rest.len())])
            })
        };
        if attr("type").as_deref() == Some("hidden") {
            out.push((
                attr("name").unwrap_or_default(),
                attr("value").unwrap_or_default(),
            ));
        }
    }
    out
}
