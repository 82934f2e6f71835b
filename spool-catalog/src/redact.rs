//! The one URL redactor for display: every message, log line and `spool
//! config show` value that names a URL goes through [`mask_url`] (the
//! catalog's own errors included), so a credential is masked the same way
//! wherever it is shown.

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
];

/// Masks the secrets of a URL as spelled: the password of `user:password@`
/// and the values of credential query parameters become `****`. Anything
/// that is not a URL comes back unchanged.
pub fn mask_url(s: &str) -> String {
    let Some(scheme_end) = s.find("://") else {
        return s.to_string();
    };
    let (head, rest) = s.split_at(scheme_end + 3);
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') {
                format!("{user}:****@{}", &authority[at + 1..])
            } else {
                authority.to_string()
            }
        }
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, frag) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let masked: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if SECRET_PARAMS.iter().any(|p| p.eq_ignore_ascii_case(k)) => {
                        format!("{k}=****")
                    }
                    _ => kv.to_string(),
                })
                .collect();
            let mut t = format!("{path}?{}", masked.join("&"));
            if let Some(f) = frag {
                t.push('#');
                t.push_str(f);
            }
            t
        }
        None => tail.to_string(),
    };
    format!("{head}{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
