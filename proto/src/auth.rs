//! The cluster's secrets on the wire: every gRPC call carries one as
//! `authorization: Bearer <secret>` metadata, and every server checks it before doing
//! anything else.
//!
//! Two secrets reach the driver's gRPC port: the **cluster secret** (clients' calls:
//! sessions, jobs, binary uploads, status) and the **executor secret** (executors'
//! calls: `ExecutorChannel`, `FetchBinary`). [`RequireSecrets`] says which one a call
//! carried ([`Caller`]); each method then asks for its own ([`require`]). Secret files
//! are read by [`load_secret_file`], and [`check_strength`] refuses short secrets off
//! loopback.
//!
//! Session-scoped calls also carry their session's token as [`SESSION_TOKEN_METADATA`]
//! (see [`session_token`]); the driver compares it with [`constant_time_eq`].
//!
//! Invariants: a server configured with a secret refuses any call whose metadata does
//! not carry exactly that secret (compared in constant time); on the driver, a call
//! carrying one role's secret never passes another role's [`require`]; a role without a
//! secret is open, which the daemons allow only on loopback addresses. Secrets,
//! session tokens and shuffle keys never appear in a log line or an error message.

use std::path::Path;

use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Metadata key that carries the secret.
pub const AUTH_METADATA: &str = "authorization";

/// Metadata key that carries a session's token on session-scoped calls.
pub const SESSION_TOKEN_METADATA: &str = "ember-session-token";

/// Environment variable holding the secret when no secret file is given.
pub const SECRET_ENV: &str = "EMBER_SECRET";

/// Environment variable naming a file that holds the secret (a compose or Kubernetes
/// secret mount), used when no secret file is given on the command line; it wins over
/// [`SECRET_ENV`].
pub const SECRET_FILE_ENV: &str = "EMBER_SECRET_FILE";

/// Environment variable naming the executor secret's file, used when
/// `--executor-secret-file` is not given.
pub const EXECUTOR_SECRET_FILE_ENV: &str = "EMBER_EXECUTOR_SECRET_FILE";

/// Fewest characters a secret must have on a daemon bound to a non-loopback address.
pub const MIN_SECRET_CHARS: usize = 32;

/// Largest message any ember endpoint decodes (plans, task results, chunks).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// The cluster secret: the contents of `file` (trimmed) if given, else of the file
/// `EMBER_SECRET_FILE` names, else `EMBER_SECRET`, else none. An empty secret is an
/// error: it would look set but protect nothing.
pub fn load_secret(file: Option<&Path>) -> Result<Option<String>, String> {
    let from_env = std::env::var_os(SECRET_FILE_ENV).map(std::path::PathBuf::from);
    let file = file.or(from_env.as_deref());
    let secret = match file {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read secret file {}: {e}", f.display()))?
                .trim()
                .to_string(),
        ),
        None => std::env::var(SECRET_ENV).ok().map(|s| s.trim().to_string()),
    };
    match secret {
        Some(s) if s.is_empty() => Err(match file {
            Some(f) => format!("secret file {} is empty", f.display()),
            None => format!("{SECRET_ENV} is set but empty"),
        }),
        other => Ok(other),
    }
}

/// A secret from `flag`'s file `file` if given, else from the file environment variable
/// `env` names, else none; trimmed. An empty secret is an error naming the file.
/// `flag` (e.g. `--executor-secret-file`) only names the source in errors.
pub fn load_secret_file(
    file: Option<&Path>,
    env: &str,
    flag: &str,
) -> Result<Option<String>, String> {
    let from_env = std::env::var_os(env).map(std::path::PathBuf::from);
    let Some(file) = file.or(from_env.as_deref()) else {
        return Ok(None);
    };
    let secret = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {flag} {}: {e}", file.display()))?
        .trim()
        .to_string();
    if secret.is_empty() {
        return Err(format!("{flag} {} is empty", file.display()));
    }
    Ok(Some(secret))
}

/// The command-line flag naming the executor secret's file, as errors name it.
pub const EXECUTOR_SECRET_FLAG: &str = "--executor-secret-file";

/// The cluster secret ([`load_secret`]) of a daemon bound to `host`, checked for
/// strength ([`check_strength`]); `file` is `--secret-file`'s value, named in errors.
pub fn load_cluster_secret(file: Option<&Path>, host: &str) -> Result<Option<String>, String> {
    let secret = load_secret(file)?;
    if let Some(s) = &secret {
        let source = match file {
            Some(f) => format!("--secret-file {}", f.display()),
            None => "the cluster secret (EMBER_SECRET_FILE or EMBER_SECRET)".to_string(),
        };
        check_strength(s, host, &source)?;
    }
    Ok(secret)
}

