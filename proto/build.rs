//! Compiles `proto/ember.proto` with the vendored `protoc`, so a fresh machine needs no
//! system protobuf install.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    // A shuffle input names each executor once and every reduce task's description
    // repeats the names: as `Bytes` (wire-identical to `string`) they are shared, not
    // copied, when the driver clones the host list into a task.
    // The compact input's packed arrays likewise: built once, shared by many reducers.
    // A broadcast value likewise: the driver holds a session's value once and every
    // executor's launch shares it (a 200 MiB value to ten executors is not ten copies).
    config.bytes([
        ".ember.v1.MapHost",
        ".ember.v1.ShuffleInput",
        ".ember.v1.BroadcastValue",
        // A pushed replica's pieces: every target of a push shares each piece.
        ".ember.v1.MapOutputPiece",
        ".ember.v1.CachedBlockPiece",
    ]);
    // A barrier task's stage key is a credential: its Debug is hand-written to hide it
    // (`src/redacted.rs`).
    // A pushed replica's header carries its session's shuffle key (and a piece up to a
    // MiB of data), a raw push's header the executor secret too: written by hand too.
    config.skip_debug([
        ".ember.v1.BarrierTask",
        ".ember.v1.MapOutputPiece",
        ".ember.v1.CachedBlockPiece",
        ".ember.v1.RawPushHeader",
    ]);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Servers only with the `server` feature (the daemons): a job binary links none.
        .server_mod_attribute("ember.v1", "#[cfg(feature = \"server\")]")
        .compile_with_config(config, &["proto/ember.proto"], &["proto"])?;
    Ok(())
}
