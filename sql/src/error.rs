//! The errors of the SQL layer: DataFusion's (parsing, planning, execution), ember's
//! (running the stages), and the plan shapes this layer cannot cut into stages.

/// What went wrong running a query.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// DataFusion refused or failed the query (a parse or planning error, an unknown
    /// table or column, an expression that failed on a value).
    #[error("{0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    /// Running the query's stages on ember failed.
    #[error("{0}")]
    Ember(#[from] ember::EmberError),
    /// A physical plan this layer cannot run on ember's stages (names the operator).
    #[error("cannot run this plan on ember's stages: {0}")]
    Unsupported(String),
    /// A setting of the SQL layer is invalid (names it and quotes the value).
    #[error("{0}")]
    Config(String),
    /// Writing a result failed (names the path).
    #[error("{0}")]
    Output(String),
}

/// A result of the SQL layer.
pub type Result<T> = std::result::Result<T, SqlError>;