/// The executor secret of a daemon bound to `host`: `file` (`--executor-secret-file`),
/// else the file [`EXECUTOR_SECRET_FILE_ENV`] names, else none; checked for strength.
pub fn load_executor_secret(file: Option<&Path>, host: &str) -> Result<Option<String>, String> {
    let secret = load_secret_file(file, EXECUTOR_SECRET_FILE_ENV, EXECUTOR_SECRET_FLAG)?;
    if let Some(s) = &secret {
        check_strength(s, host, EXECUTOR_SECRET_FLAG)?;
    }
    Ok(secret)
}

/// Refuses a secret shorter than [`MIN_SECRET_CHARS`] on a daemon bound to `host` when
/// `host` is not loopback; `source` names where the secret came from (flag and file)
/// for the error. The secret itself is never quoted.
pub fn check_strength(secret: &str, host: &str, source: &str) -> Result<(), String> {
    let chars = secret.chars().count();
    if chars < MIN_SECRET_CHARS && !is_loopback_host(host) {
        return Err(format!(
            "{source} holds a secret of {chars} character{}; on a non-loopback address \
             ({host}) a secret needs at least {MIN_SECRET_CHARS} (e.g. `openssl rand -hex 32`)",
            if chars == 1 { "" } else { "s" }
        ));
    }
    Ok(())
}

/// Whether `host` (an IP address or name) is a loopback address.
pub fn is_loopback_host(host: &str) -> bool {
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

/// Whether `a == b`, in time that depends only on the lengths (for secrets and tokens).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks a request's secret against `expected`; `Err(UNAUTHENTICATED)` if it does not
/// match.
pub fn check<T>(req: &Request<T>, expected: Option<&str>) -> Result<(), Status> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let given = req
        .metadata()
        .get(AUTH_METADATA)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), expected.as_bytes()) => Ok(()),
        Some(_) => Err(Status::unauthenticated("wrong cluster secret")),
        None => Err(Status::unauthenticated(
            "missing cluster secret (authorization metadata)",
        )),
    }
}

/// 256 fresh random bits from the operating system, as 64 lower-case hex digits: a
/// session token or shuffle key nobody can guess.
pub fn random_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("the operating system's random source failed: {e}"))?;
    Ok(crate::digest::to_hex(&bytes))
}

/// The session token a request carries, if any.
pub fn session_token<T>(req: &Request<T>) -> Option<&str> {
    req.metadata()
        .get(SESSION_TOKEN_METADATA)
        .and_then(|v| v.to_str().ok())
}

/// Adds session token `token` to `req`; fails only if the token is not a valid header
/// value (tokens from [`random_token`] always are).
pub fn with_session_token<T>(mut req: Request<T>, token: &str) -> Result<Request<T>, Status> {
    let value = token
        .parse()
        .map_err(|_| Status::invalid_argument("the session token is not printable ASCII"))?;
    req.metadata_mut().insert(SESSION_TOKEN_METADATA, value);
    Ok(req)
}

/// A server-side interceptor that refuses calls without the secret and logs them.
#[cfg(feature = "server")]
#[derive(Clone)]
pub struct RequireSecret {
    secret: Option<std::sync::Arc<str>>,
    endpoint: &'static str,
}

#[cfg(feature = "server")]
impl RequireSecret {
    pub fn new(secret: Option<&str>, endpoint: &'static str) -> Self {
        RequireSecret {
            secret: secret.map(std::sync::Arc::from),
            endpoint,
        }
    }
}

#[cfg(feature = "server")]
impl Interceptor for RequireSecret {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        match check(&req, self.secret.as_deref()) {
            Ok(()) => Ok(req),
            Err(status) => {
                let peer = req
                    .remote_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|| "unknown peer".into());
                tracing::warn!(endpoint = self.endpoint, %peer, reason = status.message(), "refused a call");
                Err(status)
            }
        }
    }
}

/// Which credentials a call to the driver carried, as [`RequireSecrets`] found them:
/// each flag is true if that role's secret was given (or that role needs none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    /// May make clients' calls (carried the cluster secret, or there is none).
    pub client: bool,
    /// May make executors' calls (carried the executor secret, or there is none).
    pub executor: bool,
}

