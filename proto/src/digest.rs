//! How the wire names content: job binaries are addressed by their SHA-256 digest,
//! written as 64 lower-case hex characters, in messages and in file names alike.
//!
//! Invariant: only strings [`is_sha256_hex`] accepts are ever used as such names, so a
//! digest from the network can never become a path like `../x`.

/// Whether `s` is a SHA-256 digest in lower-case hex.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `bytes` in lower-case hex (a finished digest into its wire name).
pub fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lower_case_hex_digests_are_names() {
        assert!(is_sha256_hex(&"a".repeat(64)));
        assert!(is_sha256_hex(&"0123456789abcdef".repeat(4)));
        assert!(!is_sha256_hex(&"A".repeat(64)));
        assert!(!is_sha256_hex(&"a".repeat(63)));
        assert!(!is_sha256_hex(&format!("../{}", "a".repeat(61))));
        assert!(!is_sha256_hex(""));
    }

    #[test]
    fn hex_is_lower_case_and_two_digits_a_byte() {
        assert_eq!(to_hex(&[0x00, 0x0f, 0xab, 0xff]), "000fabff");
        assert_eq!(to_hex(&[]), "");
    }
}
