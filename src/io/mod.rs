//! Input formats: text files cut into byte-range splits; quoting bad input in errors.

mod excerpt;
pub mod text_input;

pub use excerpt::{excerpt, Excerpt, EXCERPT_CHARS};
