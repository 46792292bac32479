//! `barrier`: the dissemination barrier (Hensgen, Finkel and Manber 1988).
//!
//! Invariants: `ceil(log2 p)` rounds; in round `k` rank `r` sends an empty frame to
//! `r + 2^k` and receives one from `r - 2^k` (mod `p`), so no rank leaves before every rank
//! has entered.

use crate::call::Call;
use crate::error::Result;

pub(crate) fn barrier(call: &mut Call<'_>) -> Result<()> {
    let (p, r) = (call.world, call.rank);
    let (mut distance, mut step) = (1, 0);
    while distance < p {
        let to = (r + distance) % p;
        let from = (r + p - distance) % p;
        call.sendrecv_into(to, &[], from, &mut [], step, 0)?;
        distance <<= 1;
        step += 1;
    }
    Ok(())
}
