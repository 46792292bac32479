//! `all_to_all`: the pairwise exchange; in step `s` (1 ..= p - 1) rank `r` sends its value
//! for `r + s` while receiving the value from `r - s` (mod `p`).
//!
//! Invariants: `values[j]` goes to rank `j`, and the result's `[j]` came from rank `j`
//! (its own at `[r]`, moved, not copied); every value received is bounded by
//! `max_message_bytes`.

use crate::call::Call;
use crate::error::{CollectiveError, Result};

pub(crate) fn all_to_all(call: &mut Call<'_>, mut values: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
    let (p, r) = (call.world, call.rank);
    if values.len() != p {
        return Err(CollectiveError::InvalidArgument(format!(
            "all_to_all takes one value per rank: {} values for {p} ranks",
            values.len()
        )));
    }
    for value in &values {
        call.check_own_size(value.len())?;
    }
    let mut out = vec![Vec::new(); p];
    out[r] = std::mem::take(&mut values[r]);
    for s in 1..p {
        let to = (r + s) % p;
        let from = (r + p - s) % p;
        out[from] = call.sendrecv_owned(to, &values[to], 0, from, 0, s)?;
        values[to] = Vec::new();
    }
    Ok(out)
}
