//! The executor's gRPC client of the driver: the endpoint (keepalives, flow control)
//! and the client that sends the executor secret with every call. A leaf: it knows
//! nothing of registration, workers or binaries, which all use it.

use std::time::Duration;

use ember_proto::auth::{AddSecret, MAX_MESSAGE_BYTES};
use ember_proto::driver_client::DriverClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// A driver client that sends the executor secret with every call.
pub type DriverConn = DriverClient<InterceptedService<Channel, AddSecret>>;

/// The endpoint for driver URL `url` (`http://host:port`), with keepalives so a driver
/// that vanishes without closing the connection is noticed.
pub fn driver_endpoint(url: &str) -> Result<Endpoint, String> {
    let endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| format!("invalid driver URL {url:?}: {e}"))?;
    Ok(endpoint
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        // Binaries are tens of MB: let HTTP/2 flow control grow past its 64 KiB default.
        .http2_adaptive_window(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true))
}

/// A driver client over `channel` sending `secret`.
pub fn driver_client(channel: Channel, secret: Option<&str>) -> Result<DriverConn, String> {
    Ok(
        DriverClient::with_interceptor(channel, AddSecret::new(secret)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
    )
}
