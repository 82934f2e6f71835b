//! The one URL redactor for display: every message, log line and `spool
//! config show` value that names a URL goes through [`mask_url`] (the
//! catalog's own errors included), so a credential is masked the same way
//! wherever it is shown.

/// Most bytes of a server's text [`foreign_text`] keeps (after escaping).
#[cfg_attr(not(feature = "clickhouse"), allow(dead_code))] // servers' text: ClickHouse's
pub const FOREIGN_TEXT_LIMIT: usize = 512;

/// Text from a server (a ClickHouse exception body, a replica's error), as
/// spool logs it and puts it into its errors: every secret of `secrets`
/// (the URL's password; as spelled and percent-encoded) replaced by
/// `****`, control characters (ANSI escapes, newlines, tabs) and other
/// non-printing characters escaped (`\u{1b}`, `\n`), and at most
/// [`FOREIGN_TEXT_LIMIT`] bytes kept, followed by `… (N bytes)` naming the
/// size of the whole text. So no server can forge a log line, drive a
/// terminal, flood a log or echo a credential back into one.
#[cfg_attr(not(feature = "clickhouse"), allow(dead_code))] // servers' text: ClickHouse's
pub(crate) fn foreign_text(text: &str, secrets: &[&str]) -> String {
    let mut masked = text.to_string();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let encoded =
            percent_encoding::utf8_percent_encode(secret, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
        for form in [*secret, encoded.as_str()] {
            if masked.contains(form) {
                masked = masked.replace(form, "****");
            }
        }
    }
    let mut out = String::new();
    let mut cut = false;
    for c in masked.chars() {
        let piece: String = if c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        {
            c.escape_default().collect()
        } else {
            c.to_string()
        };
        if out.len() + piece.len() > FOREIGN_TEXT_LIMIT {
            cut = true;
            break;
        }
        out.push_str(&piece);
    }
    if cut {
        out.push_str(&format!("… ({} bytes)", text.len()));
    }
    out
}

/// Credential query parameters masked by [`mask_url`].
const SECRET_PARAMS: &[&str] = &[
    "password",
    "pass",
    "secret",
    "secret_key",
    "secret_access_key",
    "token",
    "access_key",
    "session_token",
    "sig",
    "signature",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "access_token",
    "api_key",
    "client_secret",
];

/// Masks the secrets of a URL as spelled: the password of `user:password@`
/// and the values of credential parameters (in the query or the fragment;
/// percent-encoded names included) become `****`. A URL need not be well
/// formed to be masked: `scheme:user:pw@host` without `//`, backslashes
/// for slashes (both accepted by WHATWG parsers for special schemes) and
/// garbage around them are masked too. Anything without a scheme comes
/// back unchanged.
pub fn mask_url(s: &str) -> String {
    // As a WHATWG parser reads it: leading and trailing C0 controls and
    // spaces stripped, tabs and newlines removed anywhere (else a control
    // character before `ws:` would hide the scheme from the masking while
    // the parser still finds the password).
    let s: String = s
        .trim_matches(|c: char| c <= ' ')
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    let s = s.as_str();
    let scheme_ok = |scheme: &str| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    };
    let colon = match s.find(':') {
        Some(colon) if scheme_ok(&s[..colon]) => colon,
        // Not a URL (a mistyped scheme, say): no authority to mask, but
        // credential parameters after a `?` or `#` still are.
        _ => {
            return match s.find(['?', '#']) {
                Some(q) => mask_tail(s[..q].to_string(), &s[q..]),
                None => s.to_string(),
            }
        }
    };
    let after = &s[colon + 1..];
    let slashes = after.len() - after.trim_start_matches(['/', '\\']).len();
    let (head, rest) = s.split_at(colon + 1 + slashes);
    // A backslash ends the authority only for WHATWG's special schemes, and
    // not for `clickhouse:` (found by fuzzing): never end it there, so a
    // `user:pw@` behind one is masked either way (masking more is harmless).
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:****@{}", &authority[at + 1..]),
                None => authority.to_string(),
            }
        }
        None => authority.to_string(),
    };
    mask_tail(format!("{head}{authority}"), tail)
}

/// `out` followed by `tail` (path, query, fragment) masked: credential
/// parameters of the query by [`mask_params`], and the whole fragment,
/// which never addresses anything spool reads (`s3://b/x#secret`), as
/// `#****`.
fn mask_tail(out: String, tail: &str) -> String {
    match tail.split_once('#') {
        Some((before, fragment)) => {
            let mut out = mask_params(out, before);
            out.push('#');
            if !fragment.is_empty() {
                out.push_str("****");
            }
            out
        }
        None => mask_params(out, tail),
    }
}

/// `out` followed by `tail` with the value of every credential parameter
/// masked.
fn mask_params(mut out: String, tail: &str) -> String {
    // The tail as segments between separators, the separators kept as
    // spelled. A value runs to the next `&` or `#`, as url's query_pairs
    // reads it, so a `?` or `;` inside a password is part of it (found by
    // fuzzing: `password=ab?cd` showed `?cd`); a `?` or `;` may also start
    // a parameter for a reader that splits there, so a segment is masked
    // from the first credential name behind any of them to its end.
    let mut segment = String::new();
    let flush = |segment: &mut String, out: &mut String| {
        let starts = std::iter::once(0).chain(
            segment
                .match_indices([';', '?'])
                .map(|(i, sep)| i + sep.len()),
        );
        for start in starts {
            if let Some((name, _)) = segment[start..].split_once('=') {
                if !name.contains([';', '?']) && is_secret_param(name) {
                    out.push_str(&segment[..start]);
                    out.push_str(name);
                    out.push_str("=****");
                    segment.clear();
                    return;
                }
            }
        }
        out.push_str(segment);
        segment.clear();
    };
    let mut in_path = true;
    for c in tail.chars() {
        let separator = if in_path {
            matches!(c, '?' | '&' | '#' | ';')
        } else {
            matches!(c, '&' | '#')
        };
        if separator {
            if in_path {
                out.push_str(&segment);
                segment.clear();
                in_path = false;
            } else {
                flush(&mut segment, &mut out);
            }
            out.push(c);
        } else {
            segment.push(c);
        }
    }
    if in_path {
        out.push_str(&segment);
    } else {
        flush(&mut segment, &mut out);
    }
    out
}

