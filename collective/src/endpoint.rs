//! [`Endpoint`]: a rank's listening socket, bound before its address goes to the driver
//! and consumed by [`crate::Communicator::connect`].
//!
//! Invariants: a Unix endpoint's socket file lives alone in a fresh directory of mode 0700
//! made inside the caller's directory, and is itself mode 0600; both are removed when the
//! endpoint drops (at the latest when the mesh is built). A TCP endpoint listens on an
//! ephemeral port of a specified IP. The listener is non-blocking and close-on-exec; the
//! endpoint's abort handle is the one the communicator built from it keeps.

use std::fs::{self, DirBuilder, Permissions};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use socket2::{Domain, SockAddr, Socket, Type};

use crate::abort::AbortHandle;
use crate::addr::{check_tcp_ip, check_unix_path, PeerAddr};
use crate::error::{CollectiveError, Result};
use crate::poll;

/// Pending connections a listener queues (the kernel caps it at `somaxconn`): every lower
/// rank may be connecting at once.
const LISTEN_BACKLOG: i32 = 1024;

/// A bound, listening endpoint of one rank.
pub struct Endpoint {
    listener: Socket,
    addr: PeerAddr,
    /// The private directory holding a Unix endpoint's socket file.
    socket_dir: Option<PathBuf>,
    abort: AbortHandle,
}

impl Endpoint {
    /// Binds a Unix socket in a new private directory inside `dir` (which must exist).
    /// The whole path must fit `sun_path` (107 bytes): `dir` may be about 80 bytes long.
    pub fn bind_unix(dir: &Path) -> Result<Endpoint> {
        let dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| CollectiveError::io("reading the current directory", e))?
                .join(dir)
        };
        let socket_dir = dir.join(format!("ec-{}", random_hex(8)?));
        let path = socket_dir.join("s");
        check_unix_path(&path).map_err(|reason| CollectiveError::InvalidAddress {
            input: crate::error::quote(&path.to_string_lossy()),
            reason,
        })?;
        DirBuilder::new()
            .mode(0o700)
            .create(&socket_dir)
            .map_err(|e| CollectiveError::io(format!("creating {}", socket_dir.display()), e))?;
        let bound = (|| -> io::Result<Socket> {
            let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
            socket.bind(&SockAddr::unix(&path)?)?;
            fs::set_permissions(&path, Permissions::from_mode(0o600))?;
            socket.listen(LISTEN_BACKLOG)?;
            socket.set_nonblocking(true)?;
            Ok(socket)
        })();
        let listener = match bound {
            Ok(listener) => listener,
            Err(e) => {
                let _ = fs::remove_file(&path);
                let _ = fs::remove_dir(&socket_dir);
                return Err(CollectiveError::io(
                    format!("binding {}", path.display()),
                    e,
                ));
            }
        };
        Endpoint::new(listener, PeerAddr::Unix(path), Some(socket_dir))
    }

    /// Binds a TCP listener on an ephemeral port of `ip`, which must be an address the
    /// peers can reach (not 0.0.0.0 or ::).
    pub fn bind_tcp(ip: IpAddr) -> Result<Endpoint> {
        check_tcp_ip(ip).map_err(|reason| CollectiveError::InvalidAddress {
            input: ip.to_string(),
            reason,
        })?;
        let bound = (|| -> io::Result<(Socket, SocketAddr)> {
            let socket = Socket::new(
                Domain::for_address(SocketAddr::new(ip, 0)),
                Type::STREAM,
                None,
            )?;
            socket.bind(&SocketAddr::new(ip, 0).into())?;
            socket.listen(LISTEN_BACKLOG)?;
            socket.set_nonblocking(true)?;
            let local = socket
                .local_addr()?
                .as_socket()
                .ok_or_else(|| io::Error::other("a TCP listener without an IP address"))?;
            Ok((socket, local))
        })();
        let (listener, local) =
            bound.map_err(|e| CollectiveError::io(format!("binding a TCP listener on {ip}"), e))?;
        Endpoint::new(listener, PeerAddr::Tcp(local), None)
    }

    fn new(listener: Socket, addr: PeerAddr, socket_dir: Option<PathBuf>) -> Result<Endpoint> {
        let abort =
            AbortHandle::new().map_err(|e| CollectiveError::io("creating the abort handle", e))?;
        tracing::debug!(%addr, "collective endpoint bound");
        Ok(Endpoint {
            listener,
            addr,
            socket_dir,
            abort,
        })
    }

    /// The address to report to the driver.
    pub fn addr(&self) -> &PeerAddr {
        &self.addr
    }

    /// The handle that aborts [`crate::Communicator::connect`] on this endpoint and every
    /// collective of the communicator it becomes.
    pub fn abort_handle(&self) -> AbortHandle {
        self.abort.clone()
    }

    /// Accepts one connection (non-blocking, close-on-exec), or `Ok(None)` once `deadline`
    /// passes.
    pub(crate) fn accept(&self, deadline: Instant) -> Result<Option<Socket>> {
        loop {
            if self.abort.is_aborted() {
                return Err(CollectiveError::Aborted);
            }
            match self.listener.accept() {
                Ok((socket, _)) => return Ok(Some(socket)),
                Err(e) if is_transient_accept_error(&e) => {}
                Err(e) => {
                    return Err(CollectiveError::io(
                        format!("accepting on {}", self.addr),
                        e,
                    ))
                }
            }
            let mut fds = [
                poll::entry(self.listener.as_raw_fd(), poll::POLLIN),
                poll::entry(self.abort.wake_fd(), poll::POLLIN),
            ];
            let ready = poll::wait(&mut fds, Some(deadline))
                .map_err(|e| CollectiveError::io("polling the listener", e))?;
            if !ready {
                return Ok(None);
            }
        }
    }
}

