//! The driver daemon (`ember-driver`): the gRPC server around the scheduler of
//! `ember-scheduler`: executor registry and heartbeats, the binary store, client
//! sessions and job streaming, the status page. It never runs user code and does not
//! link the job library.

pub mod server;
