//! The frame header every collective message starts with, and the checks a receiver
//! applies to it before it reads (or allocates for) the payload.
//!
//! Layout (24 bytes, little-endian): `seq: u32` (the communicator's call counter),
//! `op: u8` ([`OpCode`]), `detail: u8` (element type and reduce op of slice
//! collectives, the broadcast's mode), `step: u16` (the algorithm's round), `len: u64`
//! (payload bytes), `aux: u64` (the element count of slice collectives, the total length
//! of a broadcast).
//!
//! Invariants: [`Expect::check`] accepts a header only if call, collective, detail, step
//! and aux all match what this rank's own call expects, and its length satisfies the
//! [`LenRule`]: exact for slices, at most `max_message_bytes` for byte values; a length
//! above the bound is [`CollectiveError::MessageTooLarge`], reported before allocation.

use crate::error::CollectiveError;

/// Bytes in a frame header.
pub(crate) const HEADER_LEN: usize = 24;

/// Which collective a frame belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum OpCode {
    Barrier = 1,
    Broadcast = 2,
    Reduce = 3,
    AllReduce = 4,
    AllReduceSlice = 5,
    ReduceScatterSlice = 6,
    AllGather = 7,
    AllGatherSlice = 8,
    AllToAll = 9,
}

impl OpCode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            OpCode::Barrier => "barrier",
            OpCode::Broadcast => "broadcast",
            OpCode::Reduce => "reduce",
            OpCode::AllReduce => "all_reduce",
            OpCode::AllReduceSlice => "all_reduce_slice",
            OpCode::ReduceScatterSlice => "reduce_scatter_slice",
            OpCode::AllGather => "all_gather",
            OpCode::AllGatherSlice => "all_gather_slice",
            OpCode::AllToAll => "all_to_all",
        }
    }

    fn name_of(code: u8) -> String {
        use OpCode::*;
        [
            Barrier,
            Broadcast,
            Reduce,
            AllReduce,
            AllReduceSlice,
            ReduceScatterSlice,
            AllGather,
            AllGatherSlice,
            AllToAll,
        ]
        .into_iter()
        .find(|op| *op as u8 == code)
        .map_or_else(
            || format!("unknown op code {code}"),
            |op| op.name().to_string(),
        )
    }
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) seq: u32,
    pub(crate) op: u8,
    pub(crate) detail: u8,
    pub(crate) step: u16,
    pub(crate) len: u64,
    pub(crate) aux: u64,
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&self.seq.to_le_bytes());
        b[4] = self.op;
        b[5] = self.detail;
        b[6..8].copy_from_slice(&self.step.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.aux.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8; HEADER_LEN]) -> Header {
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Header {
            seq: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
            op: b[4],
            detail: b[5],
            step: u16::from_le_bytes([b[6], b[7]]),
            len: u64_at(8),
            aux: u64_at(16),
        }
    }
}

/// What a frame's length may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LenRule {
    /// Exactly this many bytes (slices: the receiver knows the size).
    Exact(u64),
    /// At most this many bytes (byte values: `max_message_bytes`).
    AtMost(u64),
}

/// What this rank's call expects of the next frame from one peer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expect {
    pub(crate) seq: u32,
    pub(crate) op: OpCode,
    pub(crate) detail: u8,
    pub(crate) step: u16,
    pub(crate) len: LenRule,
    /// `None`: any aux (the receiver learns it from the frame, e.g. a broadcast's total).
    pub(crate) aux: Option<u64>,
}

impl Expect {
    /// Checks `got`, a header from rank `rank`.
    pub(crate) fn check(&self, rank: usize, got: &Header) -> Result<(), CollectiveError> {
        let violation = |what: String| CollectiveError::Protocol { rank, what };
        if got.seq != self.seq || got.op != self.op as u8 {
            return Err(violation(format!(
                "sent {} (call #{}) while this rank is in {} (call #{}): the ranks do not call the same collectives in the same order",
                OpCode::name_of(got.op),
                got.seq,
                self.op.name(),
                self.seq
            )));
        }
        if got.detail != self.detail {
            return Err(violation(format!(
                "{} with detail code {:#04x} where this rank has {:#04x} (another element type, reduce op or mode)",
                self.op.name(),
                got.detail,
                self.detail
            )));
        }
        if got.step != self.step {
            return Err(violation(format!(
                "{} step {} where this rank is at step {}",
                self.op.name(),
                got.step,
                self.step
            )));
        }
        if let Some(aux) = self.aux {
            if got.aux != aux {
                return Err(violation(format!(
                    "{} over {} elements where this rank has {} (the ranks' lengths differ)",
                    self.op.name(),
                    got.aux,
                    aux
                )));
            }
        }
        match self.len {
            LenRule::Exact(len) if got.len != len => Err(violation(format!(
                "{} step {}: a {}-byte frame where {} bytes are expected",
                self.op.name(),
                self.step,
                got.len,
                len
            ))),
            LenRule::AtMost(max) if got.len > max => Err(CollectiveError::MessageTooLarge {
                rank,
                len: got.len,
                max,
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(len: LenRule) -> Expect {
        Expect {
            seq: 7,
            op: OpCode::AllGather,
            detail: 0,
            step: 2,
            len,
            aux: Some(5),
        }
    }

    fn header(len: u64) -> Header {
        Header {
            seq: 7,
            op: OpCode::AllGather as u8,
            detail: 0,
            step: 2,
            len,
            aux: 5,
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let h = Header {
            seq: u32::MAX,
            op: 9,
            detail: 0x31,
            step: 513,
            len: u64::MAX - 1,
            aux: 1 << 40,
        };
        assert_eq!(Header::decode(&h.encode()), h);
    }

    #[test]
    fn checks_every_field() {
        assert!(expect(LenRule::Exact(8)).check(1, &header(8)).is_ok());
        assert!(expect(LenRule::AtMost(8)).check(1, &header(3)).is_ok());
        let cases: Vec<(Header, &str)> = vec![
            (
                Header {
                    seq: 8,
                    ..header(8)
                },
                "call #8",
            ),
            (Header { op: 1, ..header(8) }, "barrier"),
            (
                Header {
                    op: 200,
                    ..header(8)
                },
                "unknown op code 200",
            ),
            (
                Header {
                    detail: 3,
                    ..header(8)
                },
                "detail code",
            ),
            (
                Header {
                    step: 3,
                    ..header(8)
                },
                "step 3",
            ),
            (
                Header {
                    aux: 6,
                    ..header(8)
                },
                "over 6 elements",
            ),
            (header(9), "9-byte frame"),
        ];
        for (h, want) in cases {
            let err = expect(LenRule::Exact(8)).check(4, &h).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("rank 4") && text.contains(want), "{text}");
        }
        let err = expect(LenRule::AtMost(8))
            .check(2, &header(u64::MAX))
            .unwrap_err();
        assert!(matches!(
            err,
            CollectiveError::MessageTooLarge {
                rank: 2,
                len: u64::MAX,
                max: 8
            }
        ));
    }
}
