//! Input formats: text files cut into byte-range splits.

pub mod text_input;