/// Whether a parameter name (as spelled, possibly percent- or
/// form-encoded) names a credential.
fn is_secret_param(name: &str) -> bool {
    let decoded: String = url::form_urlencoded::parse(name.as_bytes())
        .map(|(k, _)| k.into_owned())
        .collect();
    let trimmed = decoded.trim();
    SECRET_PARAMS
        .iter()
        .any(|p| p.eq_ignore_ascii_case(trimmed) || p.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_text_is_escaped_bounded_and_masked() {
        assert_eq!(foreign_text("Code: 60. Table x", &[]), "Code: 60. Table x");
        assert_eq!(
            foreign_text("a\x1b[31mred\nINFO forged\r\t\u{202e}", &[]),
            "a\\u{1b}[31mred\\nINFO forged\\r\\t\\u{202e}"
        );
        assert_eq!(
            foreign_text("auth for p@ss and p%40ss", &["p@ss", ""]),
            "auth for **** and ****"
        );
        let big = format!("é{}", "x".repeat(3 << 20));
        let shown = foreign_text(&big, &[]);
        assert!(
            shown.ends_with(&format!("… ({} bytes)", big.len())),
            "{}",
            &shown[500..]
        );
        assert!(shown.len() <= FOREIGN_TEXT_LIMIT + 32, "{}", shown.len());
        // The password is masked before the cut: never half shown.
        let near = format!("{}hunter2", "x".repeat(FOREIGN_TEXT_LIMIT - 3));
        assert!(!foreign_text(&near, &["hunter2"]).contains("hun"));
        // Escapes are never cut in half.
        let esc = format!("{}\x1b", "x".repeat(FOREIGN_TEXT_LIMIT - 2));
        assert!(foreign_text(&esc, &[]).contains("x… ("));
    }

    #[test]
    fn masking() {
        assert_eq!(
            mask_url("clickhouse://u:hunter2@h:8123/db?table_prefix=t&password=hunter3"),
            "clickhouse://u:****@h:8123/db?table_prefix=t&password=****"
        );
        assert_eq!(mask_url("s3://bucket/p"), "s3://bucket/p");
        assert_eq!(mask_url("not a url"), "not a url");
        assert_eq!(
            mask_url("clickhouse://h/db?token=t0k"),
            "clickhouse://h/db?token=****"
        );
        // Found by the catalog_url fuzz target: no `//` after the scheme
        // (WHATWG parsers still read `ws:u:pw@h` as user `u`, password `pw`).
        assert_eq!(mask_url("ws:u:hunter2@h/db"), "ws:u:****@h/db");
        assert_eq!(
            mask_url("clickhouse:\\\\u:hunter2@h"),
            "clickhouse:\\\\u:****@h"
        );
        // Parameters in a fragment, and percent-encoded names.
        assert_eq!(mask_url("memory://x#password=p1"), "memory://x#****");
        // A fragment is masked whole, a query's credential values too.
        assert_eq!(mask_url("s3://b/x#secret"), "s3://b/x#****");
        assert_eq!(
            mask_url("s3://b/x?token=abc&a=1#"),
            "s3://b/x?token=****&a=1#"
        );
        assert_eq!(
            mask_url("s3://b/x?X-Amz-Signature=abc&X-Amz-Credential=AKIA"),
            "s3://b/x?X-Amz-Signature=****&X-Amz-Credential=****"
        );
        assert_eq!(mask_url("clic//b?x=1#secret"), "clic//b?x=1#****");
        assert_eq!(
            mask_url("clickhouse://h/db?pass%77ord=p2&table_prefix=t"),
            "clickhouse://h/db?pass%77ord=****&table_prefix=t"
        );
        assert_eq!(mask_url("host:8123"), "host:8123");
        assert_eq!(
            mask_url("clickhouse://x\\:hunter2@ch/db"),
            "clickhouse://x\\:****@ch/db"
        );
        // A mistyped scheme still masks its parameters (found by fuzzing).
        assert_eq!(
            mask_url("clic//ch/db?user=a&password=hunter2"),
            "clic//ch/db?user=a&password=****"
        );
        // A `?` or `;` inside a password is part of it (found by fuzzing),
        // and a credential behind one is masked too.
        assert_eq!(
            mask_url("clickhouse://h/db?password=ab?cdef&table_prefix=t"),
            "clickhouse://h/db?password=****&table_prefix=t"
        );
        assert_eq!(
            mask_url("clickhouse://h/db?password=ab;cdef#x"),
            "clickhouse://h/db?password=****#****"
        );
        assert_eq!(
            mask_url("clickhouse://h/db?table_prefix=t;password=hunter2&user=u"),
            "clickhouse://h/db?table_prefix=t;password=****&user=u"
        );
        assert_eq!(
            mask_url("clickhouse://h/db?a=1?password=hunter2"),
            "clickhouse://h/db?a=1?password=****"
        );
        // Leading controls and embedded tabs do not hide a scheme.
        assert_eq!(mask_url("\u{17}\u{17}ws:u:hunter2@h"), "ws:u:****@h");
        assert_eq!(
            mask_url("clickhouse://u:hun\tter2@h"),
            "clickhouse://u:****@h"
        );
    }
}
