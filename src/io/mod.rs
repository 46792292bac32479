//! Input and output formats: text files cut into byte-range splits, ember's object
//! files, Parquet (and CSV) through maintained crates; quoting bad input in errors.

#[cfg(feature = "parquet")]
pub mod arrow_batch;
pub(crate) mod commit;
#[cfg(feature = "csv")]
pub mod csv;
mod excerpt;
pub mod object_file;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod storage;
pub mod text_input;

pub use excerpt::{excerpt, Excerpt, EXCERPT_CHARS};