/// The roles a driver call can require.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A job client: needs the cluster secret.
    Client,
    /// An executor: needs the executor secret.
    Executor,
}

/// `Ok` if the call `req` (seen by [`RequireSecrets`]) may use `endpoint`, which is for
/// `role`; else PERMISSION_DENIED (a valid secret of the other role) or UNAUTHENTICATED,
/// logged at warn with the endpoint and the peer, never the secret.
#[cfg(feature = "server")]
pub fn require<T>(req: &Request<T>, role: Role, endpoint: &'static str) -> Result<(), Status> {
    // No interceptor ran (a service built without one): nothing is configured.
    let caller = req.extensions().get::<Caller>().copied().unwrap_or(Caller {
        client: true,
        executor: true,
    });
    let status = match role {
        Role::Executor if caller.executor => return Ok(()),
        Role::Client if caller.client => return Ok(()),
        Role::Executor if caller.client => Status::permission_denied(format!(
            "{endpoint} is for executors: it needs the executor secret \
             (--executor-secret-file), and the cluster secret is not it"
        )),
        Role::Client if caller.executor => Status::permission_denied(format!(
            "{endpoint} is for job clients: it needs the cluster secret, not the executor secret"
        )),
        Role::Executor => Status::unauthenticated(format!(
            "missing executor secret (authorization metadata): {endpoint} is for executors"
        )),
        Role::Client => Status::unauthenticated(format!(
            "missing cluster secret (authorization metadata) for {endpoint}"
        )),
    };
    let peer = req
        .remote_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|| "unknown peer".into());
    tracing::warn!(endpoint, %peer, reason = status.message(), "refused a call");
    Err(status)
}

/// The driver's server-side interceptor: when the driver has any secret, refuses a call
/// that carries neither the cluster secret nor the executor secret (a missing secret
/// included, so no body is decoded for it), and records in a [`Caller`] extension which
/// roles the call may act in (checked per method by [`require`]).
#[cfg(feature = "server")]
#[derive(Clone)]
pub struct RequireSecrets {
    cluster: Option<std::sync::Arc<str>>,
    executor: Option<std::sync::Arc<str>>,
    endpoint: &'static str,
}

#[cfg(feature = "server")]
impl RequireSecrets {
    pub fn new(cluster: Option<&str>, executor: Option<&str>, endpoint: &'static str) -> Self {
        RequireSecrets {
            cluster: cluster.map(std::sync::Arc::from),
            executor: executor.map(std::sync::Arc::from),
            endpoint,
        }
    }
}

#[cfg(feature = "server")]
impl Interceptor for RequireSecrets {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let given = req
            .metadata()
            .get(AUTH_METADATA)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string);
        let matches = |s: &Option<std::sync::Arc<str>>| match (s, &given) {
            (None, _) => true,
            (Some(s), Some(g)) => constant_time_eq(g.as_bytes(), s.as_bytes()),
            (Some(_), None) => false,
        };
        let caller = Caller {
            client: matches(&self.cluster),
            executor: matches(&self.executor),
        };
        let any_secret = self.cluster.is_some() || self.executor.is_some();
        // Refused here, before tonic decodes a body, whether the secret is wrong or
        // missing; `require` only tells the roles apart afterwards.
        if any_secret && !caller.client && !caller.executor {
            let peer = req
                .remote_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|| "unknown peer".into());
            let status = Status::unauthenticated(if given.is_some() {
                "wrong secret: neither the cluster secret nor the executor secret"
            } else {
                "missing cluster secret (authorization metadata): every call to this \
                 driver needs the cluster secret (executors: the executor secret)"
            });
            tracing::warn!(endpoint = self.endpoint, %peer, reason = status.message(), "refused a call");
            return Err(status);
        }
        req.extensions_mut().insert(caller);
        Ok(req)
    }
}

/// A client-side interceptor that adds the secret to every call.
#[derive(Clone)]
pub struct AddSecret {
    value: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl AddSecret {
    /// Fails if the secret cannot be carried in a header (non-visible-ASCII bytes).
    pub fn new(secret: Option<&str>) -> Result<Self, String> {
        let value = match secret {
            Some(s) => Some(
                format!("Bearer {s}")
                    .parse()
                    .map_err(|_| "the cluster secret must be printable ASCII".to_string())?,
            ),
            None => None,
        };
        Ok(AddSecret { value })
    }
}

impl Interceptor for AddSecret {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.value {
            req.metadata_mut().insert(AUTH_METADATA, v.clone());
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(secret: Option<&str>) -> Request<()> {
        let mut add = AddSecret::new(secret).unwrap();
        add.call(Request::new(())).unwrap()
    }