/// Errors after which `accept` is simply retried: nothing pending, a signal, or a
/// connection that died in the queue.
fn is_transient_accept_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
    ) || e.raw_os_error() == Some(libc::EPROTO)
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let (Some(dir), PeerAddr::Unix(path)) = (&self.socket_dir, &self.addr) {
            if let Err(e) = fs::remove_file(path) {
                tracing::debug!(path = %path.display(), error = %e, "removing the endpoint's socket file");
            }
            if let Err(e) = fs::remove_dir(dir) {
                tracing::debug!(dir = %dir.display(), error = %e, "removing the endpoint's directory");
            }
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("addr", &self.addr)
            .finish()
    }
}

/// `2 * bytes` lowercase hex digits from the OS's random source.
pub(crate) fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::getrandom(&mut buf).map_err(|e| {
        CollectiveError::io("reading random bytes", io::Error::other(e.to_string()))
    })?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn unix_endpoint_is_private_and_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = Endpoint::bind_unix(dir.path()).unwrap();
        let PeerAddr::Unix(path) = endpoint.addr().clone() else {
            panic!("not a unix address")
        };
        assert!(path.starts_with(dir.path()));
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777,
            0o700
        );
        assert_eq!(
            PeerAddr::parse(&endpoint.addr().to_string()).unwrap(),
            *endpoint.addr()
        );
        drop(endpoint);
        assert!(!path.exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn tcp_endpoint_has_a_port_and_refuses_unspecified_ip() {
        let endpoint = Endpoint::bind_tcp("127.0.0.1".parse().unwrap()).unwrap();
        let PeerAddr::Tcp(addr) = endpoint.addr() else {
            panic!("not a tcp address")
        };
        assert_ne!(addr.port(), 0);
        let err = Endpoint::bind_tcp("0.0.0.0".parse().unwrap()).unwrap_err();
        assert!(err.to_string().contains("unspecified"), "{err}");
    }

    #[test]
    fn too_long_unix_dir_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join("d".repeat(100));
        let err = Endpoint::bind_unix(&long).unwrap_err();
        assert!(err.to_string().contains("107 bytes"), "{err}");
    }
}
