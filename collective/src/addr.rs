//! [`PeerAddr`]: where a rank's endpoint listens, and its string form (`unix:/path`,
//! `tcp:1.2.3.4:5678`, `tcp:[::1]:5678`) that the driver relays between tasks.
//!
//! Invariants: [`PeerAddr::parse`] looks at no input longer than [`MAX_ADDR_LEN`] bytes and
//! accepts only addresses a peer can connect to: an absolute Unix socket path that fits
//! `sun_path` and holds no NUL, or a TCP address with a non-zero port and a specified,
//! unicast IP. `parse(&addr.to_string()) == addr` for every address it accepts.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{quote, CollectiveError, Result};

/// The longest address string [`PeerAddr::parse`] reads.
pub const MAX_ADDR_LEN: usize = 512;

/// The longest Unix socket path in bytes (Linux's `sun_path` is 108 bytes with its NUL).
pub const MAX_UNIX_PATH: usize = 107;

/// A rank's endpoint address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PeerAddr {
    /// A Unix domain socket file (peers on one host).
    Unix(PathBuf),
    /// A TCP listener.
    Tcp(SocketAddr),
}

impl PeerAddr {
    /// Parses the string form; see the module docs for what is accepted.
    pub fn parse(input: &str) -> Result<PeerAddr> {
        let bad = |reason| CollectiveError::InvalidAddress {
            input: quote(input),
            reason,
        };
        if input.len() > MAX_ADDR_LEN {
            return Err(bad("longer than 512 bytes"));
        }
        if let Some(path) = input.strip_prefix("unix:") {
            check_unix_path(Path::new(path)).map_err(bad)?;
            Ok(PeerAddr::Unix(PathBuf::from(path)))
        } else if let Some(rest) = input.strip_prefix("tcp:") {
            let addr = SocketAddr::from_str(rest).map_err(|_| bad("not an IP:port"))?;
            check_tcp_addr(&addr).map_err(bad)?;
            Ok(PeerAddr::Tcp(addr))
        } else {
            Err(bad("expected unix:/path or tcp:ip:port"))
        }
    }
}

/// Why a Unix socket path cannot be a peer address, if it cannot.
pub(crate) fn check_unix_path(path: &Path) -> std::result::Result<(), &'static str> {
    let Some(text) = path.to_str() else {
        return Err("the socket path is not UTF-8");
    };
    if !path.is_absolute() {
        return Err("the socket path is not absolute");
    }
    if text.contains('\0') {
        return Err("the socket path contains NUL");
    }
    if text.len() > MAX_UNIX_PATH {
        return Err("the socket path is longer than 107 bytes (sun_path)");
    }
    Ok(())
}

/// Why a TCP address cannot be a peer address, if it cannot.
pub(crate) fn check_tcp_addr(addr: &SocketAddr) -> std::result::Result<(), &'static str> {
    if addr.port() == 0 {
        return Err("port 0");
    }
    check_tcp_ip(addr.ip())
}

/// Why an IP cannot be listened on for peers, if it cannot.
pub(crate) fn check_tcp_ip(ip: IpAddr) -> std::result::Result<(), &'static str> {
    if ip.is_unspecified() {
        return Err("an unspecified IP (0.0.0.0 or ::) is not an address peers can reach");
    }
    if ip.is_multicast() {
        return Err("a multicast IP");
    }
    if let IpAddr::V4(v4) = ip {
        if v4.is_broadcast() {
            return Err("the broadcast IP");
        }
    }
    Ok(())
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerAddr::Unix(path) => write!(f, "unix:{}", path.display()),
            PeerAddr::Tcp(addr) => write!(f, "tcp:{addr}"),
        }
    }
}

impl FromStr for PeerAddr {
    type Err = CollectiveError;

    fn from_str(s: &str) -> Result<Self> {
        PeerAddr::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for s in [
            "unix:/tmp/x/s",
            "tcp:127.0.0.1:5678",
            "tcp:[::1]:9",
            "tcp:10.1.2.3:65535",
        ] {
            let addr = PeerAddr::parse(s).unwrap();
            assert_eq!(addr.to_string(), s);
            assert_eq!(PeerAddr::parse(&addr.to_string()).unwrap(), addr);
        }
    }

    #[test]
    fn refuses_bad_input_with_a_bounded_quote() {
        let long = format!("unix:/{}", "a".repeat(200));
        let cases = [
            ("", "expected unix"),
            ("http://x", "expected unix"),
            ("unix:relative/s", "not absolute"),
            ("unix:/a\0b", "NUL"),
            (long.as_str(), "longer than 107"),
            ("tcp:1.2.3.4", "not an IP:port"),
            ("tcp:1.2.3.4:0", "port 0"),
            ("tcp:0.0.0.0:80", "unspecified"),
            ("tcp:[::]:80", "unspecified"),
            ("tcp:224.0.0.1:80", "multicast"),
            ("tcp:255.255.255.255:80", "broadcast"),
        ];
        for (input, want) in cases {
            let err = PeerAddr::parse(input).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(want), "{input:?}: {text}");
            assert!(text.len() < 200, "quote not bounded: {text}");
        }
        let huge = "x".repeat(10_000);
        let text = PeerAddr::parse(&huge).unwrap_err().to_string();
        assert!(
            text.contains("longer than 512") && text.len() < 200,
            "{text}"
        );
    }
}