    #[test]
    fn right_secret_passes_wrong_or_missing_is_refused() {
        assert!(check(&with(Some("s3cret")), Some("s3cret")).is_ok());
        let wrong = check(&with(Some("nope")), Some("s3cret")).unwrap_err();
        assert_eq!(wrong.code(), tonic::Code::Unauthenticated);
        assert!(wrong.message().contains("wrong cluster secret"));
        let missing = check(&with(None), Some("s3cret")).unwrap_err();
        assert!(missing.message().contains("missing cluster secret"));
        assert!(check(&with(None), None).is_ok());
    }

    #[test]
    fn random_tokens_are_256_bit_hex_and_differ() {
        let (a, b) = (random_token().unwrap(), random_token().unwrap());
        assert_eq!(a.len(), 64);
        assert!(crate::digest::is_sha256_hex(&a), "{a}");
        assert_ne!(a, b);
        let req = with_session_token(Request::new(()), &a).unwrap();
        assert_eq!(session_token(&req), Some(a.as_str()));
        assert_eq!(session_token(&Request::new(())), None);
    }

    #[cfg(feature = "server")]
    #[test]
    fn each_secret_opens_only_its_role() {
        let mut both = RequireSecrets::new(Some("client"), Some("executor"), "driver");
        let as_client = both.call(with(Some("client"))).unwrap();
        assert!(require(&as_client, Role::Client, "SubmitJob").is_ok());
        let refused = require(&as_client, Role::Executor, "ExecutorChannel").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert!(refused
            .message()
            .contains("ExecutorChannel is for executors"));
        let as_executor = both.call(with(Some("executor"))).unwrap();
        assert!(require(&as_executor, Role::Executor, "FetchBinary").is_ok());
        let refused = require(&as_executor, Role::Client, "SubmitJob").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        let none = both.call(with(None)).unwrap_err();
        assert_eq!(none.code(), tonic::Code::Unauthenticated);
        assert!(
            none.message().contains("missing cluster secret"),
            "{none:?}"
        );
        let mut executor_only = RequireSecrets::new(None, Some("executor"), "driver");
        let open_client = executor_only.call(with(None)).unwrap();
        assert!(require(&open_client, Role::Client, "SubmitJob").is_ok());
        let refused = require(&open_client, Role::Executor, "ExecutorChannel").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        let wrong = both.call(with(Some("nope"))).unwrap_err();
        assert_eq!(wrong.code(), tonic::Code::Unauthenticated);
        let mut open = RequireSecrets::new(None, None, "driver");
        let anyone = open.call(with(None)).unwrap();
        assert!(require(&anyone, Role::Executor, "ExecutorChannel").is_ok());
    }

    #[test]
    fn short_secrets_are_refused_off_loopback_only() {
        assert!(check_strength("short", "127.0.0.1", "--secret-file f").is_ok());
        let err = check_strength("short", "0.0.0.0", "--secret-file f").unwrap_err();
        assert!(
            err.contains("--secret-file f") && err.contains("at least 32"),
            "{err}"
        );
        assert!(!err.contains("short"), "{err}");
        assert!(check_strength(&"x".repeat(32), "10.0.0.1", "f").is_ok());
    }

    #[test]
    fn loopback_hosts() {
        assert!(is_loopback_host("127.0.0.1"));
        assert!(is_loopback_host("::1"));
        assert!(is_loopback_host("localhost"));
        assert!(!is_loopback_host("0.0.0.0"));
        assert!(!is_loopback_host("10.1.2.3"));
    }

    #[test]
    fn secret_file_is_trimmed_and_empty_is_an_error() {
        let dir = std::env::temp_dir().join(format!("ember-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("secret");
        std::fs::write(&f, "abc\n").unwrap();
        assert_eq!(load_secret(Some(&f)).unwrap().as_deref(), Some("abc"));
        std::fs::write(&f, "\n").unwrap();
        assert!(load_secret(Some(&f)).unwrap_err().contains("is empty"));
        let missing = dir.join("missing");
        assert!(load_secret(Some(&missing))
            .unwrap_err()
            .contains("cannot read secret file"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
